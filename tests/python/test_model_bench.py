"""bench/model_bench.py: its arguments, PyTorch's variants of a model (they
agree and are timed), PyTorch's peak-memory probe, and one row made end to
end with kiln's importer stood in for (it fails, or it gives a wrong graph:
the row says so and the peers are still timed)."""
import importlib.machinery
import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
import launcher  # noqa: E402
import model_bench  # noqa: E402
import ort_peer  # noqa: E402
import torch_models  # noqa: E402
from peer_timing import calls_per_repeat, time_calls, warm_up  # noqa: E402


def test_arguments_quick_defaults_and_errors(capsys):
    a = model_bench.parse_args(["--quick", "--models", "resnet18,bert_layer", "--threads", "2,1,2"])
    assert (a.image_size, a.repeat, a.models, a.threads) == (64, 5, ["resnet18", "bert_layer"], [2, 1])
    a = model_bench.parse_args(["--image-size", "96", "--repeat", "9"])
    assert (a.image_size, a.repeat, a.models) == (96, 9, list(model_bench.DEFAULT_MODELS))
    assert a.threads[0] == 1
    for bad in (["--models", "resnet18,vgg"], ["--threads", "0"], ["--threads", "two"], ["--image-size", "8"]):
        with pytest.raises(SystemExit):
            model_bench.parse_args(bad)
    assert "vgg" in capsys.readouterr().err


def test_table_shows_kilns_error_in_its_row():
    rows = [{"name": "resnet18 1x3x64x64", "threads": 1, "peer": "PyTorch eager NCHW 1T", "peer_min": 5.0, "peer_median": 6.0,
             "torch_peak_mb": 3.0, "kiln_error": "KilnError: no operator Conv\nmore", "peers_failed": ["jit: boom"]},
            {"name": "tiny_cnn 1x3x32x32", "threads": 2, "kiln_min": 1.0, "kiln_median": 1.5, "peer_min": 2.0, "peer_median": 3.0,
             "ratio_median": 0.5, "ratio_min": 0.4, "ratio_max": 0.7, "kiln_arena_mb": 1.25, "compile_s": 2.0, "num_kernels": 4}]
    text = model_bench.format_table(rows)
    first = next(line for line in text.splitlines() if line.startswith("resnet18"))
    assert "kiln FAILED: KilnError: no operator Conv" in first and "more" not in first
    assert "peer did not run: jit: boom" in text and "0.50 (0.40..0.70)" in text and "1.25" in text


def test_scoreboard_runs_the_models_only_when_asked(tmp_path):
    loader = importlib.machinery.SourceFileLoader("scoreboard", os.path.join(ROOT, "bench", "scoreboard"))
    sb = importlib.util.module_from_spec(importlib.util.spec_from_loader("scoreboard", loader))
    loader.exec_module(sb)

    class Args:
        only, quick, trials, db, rounds, repeat_ms, models = [], True, 16, "none.db", 5, 20, ""
    assert sb.bench_commands("build", Args, str(tmp_path)) == []
    Args.models = "resnet18"
    ((what, path, argv, env),) = sb.bench_commands("build", Args, str(tmp_path))
    assert argv[1].endswith("model_bench.py") and argv[2:6] == ["--quick", "--models", "resnet18", "--build"]
    assert argv[-2:] == ["--json", path]
    text = sb.format_table([], [{"name": "resnet18 1x3x64x64", "threads": 1, "kiln_error": "KilnError: no Conv"}])
    assert "kiln failed: KilnError: no Conv" in text


def test_torch_variants_agree_and_time():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    module, x = torch_models.build("tiny_cnn", 32)
    ref = module(x).detach().numpy()
    for impl in torch_models.variants_of("tiny_cnn"):
        run, text = torch_models.variant(module, x, impl)
        assert torch_models.rel_err(run().numpy(), ref) < 1e-5, text
        number = calls_per_repeat(warm_up(run, 2, 0.0), 0.005)
        times = time_calls(run, 2, number)
        assert len(times) == 2 and all(0 < t < 1 for t in times)
    assert "eager_channels_last" not in torch_models.variants_of("bert_layer")
    with pytest.raises(ValueError, match="unknown model"):
        torch_models.build("vgg")


def test_peak_memory_of_an_inference():
    pytest.importorskip("torch")
    m = torch_models.peak_memory({"impl": "eager_nchw", "args": ["tiny_cnn", 32, 8], "threads": 1})
    assert m["growth_mb"] >= 0 and m["base_mb"] > 10 and "fresh process" in m["method"]


@pytest.mark.parametrize("importer", ["fails", "wrong_graph"])
def test_a_row_end_to_end_with_kilns_importer_stood_in_for(monkeypatch, importer):
    pytest.importorskip("torch")
    kiln = pytest.importorskip("kiln")

    def from_onnx(data, shapes):
        assert isinstance(data, bytes) and shapes == {"input": (1, 3, 32, 32)}
        if importer == "fails":
            raise kiln.KilnError("no operator Conv")
        b = kiln.graph.Builder()
        return b.build(b.op("Relu", b.input("input", shapes["input"])))
    monkeypatch.setattr(kiln.graph, "from_onnx", from_onnx, raising=False)
    monkeypatch.setattr(torch_models, "variants_of", lambda name: ("eager_nchw",))  # one peer keeps the test short
    args = model_bench.parse_args(["--quick", "--image-size", "32", "--repeat-ms", "5", "--peers", "torch"])
    row = model_bench.bench_row(args, "tiny_cnn", 1)
    assert row["peer"].endswith("eager NCHW 1T") and row["peer_median"] > 0 and row["torch_peak_mb"] >= 0
    assert row["rounds"] == 5 and not row["peers_failed"]
    if importer == "fails":
        assert row["kiln_error"] == "KilnError: no operator Conv" and "kiln_median" not in row and "ratio_median" not in row
    else:
        assert "kiln_error" not in row and row["kiln_median"] > 0 and row["ratio_min"] <= row["ratio_median"] <= row["ratio_max"]
        assert "WRONG: shape [1, 3, 32, 32]" in row["note"] and row["num_kernels"] >= 1 and row["compile_s"] > 0


def needs_ort():
    why = ort_peer.unavailable()
    if why:
        pytest.skip(f"ONNX Runtime peer unavailable: {why}")


def test_onnx_runtime_peer_runs_the_onnx_file_and_is_checked(tmp_path):
    pytest.importorskip("torch")
    needs_ort()
    module, x = torch_models.build("tiny_cnn", 32)
    ref = module(x).detach().numpy()
    path = tmp_path / "tiny.onnx"
    path.write_bytes(model_bench.export_onnx(module, x, 14))
    with ort_peer.OrtPeer(str(path), {"input": x.numpy()}, ref, 1) as peer:
        assert peer.check_error < 1e-5, peer.check_error
        assert "ONNX Runtime 1.30.0" in peer.label and "intra-op threads 1" in peer.label and "graph optimization all" in peer.label
        times = peer.time(2, 5)
        assert len(times) == 2 and all(0 < t < 1 for t in times)
    # A peer that computes something else is refused before it is timed.
    with pytest.raises(launcher.PeerError, match="differs from the reference"):
        ort_peer.OrtPeer(str(path), {"input": x.numpy()}, ref + 1, 1)
    with pytest.raises(launcher.PeerError, match="did not start"):
        ort_peer.OrtPeer(str(tmp_path / "missing.onnx"), {"input": x.numpy()}, None, 1)


def test_a_row_against_onnx_runtime_and_torch(monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("kiln")
    needs_ort()
    monkeypatch.setattr(torch_models, "variants_of", lambda name: ("eager_nchw",))
    args = model_bench.parse_args(["--quick", "--image-size", "32", "--repeat-ms", "5", "--peers", "ort,torch"])
    row = model_bench.bench_row(args, "tiny_cnn", 1)
    assert not row["peers_failed"] and row["kiln_rel_err"] < 1e-4
    assert row["ort_label"].startswith("ONNX Runtime") and row["torch_label"].endswith("eager NCHW 1T")
    for side in ("ort_", "torch_"):
        assert row[side + "ratio_min"] <= row[side + "ratio_median"] <= row[side + "ratio_max"]
    assert row["ratio_median"] in (row["ort_ratio_median"], row["torch_ratio_median"]) and row["torch_peak_mb"] >= 0
    header = model_bench.format_table([row]).splitlines()[0]
    assert "kiln/ORT (range)" in header and "kiln/torch (range)" in header
    with pytest.raises(SystemExit):
        model_bench.parse_args(["--peers", "tvm"])


def test_onnx_runtime_folder_is_the_package_or_its_npm_prefix(tmp_path, monkeypatch):
    # KILN_ORT_NODE_DIR may name the package or the folder npm installed it into; anything else is refused by name.
    pkg = tmp_path / "prefix" / "node_modules" / "onnxruntime-node"
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text('{"name": "onnxruntime-node", "version": "9.9.9"}')
    (tmp_path / "prefix" / "package.json").write_text('{"dependencies": {"onnxruntime-node": "9.9.9"}}')
    for given in (pkg, tmp_path / "prefix"):
        monkeypatch.setenv("KILN_ORT_NODE_DIR", str(given))
        assert ort_peer.find_module() == str(pkg)
        assert ort_peer.version() == "9.9.9"
    monkeypatch.setenv("KILN_ORT_NODE_DIR", str(tmp_path))
    assert ort_peer.find_module() is None
    if ort_peer.shutil.which("node"):
        assert "holds no onnxruntime-node package" in ort_peer.unavailable()


def test_a_row_at_batch_2_runs_every_side_on_the_same_batch(monkeypatch):
    # --batch: the ONNX file, kiln's compile and PyTorch's peers all take [2, 3, 32, 32]; the row gives images/s.
    pytest.importorskip("torch")
    pytest.importorskip("kiln")
    monkeypatch.setattr(torch_models, "variants_of", lambda name: ("eager_nchw",))
    peers = "ort,torch" if not ort_peer.unavailable() else "torch"
    args = model_bench.parse_args(["--quick", "--image-size", "32", "--repeat-ms", "5", "--peers", peers, "--batch", "2"])
    row = model_bench.bench_row(args, "tiny_cnn", 1)
    assert row["input_shape"] == [2, 3, 32, 32] and row["batch"] == 2 and not row["peers_failed"], row
    assert row["kiln_rel_err"] < 1e-4 and "note" not in row
    assert row["kiln_images_per_s"] == pytest.approx(2e3 / row["kiln_median"])
    assert row["torch_images_per_s"] == pytest.approx(2e3 / row["torch_median"])
    assert ("ort_images_per_s" in row) == ("ort" in peers)
    text = model_bench.format_table([row])
    assert "throughput, images (sequences) per second" in text and "tiny_cnn 2x3x32x32" in text.splitlines()[-1]
    for bad in (["--batch", "0"], ["--batch", "two"]):
        with pytest.raises(SystemExit):
            model_bench.parse_args(bad)


def test_batch_of_the_models_input():
    pytest.importorskip("torch")
    _, x1 = torch_models.build("tiny_cnn", 32)
    _, x3 = torch_models.build("tiny_cnn", 32, batch=3)
    assert tuple(x3.shape) == (3, 3, 32, 32) and tuple(x1.shape) == (1, 3, 32, 32)
    assert (x3[0] == x1[0]).all()  # batch 1's input is the first image of a larger batch: the same generator
    with pytest.raises(ValueError, match="batch must be at least 1"):
        torch_models.build("tiny_cnn", 32, batch=0)
