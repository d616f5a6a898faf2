"""QDQ models read back from ONNX run on the int8 kernels.

from_onnx keeps a DequantizeLinear of integer weights (int8 codes, an int32
bias) as that node over an integer constant instead of folding it to float32
at import, so use_int8_conv / use_int8_dot match a QDQ model written by
kiln.quantize(..., export=...) (ONNX Runtime's quantizer writes the same form)
as they match kiln's own graph. A small ResNet-like CNN and a MobileNetV2
inverted-residual block: the re-imported export compiles to as many int8
groups as kiln's own quantized graph, gives its output exactly, gives the
float QDQ path's exactly with int8=False (fold_constants folds the kept
DequantizeLinear then) and kiln's own graph's on an AVX2 target (no VNNI),
and is close to ONNX Runtime's on the same file."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.graph import Builder
from kiln_helpers import AVX2, host_has_avx512

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RNG = np.random.default_rng(5153)
INT8_OPS = ("kiln.QConvNCHWcI8", "kiln.QDepthwiseNCHWcI8", "kiln.QMatMulI8x4")


def vnni():
    t = kiln.Target("llvm")
    return t.has_feature("avx512vnni") or t.has_feature("avxvnni")


def int8_groups(exe):
    """op -> how many groups run that int8 kernel."""
    ops = [g["ops"] for g in exe.groups()]
    return {op: sum(op in o for o in ops) for op in INT8_OPS}


def conv_weight(b, name, k, ci, ks):
    return b.constant(name, (RNG.standard_normal((k, ci, ks, ks)) * (2.0 / (ci * ks * ks)) ** 0.5).astype(np.float32))


def bias(b, name, k):
    return b.constant(name, (RNG.standard_normal(k) * 0.1).astype(np.float32))


def resnet_like():
    """A stem conv, a MaxPool, a basic block (residual Add), a strided block with a 1x1 shortcut, pooling and a Gemm."""
    b = Builder()
    x = b.input("x", (1, 3, 16, 16), "float32")
    h = b.op("Relu", b.op("Conv", x, conv_weight(b, "w1", 16, 3, 3), bias(b, "b1", 16), pads=[1, 1, 1, 1]))
    h = b.op("MaxPool", h, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    r = b.op("Relu", b.op("Conv", h, conv_weight(b, "w2", 16, 16, 3), bias(b, "b2", 16), pads=[1, 1, 1, 1]))
    r = b.op("Conv", r, conv_weight(b, "w3", 16, 16, 3), bias(b, "b3", 16), pads=[1, 1, 1, 1])
    h = b.op("Relu", b.op("Add", h, r))
    r = b.op("Relu", b.op("Conv", h, conv_weight(b, "w4", 32, 16, 3), bias(b, "b4", 32), pads=[1, 1, 1, 1], strides=[2, 2]))
    r = b.op("Conv", r, conv_weight(b, "w5", 32, 32, 3), bias(b, "b5", 32), pads=[1, 1, 1, 1])
    s = b.op("Conv", h, conv_weight(b, "w6", 32, 16, 1), bias(b, "b6", 32), strides=[2, 2])
    h = b.op("Flatten", b.op("GlobalAveragePool", b.op("Relu", b.op("Add", s, r))))
    fc = b.constant("fc", (RNG.standard_normal((10, 32)) * 0.2).astype(np.float32))
    return b.build(b.op("Gemm", h, fc, bias(b, "fcb", 10), transB=1)), {"kiln.QConvNCHWcI8": 6, "kiln.QMatMulI8x4": 1}


def mobilenet_v2_block():
    """A ReLU6 stem conv, then MobileNetV2's inverted residual: 1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 project, the skip Add."""
    b = Builder()
    x = b.input("x", (1, 3, 16, 16), "float32")
    relu6 = lambda v: b.op("Clip", v, b.constant(f"lo{id(v)}", np.float32(0)), b.constant(f"hi{id(v)}", np.float32(6)))  # noqa: E731
    h = relu6(b.op("Conv", x, conv_weight(b, "w0", 16, 3, 3), bias(b, "b0", 16), pads=[1, 1, 1, 1], strides=[2, 2]))
    e = relu6(b.op("Conv", h, conv_weight(b, "we", 96, 16, 1), bias(b, "be", 96)))
    e = relu6(b.op("Conv", e, conv_weight(b, "wd", 96, 1, 3), bias(b, "bd", 96), pads=[1, 1, 1, 1], group=96))
    e = b.op("Conv", e, conv_weight(b, "wp", 16, 96, 1), bias(b, "bp", 16))
    return b.build(b.op("Add", h, e)), {"kiln.QConvNCHWcI8": 3, "kiln.QDepthwiseNCHWcI8": 1}


def ort_output(tmp_path, model_path, x):
    sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
    import ort_peer

    why = ort_peer.unavailable()
    if why:
        pytest.skip(f"ONNX Runtime: {why}")
    x.tofile(tmp_path / "x.bin")
    spec = {"module": ort_peer.find_module(), "model": str(model_path), "out": str(tmp_path / "y.bin"),
            "inputs": [{"name": "x", "path": str(tmp_path / "x.bin"), "shape": list(x.shape)}]}
    subprocess.run(["node", os.path.join(os.path.dirname(__file__), "ort_run_once.js"), json.dumps(spec)], check=True, timeout=120)
    return np.fromfile(tmp_path / "y.bin", np.float32)


@pytest.mark.parametrize("make", [resnet_like, mobilenet_v2_block], ids=["resnet_like", "mobilenet_v2_block"])
def test_exported_qdq_model_reimports_onto_int8_kernels(make, tmp_path):
    model, expected = make()
    batches = [RNG.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(3)]
    path = tmp_path / "model_int8.onnx"
    q = kiln.quantize(model, calibration=batches, export=str(path))
    back = kiln.graph.from_onnx(str(path))
    own, imported = kiln.compile(q), kiln.compile(back)
    counts = int8_groups(imported)
    assert counts == int8_groups(own), (imported.groups(), own.groups())
    for op, n in expected.items():
        if vnni() or op == "kiln.QDepthwiseNCHWcI8":  # dense convs and the Gemm need the dot instruction
            assert counts[op] == n, imported.groups()
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = imported(x)[0]
    np.testing.assert_array_equal(got, own(x)[0])
    # The float path: the kept DequantizeLinear folds to the constant the import used to make.
    plain = kiln.compile(back, int8=False)
    assert sum(int8_groups(plain).values()) == 0, plain.groups()
    np.testing.assert_array_equal(plain(x)[0], kiln.compile(q, int8=False)(x)[0])
    if make is mobilenet_v2_block and host_has_avx512():
        # An AVX2 target (no VNNI): the depthwise conv alone on int8, the dense ones float, as in kiln's own graph.
        avx2, own2 = kiln.compile(back, target=AVX2), kiln.compile(q, target=AVX2)
        assert int8_groups(avx2) == int8_groups(own2) == {"kiln.QConvNCHWcI8": 0, "kiln.QDepthwiseNCHWcI8": 1, "kiln.QMatMulI8x4": 0}, avx2.groups()
        np.testing.assert_array_equal(avx2(x)[0], own2(x)[0])
    ort = ort_output(tmp_path, path, x).reshape(got.shape)
    # ONNX Runtime's integer kernels may requantize one code step apart here and there.
    assert np.abs(got - ort).max() <= 0.02 * np.abs(ort).max(), (np.abs(got - ort).max(), np.abs(ort).max())


def test_hand_built_qdq_weights_stay_integer_at_import():
    """An ONNX QDQ conv as ONNX Runtime's quantizer writes it (per-channel int8 weights, an int32 bias,
    uint8 activations): the weights' DequantizeLinear reaches the graph over an int8 constant."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    K, C = 8, 4
    w = RNG.integers(-127, 128, (K, C, 3, 3)).astype(np.int8)
    sw = (RNG.random(K) * 0.01 + 0.005).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w", w), ("sw", sw), ("zw", np.zeros(K, np.int8)), ("bq", RNG.integers(-500, 500, K).astype(np.int32)),
        ("sb", (sw * np.float32(0.02)).astype(np.float32)), ("sx", np.float32(0.02)), ("zx", np.uint8(128)),
        ("sy", np.float32(0.05)), ("zy", np.uint8(0))]]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "sb"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, K, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    g = kiln.graph.from_onnx(model)
    nodes = kiln.quantization.walk(g)["nodes"]
    consts = {n["id"]: n for n in nodes if n["kind"] == "constant"}
    dq_inputs = [consts.get(n["inputs"][0][0]) for n in nodes if n["kind"] == "op" and n["op"] == "DequantizeLinear"]
    assert sorted(str(c["data"].dtype) for c in dq_inputs if c is not None) == ["int32", "int8"], dq_inputs
    x = RNG.standard_normal((1, C, 6, 6)).astype(np.float32)
    fused, plain = kiln.compile(g), kiln.compile(g, int8=False)
    assert int8_groups(fused)["kiln.QConvNCHWcI8"] == (1 if vnni() else 0), fused.groups()
    a, b = fused(x)[0], plain(x)[0]
    # The integer epilogue may round a code one step from the float path's.
    assert np.abs(a - b).max() <= 0.05 + 1e-6, np.abs(a - b).max()
