"""kiln.quantize: post-training static quantization into QDQ form.

The ranges and parameters against numpy (exact: integers and the float32
scales they come from), the QDQ graph's output against a numpy fake-quant
reference, a small CNN trained with kiln.train on generated stripes keeping
its top-1 accuracy within 1 point of float for every method, the exported
ONNX model run by ONNX Runtime (where the peer is installed) against kiln,
and each bad input's error.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.quantization import ranges

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))


def conv_gemm_model(rng, shape=(2, 3, 8, 8)):
    b = kiln.graph.Builder()
    x = b.input("x", shape)
    w = b.constant("w", rng.standard_normal((4, shape[1], 3, 3)).astype("float32") * 0.3)
    bias = b.constant("b", rng.standard_normal(4).astype("float32") * 0.1)
    y = b.op("Relu", b.op("Conv", x, w, bias, pads=[1, 1, 1, 1]))
    y = b.op("Flatten", b.op("GlobalAveragePool", y))
    wf = b.constant("wf", rng.standard_normal((4, 5)).astype("float32"))
    y = b.op("Gemm", y, wf, b.constant("bf", rng.standard_normal(5).astype("float32")))
    return b.build(y), {"w": w, "wf": wf}


def quant_params(q):
    """name -> numpy array of every constant in the quantized graph."""
    return {n["name"]: n["data"] for n in kiln.quantization.walk(q)["nodes"] if n["kind"] == "constant"}


def test_scales_and_weights_match_numpy():
    rng = np.random.default_rng(0)
    m, _ = conv_gemm_model(rng)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")  # rebuild with known weights
    b = kiln.graph.Builder()
    x = b.input("x", (2, 3, 8, 8))
    y = b.op("Conv", x, b.constant("w", w), pads=[1, 1, 1, 1])
    m = b.build(b.op("Relu", y))
    batches = [rng.standard_normal((2, 3, 8, 8)).astype("float32") * (k + 1) for k in range(3)]
    c = quant_params(kiln.quantize(m, calibration=batches, method="minmax"))
    lo, hi = min(float(a.min()) for a in batches), max(float(a.max()) for a in batches)
    scale = np.float32((hi - lo) / 255.0)
    assert c["x.scale"].reshape(()) == scale
    assert c["x.zero_point"].reshape(()) == np.uint8(np.round(-lo / float(scale)))
    ws = (np.abs(w).max(axis=(1, 2, 3)) / 127.0).astype("float32")
    np.testing.assert_array_equal(c["Conv.w1.scale"], ws)
    np.testing.assert_array_equal(c["Conv.w1.quantized"], np.clip(np.round(w / ws[:, None, None, None]), -127, 127).astype("int8"))
    # per tensor: one scale
    c = quant_params(kiln.quantize(m, calibration=batches, per_channel=False))
    assert c["Conv.w1.scale"].size == 1 and c["Conv.w1.scale"].reshape(()) == np.float32(np.abs(w).max() / 127.0)


def fake_quant(x, scale, zp, lo, hi):
    return (np.clip(np.round(x / scale) + zp, lo, hi) - zp) * scale


def test_qdq_graph_computes_fake_quantized_conv():
    rng = np.random.default_rng(1)
    m, ws = conv_gemm_model(rng)
    batches = [rng.standard_normal((2, 3, 8, 8)).astype("float32") for _ in range(2)]
    q = kiln.quantize(m, calibration=batches)
    c = quant_params(q)
    x = batches[0]
    # The reference: the same quantize/dequantize steps in numpy, then a float conv (PyTorch).
    import torch
    xs, xz = c["x.scale"].reshape(()), c["x.zero_point"].reshape(()).astype(np.float64)
    xq = fake_quant(x, xs, xz, 0, 255).astype("float32")
    wq = (c["Conv.w1.quantized"].astype("float32") * c["Conv.w1.scale"][:, None, None, None]).astype("float32")
    bq = (c["Conv.bias.quantized"].astype("float32") * c["Conv.bias.scale"]).astype("float32")
    y = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(xq), torch.from_numpy(wq), torch.from_numpy(bq), padding=1)).numpy()
    ys, yz = c["Relu.scale"].reshape(()), c["Relu.zero_point"].reshape(()).astype(np.float64)
    y = fake_quant(y, ys, yz, 0, 255).mean(axis=(2, 3)).astype("float32")
    fs, fz = c["Flatten.scale"].reshape(()), c["Flatten.zero_point"].reshape(()).astype(np.float64)
    y = fake_quant(y, fs, fz, 0, 255).astype("float32")
    wf = (c["Gemm.w1.quantized"].astype("float32") * c["Gemm.w1.scale"]).astype("float32")
    out = y @ wf + c["Gemm.bias.quantized"].astype("float32") * c["Gemm.bias.scale"]
    got = kiln.compile(q)(x)[0]
    np.testing.assert_allclose(got, out, rtol=1e-4, atol=1e-4 * np.abs(out).max())
    # the bias is int32 at the input's scale times each channel's weight scale
    np.testing.assert_array_equal(c["Conv.bias.scale"], (np.float64(xs) * c["Conv.w1.scale"]).astype("float32"))


def test_percentile_and_entropy_clip_an_outlier():
    rng = np.random.default_rng(2)
    x = np.abs(rng.standard_normal(200000)).astype("float32")
    x[7] = 60.0  # one outlier
    r = ranges.TensorRange()
    r.observe_minmax(x)
    r.observe_histogram(x)
    assert r.range("minmax")[1] == 60.0
    assert 3.0 < r.range("percentile")[1] < 5.0  # 99.99th of |N(0, 1)| is about 3.9
    assert 2.0 < r.range("entropy")[1] < 10.0
    # a histogram that is one quantization step per bin quantizes losslessly: no clipping
    assert ranges.entropy_threshold(np.ones(256), 128) == 256


def stripes(rng, n, size=12):
    """Images of 4 classes: horizontal, vertical, diagonal stripes and a checkerboard, random period, phase and noise."""
    labels = rng.integers(0, 4, n)
    i, j = np.mgrid[0:size, 0:size]
    out = np.empty((n, 1, size, size), np.float32)
    for k, c in enumerate(labels):
        p, ph = rng.integers(2, 5), rng.uniform(0, 2 * np.pi)
        t = [i, j, i + j, None][c]
        img = np.sin(2 * np.pi * t / p + ph) if t is not None else np.sign(np.sin(np.pi * i / p + ph) * np.sin(np.pi * j / p))
        out[k, 0] = img + 0.5 * rng.standard_normal((size, size))
    return out, labels.astype(np.int64)


def small_cnn(weights, batch):
    b = kiln.graph.Builder()
    x = b.input("x", (batch, 1, 12, 12))
    y = b.op("Relu", b.op("Conv", x, b.constant("c1", weights["c1"]), b.constant("c1b", weights["c1b"]), pads=[1, 1, 1, 1]))
    y = b.op("MaxPool", y, kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("Relu", b.op("Conv", y, b.constant("c2", weights["c2"]), b.constant("c2b", weights["c2b"]), pads=[1, 1, 1, 1]))
    y = b.op("Flatten", b.op("GlobalAveragePool", y))
    y = b.op("Gemm", y, b.constant("fc", weights["fc"]), b.constant("fcb", weights["fcb"]))
    return b.build(y)


def test_trained_cnn_keeps_accuracy_within_one_point():
    rng = np.random.default_rng(3)
    init = {"c1": rng.standard_normal((8, 1, 3, 3)) * 0.4, "c1b": np.zeros(8), "c2": rng.standard_normal((16, 8, 3, 3)) * 0.15,
            "c2b": np.zeros(16), "fc": rng.standard_normal((16, 4)) * 0.3, "fcb": np.zeros(4)}
    init = {k: v.astype("float32") for k, v in init.items()}
    batch = 32
    step = kiln.train.compile(small_cnn(init, batch), loss="cross_entropy", optimizer=kiln.train.SGD(lr=0.05, momentum=0.9))
    for _ in range(150):
        x, y = stripes(rng, batch)
        step(x, y)
    trained = {k: np.array(step.parameters[k]) for k in init}
    test_x, test_y = stripes(np.random.default_rng(4), 512)
    model = small_cnn(trained, 256)

    def accuracy(exe):
        return np.mean(np.concatenate([np.argmax(exe(test_x[k:k + 256])[0], 1) for k in (0, 256)]) == test_y) * 100

    float_acc = accuracy(kiln.compile(model))
    assert float_acc > 80, f"the float model did not learn the stripes ({float_acc:.1f}%)"
    calib = [stripes(np.random.default_rng(5 + k), 256)[0] for k in range(2)]
    for method in ranges.METHODS:
        acc = accuracy(kiln.compile(kiln.quantize(model, calibration=calib, method=method)))
        assert acc >= float_acc - 1.0, f"{method}: int8 top-1 {acc:.1f}% against float {float_acc:.1f}%"


def test_export_runs_on_onnx_runtime(tmp_path):
    import onnx
    import ort_peer

    rng = np.random.default_rng(6)
    m, _ = conv_gemm_model(rng)
    batches = [rng.standard_normal((2, 3, 8, 8)).astype("float32") for _ in range(2)]
    path = tmp_path / "model_int8.onnx"
    q = kiln.quantize(m, calibration=batches, method="entropy", export=path)
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    ops = [n.op_type for n in model.graph.node]
    # x, the Relu and the Gemm input quantized; those three, two weights and two int32 biases dequantized
    assert ops.count("QuantizeLinear") == 3 and ops.count("DequantizeLinear") == 7, ops
    # per-tensor scales and zero points are ONNX scalars (ONNX Runtime's QLinearAdd fusion refuses [1])
    inits = {t.name: t for t in model.graph.initializer}
    assert list(inits["x.scale"].dims) == [] and list(inits["x.zero_point"].dims) == []
    x = batches[1]
    want = kiln.compile(q)(x)[0]
    # kiln reads its own export back to the same graph; the import folds the weights' DequantizeLinear, so its
    # Gemm runs in float where q's runs on the int8 codes (an exact integer sum, scaled once): rounding apart
    np.testing.assert_allclose(kiln.compile(kiln.graph.from_onnx(str(path)))(x)[0], want, rtol=0, atol=1e-6 * np.abs(want).max())
    why = ort_peer.unavailable()
    if why:
        pytest.skip(f"ONNX Runtime: {why}")
    x.tofile(tmp_path / "x.bin")
    spec = {"module": ort_peer.find_module(), "model": str(path), "out": str(tmp_path / "y.bin"),
            "inputs": [{"name": "x", "path": str(tmp_path / "x.bin"), "shape": list(x.shape)}]}
    subprocess.run(["node", os.path.join(os.path.dirname(__file__), "ort_run_once.js"), json.dumps(spec)], check=True, timeout=120)
    got = np.fromfile(tmp_path / "y.bin", np.float32).reshape(want.shape)
    # ONNX Runtime fuses the pairs into integer kernels; its requantization may round one step apart
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 * np.abs(want).max())


def test_bad_inputs_are_clear_errors():
    rng = np.random.default_rng(7)
    m, _ = conv_gemm_model(rng)
    good = [rng.standard_normal((2, 3, 8, 8)).astype("float32")]
    with pytest.raises(kiln.KilnError, match="holds no batches"):
        kiln.quantize(m, calibration=[])
    with pytest.raises(kiln.KilnError, match=r"input 'x' has shape \(2, 3, 9, 9\), but the model takes \(2, 3, 8, 8\)"):
        kiln.quantize(m, calibration=[np.zeros((2, 3, 9, 9), "float32")])
    with pytest.raises(kiln.KilnError, match="is float64, but the model takes float32"):
        kiln.quantize(m, calibration=[np.zeros((2, 3, 8, 8))])
    with pytest.raises(kiln.KilnError, match="method must be one of 'minmax', 'percentile', 'entropy', got 'kl'"):
        kiln.quantize(m, calibration=good, method="kl")
    with pytest.raises(kiln.KilnError, match="must be an iterable of batches"):
        kiln.quantize(m, calibration=good[0])
    with pytest.raises(kiln.KilnError, match="has no 'x'"):
        kiln.quantize(m, calibration=[{"y": good[0]}])
    with pytest.raises(kiln.KilnError, match="takes a kiln.graph.Graph or an ONNX model"):
        kiln.quantize(42, calibration=good)
    b = kiln.graph.Builder()
    x = b.input("x", (2, 3))
    with pytest.raises(kiln.KilnError, match="no Conv, MatMul or Gemm"):
        kiln.quantize(b.build(b.op("Relu", x)), calibration=[np.zeros((2, 3), "float32")])


def test_an_onnx_model_quantizes_as_its_graph(tmp_path):
    import onnx

    rng = np.random.default_rng(8)
    m, _ = conv_gemm_model(rng)
    path = tmp_path / "float.onnx"
    onnx.save(kiln.quantization.to_onnx(m), str(path))  # the writer takes float graphs too
    batches = [rng.standard_normal((2, 3, 8, 8)).astype("float32")]
    from_path = kiln.compile(kiln.quantize(str(path), calibration=batches))(batches[0])[0]
    from_graph = kiln.compile(kiln.quantize(m, calibration=batches))(batches[0])[0]
    np.testing.assert_array_equal(from_path, from_graph)
