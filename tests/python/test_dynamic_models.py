"""Models compiled once for every shape (issue 49): symbolic dims from make_input, ONNX dim_params and
from_torch(shapes=), run at many shapes (1, primes, larger) against numpy and PyTorch, with named errors
for shapes that break the model's constraints, and the per-shape memory report."""
import numpy as np
import pytest
import torch

import kiln
import kiln.graph as kg

RNG = np.random.default_rng(49)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def elementwise_model():
    x = kg.make_input("x", ("batch", 8))
    y = kg.make_input("y", ("batch", 8))
    s, = kg.make_op("Add", [x, y])
    r, = kg.make_op("Relu", [s])
    e, = kg.make_op("Exp", [r])
    return kg.make_graph([x, y], [e])


def test_elementwise_model_runs_at_every_batch():
    exe = kiln.compile(elementwise_model())
    assert exe.shape_vars == ["batch"]
    for b in (1, 2, 3, 17, 64, 255):
        x, y = rand(b, 8), rand(b, 8)
        out = exe.run([x, y])[0]
        assert out.shape == (b, 8)
        np.testing.assert_allclose(out, np.exp(np.maximum(x + y, 0)), rtol=1e-5)


def test_shapes_that_disagree_are_named():
    exe = kiln.compile(elementwise_model(), dims={"batch": (1, 32)})
    with pytest.raises(kiln.KilnError, match="batch"):
        exe.run([rand(3, 8), rand(4, 8)])  # one variable, two values
    with pytest.raises(kiln.KilnError, match="dimension 1"):
        exe.run([rand(3, 9), rand(3, 9)])  # a static dim
    with pytest.raises(kiln.KilnError, match="batch.*33|33.*batch"):
        exe.run([rand(33, 8), rand(33, 8)])  # outside the declared range
    with pytest.raises(kiln.KilnError, match="'seq', which the model does not have"):
        kiln.compile(elementwise_model(), dims={"seq": (1, 8)})


def test_memory_is_reported_per_shape():
    exe = kiln.compile(elementwise_model(), dims={"batch": (1, 64)})
    small, large = exe.memory({"batch": 2}), exe.memory({"batch": 64})
    assert 0 <= small["arena_bytes"] <= large["arena_bytes"]
    assert exe.memory_bound()["arena_bytes"] >= large["arena_bytes"]
    with pytest.raises(kiln.KilnError, match="memory"):
        exe.memory()
    assert kiln.compile(elementwise_model()).memory_bound() is None  # no range: no bound


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 96)
        self.b = torch.nn.Linear(96, 10)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))


def test_mlp_with_a_dynamic_batch_matches_torch():
    torch.manual_seed(0)
    m = Mlp().eval()
    g = kg.from_torch(m, torch.randn(4, 64), shapes={"input0": ("batch", 64)})
    assert g.input_types == [(("batch", 64), "float32")]
    exe = kiln.compile(g)
    for b in (1, 5, 31, 128):
        x = torch.randn(b, 64)
        np.testing.assert_allclose(exe.run([x.numpy()])[0], m(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_bert_layer_compiled_once_for_every_sequence_length():
    torch.manual_seed(0)
    m = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, dropout=0.0, batch_first=True).eval()
    g = kg.from_torch(m, torch.randn(1, 16, 128), shapes={"input0": ("batch", "seq", 128)})
    exe = kiln.compile(g)
    assert sorted(exe.shape_vars) == ["batch", "seq"]
    for b, s in ((1, 1), (1, 7), (2, 33), (1, 64), (3, 100)):
        x = torch.randn(b, s, 128)
        with torch.no_grad():
            want = m(x).numpy()
        np.testing.assert_allclose(exe.run([x.numpy()])[0], want, rtol=1e-4, atol=2e-4)


def test_exported_dynamic_model_keeps_its_shape_variables(tmp_path):
    exe = kiln.compile(elementwise_model(), dims={"batch": (1, 100)})
    path = tmp_path / "dyn.so"
    exe.export_library(path)
    m = kiln.runtime.load_model(path)
    assert m.shape_vars == {"batch": (1, 100)}
    assert m.input_types == [(("batch", 8), "float32"), (("batch", 8), "float32")]
    for b in (1, 7, 100):
        x, y = rand(b, 8), rand(b, 8)
        np.testing.assert_allclose(m.run([x, y])[0], np.exp(np.maximum(x + y, 0)), rtol=1e-5)
        assert m.arena_bytes({"batch": b}) == exe.memory({"batch": b})["arena_bytes"]
    with pytest.raises(kiln.KilnError, match="batch"):
        m.run([rand(101, 8), rand(101, 8)])


def test_decoder_step_with_a_growing_kv_cache():
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peers"))
    from torch_models import decoder_block
    d, heads = 64, 4
    block = decoder_block(d, heads)
    hd = d // heads
    example = (torch.randn(2, 1, d), torch.randn(2, heads, 5, hd), torch.randn(2, heads, 5, hd))
    g = kg.from_torch(block, example, shapes={"input0": ("batch", 1, d), "input1": ("batch", heads, "past", hd),
                                               "input2": ("batch", heads, "past", hd)})
    exe = kiln.compile(g)
    builds = kiln.build_count()
    for batch in (1, 3):
        k = torch.randn(batch, heads, 1, hd)
        v = torch.randn(batch, heads, 1, hd)
        for step in range(6):  # the cache grows 1, 2, ... positions, fed back as the next step's input
            x = torch.randn(batch, 1, d)
            with torch.no_grad():
                want = block(x, k, v)
            got = exe.run([x.numpy(), k.numpy(), v.numpy()])
            for g_, w_ in zip(got, want):
                np.testing.assert_allclose(g_, w_.numpy(), rtol=1e-4, atol=1e-4)
            assert got[1].shape == (batch, heads, 2 + step, hd)
            k, v = torch.from_numpy(got[1]), torch.from_numpy(got[2])
    past = 257  # a long cache at once
    x, k, v = torch.randn(2, 1, d), torch.randn(2, heads, past, hd), torch.randn(2, heads, past, hd)
    with torch.no_grad():
        want = block(x, k, v)[0].numpy()
    np.testing.assert_allclose(exe.run([x.numpy(), k.numpy(), v.numpy()])[0], want, rtol=1e-4, atol=1e-4)
    assert kiln.build_count() == builds  # no kernel compiled for any new shape


def test_tuning_a_dynamic_model_at_its_likely_sizes(tmp_path):
    torch.manual_seed(0)
    m = Mlp().eval()
    g = kg.from_torch(m, torch.randn(4, 64), shapes={"input0": ("batch", 64)})
    sizes = {"batch": [16, 64]}
    tasks, _ = kiln.tuner.extract_tasks(g, sizes=sizes)
    groups = [name for t in tasks for name in t["groups"]]
    assert any(name.endswith("[batch=16]") for name in groups) and any(name.endswith("[batch=64]") for name in groups)
    db = str(tmp_path / "dyn.db")
    kiln.tune_model(g, trials=4, batch=2, db=db, sizes=sizes, progress=False, confirm_top=0)
    exe = kiln.compile(g, db=db, sizes=sizes, quiet=True)
    tuned = [grp for grp in exe.groups() if grp["schedule"] == "database"]
    assert tuned and all("tuned at batch=" in grp["schedule_detail"] for grp in tuned)
    for b in (1, 16, 37):  # sizes tuned and not: each runs, with the records' schedules
        x = torch.randn(b, 64)
        np.testing.assert_allclose(exe.run([x.numpy()])[0], m(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_size_variants_can_be_turned_off():
    torch.manual_seed(0)
    m = Mlp().eval()
    g = kg.from_torch(m, torch.randn(4, 64), shapes={"input0": ("batch", 64)})
    with_variants = kiln.compile(g)
    single = kiln.compile(g, size_variants=False)
    assert any(grp.get("variants") for grp in with_variants.groups())
    assert not any(grp.get("variants") for grp in single.groups())
    assert single.num_kernels < with_variants.num_kernels
    for b in (1, 9, 300):
        x = torch.randn(b, 64)
        np.testing.assert_allclose(single.run([x.numpy()])[0], m(x).detach().numpy(), rtol=1e-4, atol=1e-4)
