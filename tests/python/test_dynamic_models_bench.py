"""bench/dynamic_models_bench.py's PyTorch peer for the decoder step
(bench/peers/torch_decoder.py): its variants agree, and one tiny step run in
the peer's own process on kiln's inputs gives kiln's output; and the
benches' first-call cost, which plans once at a new shape and not again."""
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
import torch_decoder  # noqa: E402
from dynamic_shapes_bench import first_call_cost  # noqa: E402
import torch_models  # noqa: E402


def test_decoder_variants_agree_and_a_bad_one_is_named():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    d, heads, inputs = torch_decoder.inputs_of([32, 2, 2, 3], None)
    block = torch_models.decoder_block(d, heads)
    ref = [t.numpy() for t in torch_decoder.variant(block, inputs, "eager")()]
    got = [t.numpy() for t in torch_decoder.variant(block, inputs, "jit")()]
    assert [a.shape for a in ref] == [(2, 1, 32), (2, 2, 4, 16), (2, 2, 4, 16)]
    assert max(torch_models.rel_err(g, r) for g, r in zip(got, ref)) < 1e-5
    with pytest.raises(ValueError, match="unknown decoder variant 'onnx'"):
        torch_decoder.variant(block, inputs, "onnx")


def test_decoder_peer_runs_one_step_in_its_own_process_and_matches_kiln(tmp_path):
    torch = pytest.importorskip("torch")
    kiln = pytest.importorskip("kiln")
    d, heads, b, past = 32, 2, 2, 3
    rng = np.random.default_rng(7)
    x, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((b, 1, d), (b, heads, past, d // heads), (b, heads, past, d // heads)))
    paths = {n: str(tmp_path / f"{n}.f32") for n in "xkvy"}
    for n, a in zip("xkv", (x, k, v)):
        a.tofile(paths[n])
    block = torch_models.decoder_block(d, heads)
    cache = ("batch", heads, "past", d // heads)
    example = (torch.randn(1, 1, d), torch.randn(1, heads, 4, d // heads), torch.randn(1, heads, 4, d // heads))
    exe = kiln.compile(kiln.graph.from_torch(block, example, shapes={"input0": ("batch", 1, d), "input1": cache, "input2": cache}))
    want = exe.run([x, k, v])[0]
    with torch_decoder.DecoderPeer(d, heads, b, past, 1, paths) as peer:
        assert "decoder" in peer.label and "best of" in peer.label and peer.label.endswith("1T")
        assert peer.check_error < 1e-5  # against the block in float64, in the peer
        assert peer.env["OMP_NUM_THREADS"] == "1" and not any(key.startswith("KILN_") for key in peer.env)
        times = peer.time(2, 1)
        assert len(times) == 2 and all(0 < t < 1 for t in times)
    got = np.fromfile(paths["y"], dtype=np.float32).reshape(want.shape)
    assert np.max(np.abs(got - want)) <= 1e-5 * max(1.0, float(np.max(np.abs(want))))


def test_first_call_cost_plans_a_new_shape_once():
    torch = pytest.importorskip("torch")
    kiln = pytest.importorskip("kiln")
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    exe = kiln.compile(kiln.graph.from_torch(net, (torch.randn(2, 8),), shapes={"input0": ("batch", 8)}))
    x = np.ones((5, 8), np.float32)
    cost = first_call_cost(exe, lambda: exe.run([x]), seen_calls=3, pause_s=0.01)
    assert cost["plans"] == 1 and cost["plan"] > 0 and cost["first"] > 0 and cost["seen"] > 0
    assert abs(cost["extra"] - (cost["first"] - cost["seen"])) < 1e-9
    assert exe.run_stats()["plans"] == 1 and exe.run_stats()["runs"] == 4
    again = first_call_cost(exe, lambda: exe.run([x]), seen_calls=1, pause_s=0.0)
    assert again["plans"] == 0 and again["plan"] == 0 and again["arena_allocations"] == 0  # a seen shape: no planning, no allocation
