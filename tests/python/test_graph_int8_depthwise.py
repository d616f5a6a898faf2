"""int8 depthwise convolutions and classifier Gemms (MobileNetV2's int8 path end to end).

use_int8_conv sends Q([Relu|Clip](Conv(DQ(x), DQ(w), DQ(bias)); group = channels)) and a depthwise
QLinearConv to kiln.QDepthwiseNCHWcI8 (bytes in and out in the blocked layout, each channel's taps widened
to its lane), on every x86 target; use_int8_dot sends Gemm(DQ(a), DQ(b), bias) (float out) to
kiln.QMatMulI8x4 on VNNI targets. Exact against numpy's integer arithmetic (strides 1 and 2, channels no
block divides, int8 and uint8 inputs, the int32 path of a kernel too large for float32's exact sums);
a QDQ MobileNetV2 (kiln.quantize) runs with no float conv left and matches ONNX Runtime on its export."""
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
RNG = np.random.default_rng(5152)
p = lambda v, t: np.asarray(v, dtype=t).reshape(())  # noqa: E731

# The host, and an AVX2 target (8 lanes, no VNNI: the depthwise kernel alone) where the host runs it.
TARGETS = ["llvm"] + ([AVX2] if host_has_avx512() else [])


def vnni(target="llvm"):
    t = kiln.Target(target)
    return t.has_feature("avx512vnni") or t.has_feature("avxvnni")


def bytes_of(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def np_depthwise(x, w, zx, zw, stride, pads):
    """int64 sums over the taps of (x - zx) * (w[c] - zw[c]), the padding (x - zx) = 0."""
    N, C, H, W = x.shape
    _, _, KH, KW = w.shape
    xi = np.pad(x.astype(np.int64) - int(zx), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    wi = w.astype(np.int64)[:, 0] - np.asarray(zw, np.int64).reshape(-1, 1, 1)
    OH, OW = (H + pads[0] + pads[2] - KH) // stride + 1, (W + pads[1] + pads[3] - KW) // stride + 1
    out = np.zeros((N, C, OH, OW), np.int64)
    for r in range(KH):
        for s in range(KW):
            out += xi[:, :, r:r + stride * (OH - 1) + 1:stride, s:s + stride * (OW - 1) + 1:stride] * wi[:, r, s].reshape(1, -1, 1, 1)
    return out


def np_requant(acc, m, zy, dtype, lo=None, hi=None):
    info = np.iinfo(dtype)
    y = np.clip(np.round(acc.astype(np.float32) * np.asarray(m, np.float32).reshape(1, -1, 1, 1)) + np.float32(zy), info.min, info.max)
    return np.clip(y, info.min if lo is None else lo, info.max if hi is None else hi).astype(dtype)


def dw_groups(exe):
    return [g["ops"] for g in exe.groups() if "kiln.QDepthwiseNCHWcI8" in g["ops"]]


def qdq_depthwise(x, w, sx, zx, sw, qb, sy, zy, stride, pads, clip):
    b = Builder()
    C = w.shape[0]
    xd = b.op("DequantizeLinear", b.input("x", x.shape, str(x.dtype)), b.constant("sx", sx), b.constant("zx", zx))
    wd = b.op("DequantizeLinear", b.constant("w", w), b.constant("sw", sw), b.constant("zw", np.zeros(C, np.int8)), axis=0)
    bd = b.op("DequantizeLinear", b.constant("b", qb), b.constant("sb", (sx * sw).astype(np.float32)), axis=0)
    h = b.op("Conv", xd, wd, bd, strides=[stride, stride], pads=list(pads), group=C)
    if clip:
        h = b.op("Clip", h, b.constant("lo", np.float32(clip[0])), b.constant("hi", np.float32(clip[1])))
    return b.build(b.op("QuantizeLinear", h, b.constant("sy", sy), b.constant("zy", zy)))


# (x dtype, C, kernel, stride, pads, ReLU6)
CASES = [(np.uint8, 24, 3, 1, [1, 1, 1, 1], True),
         (np.uint8, 40, 3, 2, [1, 1, 1, 1], True),
         (np.int8, 19, 3, 2, [0, 1, 1, 0], False),
         (np.uint8, 7, 5, 1, [2, 2, 2, 2], False)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xdt,C,ks,stride,pads,relu6", CASES)
def test_qdq_depthwise_exact(xdt, C, ks, stride, pads, relu6, target):
    """DQ -> depthwise Conv(bias) [-> Clip(0, 6)] -> Q: one int8 kernel, the bias, zero points,
    requantization and clamp in its epilogue, equal to numpy's integers."""
    x, w = bytes_of((1, C, 13, 11), xdt), bytes_of((C, 1, ks, ks), np.int8)
    sx, zx = p(0.03, np.float32), p(-7 if xdt == np.int8 else 121, xdt)
    sw = RNG.uniform(0.005, 0.02, C).astype(np.float32)
    qb = RNG.integers(-3000, 3000, C).astype(np.int32)
    acc = np_depthwise(x, w, zx, 0, stride, pads) + qb.reshape(1, -1, 1, 1)
    real = acc * sx * sw.reshape(1, -1, 1, 1)
    sy = np.float32(6.0 / 255 if relu6 else np.abs(real).max() / 100)
    zy = p(0 if relu6 else 110, np.uint8)
    exe = kiln.compile(qdq_depthwise(x, w, sx, zx, sw, qb, p(sy, np.float32), zy, stride, pads, (0.0, 6.0) if relu6 else None), target=target)
    groups = dw_groups(exe)
    assert len(groups) == 1 and "DequantizeLinear" not in groups[0] and "Clip" not in groups[0], exe.groups()
    hi = np.clip(np.round(np.float32(6.0) / sy), 0, 255) if relu6 else None
    want = np_requant(acc, (sx * sw) / sy, zy, np.uint8, hi=hi)
    assert len(np.unique(want)) > 30
    if relu6:
        assert (want == 0).any() and (want == hi).any()
    np.testing.assert_array_equal(exe(x)[0], want)


def onnx_op(op, x, consts, **attrs):
    b = Builder()
    vals = [b.input("x", x.shape, str(x.dtype))] + [b.constant(f"c{i}", np.ascontiguousarray(c)) for i, c in enumerate(consts)]
    return b.build(b.op(op, *vals, **attrs))


def test_qlinear_and_integer_depthwise_exact():
    """A depthwise QLinearConv (per-channel scales, bias, stride 2) and ConvInteger (uint8 weights and
    zero points, int32 out): the kernel, exact."""
    C = 21
    x, w = bytes_of((2, C, 9, 10), np.uint8), bytes_of((C, 1, 3, 3), np.int8)
    sx, zx, sw = p(0.05, np.float32), p(100, np.uint8), RNG.uniform(0.002, 0.01, C).astype(np.float32)
    b = RNG.integers(-500, 500, C).astype(np.int32)
    acc = np_depthwise(x, w, 100, 0, 2, [1, 1, 1, 1]) + b.reshape(1, -1, 1, 1)
    sy = np.float32(np.abs(acc * sx * sw.reshape(1, -1, 1, 1)).max() / 120)
    g = onnx_op("QLinearConv", x, [sx, zx, w, sw, np.zeros(C, np.int8), p(sy, np.float32), p(128, np.uint8), b],
                group=C, strides=[2, 2], pads=[1, 1, 1, 1])
    exe = kiln.compile(g)
    assert len(dw_groups(exe)) == 1, exe.groups()
    np.testing.assert_array_equal(exe(x)[0], np_requant(acc, (sx * sw) / sy, 128, np.uint8))
    wu = RNG.integers(0, 256, (C, 1, 3, 3)).astype(np.uint8)
    zw = RNG.integers(0, 256, C).astype(np.uint8)
    exe = kiln.compile(onnx_op("ConvInteger", x, [wu, p(3, np.uint8), zw], group=C, pads=[0, 1, 2, 1]))
    assert len(dw_groups(exe)) == 1, exe.groups()
    np.testing.assert_array_equal(exe(x)[0], np_depthwise(x, wu, 3, zw, 1, [0, 1, 2, 1]).astype(np.int32))


def test_depthwise_int32_sums_past_float32():
    """A 19x19 kernel of uint8 weights at zero point 0 over bright pixels: 361 taps x 255 x 255 exceed
    float32's exact integers (2^24), so the kernel sums in int32 (vpmulld); still exact."""
    C = 5
    x = RNG.integers(240, 256, (1, C, 20, 20)).astype(np.uint8)
    w = np.full((C, 1, 19, 19), 255, np.uint8)
    w[:, :, 0] = bytes_of((C, 1, 19), np.uint8)
    exe = kiln.compile(onnx_op("ConvInteger", x, [w, p(0, np.uint8), p(0, np.uint8)], group=C, pads=[9, 9, 9, 9]))
    assert len(dw_groups(exe)) == 1, exe.groups()
    want = np_depthwise(x, w, 0, np.zeros(C), 1, [9, 9, 9, 9])
    assert want.max() >= 2 ** 24
    np.testing.assert_array_equal(exe(x)[0], want.astype(np.int32))


# ---------------------------------------------------------------- the classifier Gemm

@pytest.mark.parametrize("trans_b", [1, 0])
def test_qdq_gemm_float_out(trans_b):
    """Gemm(DQ(a), DQ(W) per output column, DQ(int32 bias)) with a float result (a classifier): int8
    products, y = float32(acc) * (sa * sw[n]) + bias, against numpy."""
    if not vnni():
        pytest.skip("the host has no VNNI: the Gemm stays float")
    M, K, N = 2, 70, 37
    a, w = bytes_of((M, K), np.uint8), bytes_of((N, K), np.int8)
    sa, za, sw = np.float32(0.04), np.uint8(131), RNG.uniform(0.001, 0.01, N).astype(np.float32)
    qb = RNG.integers(-4000, 4000, N).astype(np.int32)
    sb = (sa * sw).astype(np.float32)
    bld = Builder()
    ad = bld.op("DequantizeLinear", bld.input("x", a.shape, "uint8"), bld.constant("sa", p(sa, np.float32)), bld.constant("za", p(za, np.uint8)))
    wq = w if trans_b else np.ascontiguousarray(w.T)
    wd = bld.op("DequantizeLinear", bld.constant("w", wq), bld.constant("sw", sw), bld.constant("zw", np.zeros(N, np.int8)), axis=0 if trans_b else 1)
    bd = bld.op("DequantizeLinear", bld.constant("b", qb), bld.constant("sb", sb), axis=0)
    exe = kiln.compile(bld.build(bld.op("Gemm", ad, wd, bd, transB=trans_b)))
    assert [g for g in exe.groups() if "kiln.QMatMulI8x4" in g["ops"]] and not [g for g in exe.groups() if "Gemm" in g["ops"]], exe.groups()
    acc = (a.astype(np.int64) - int(za)) @ w.astype(np.int64).T
    want = acc.astype(np.float32) * sb + (qb.astype(np.float32) * sb)
    np.testing.assert_allclose(exe(a)[0], want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


# ---------------------------------------------------------------- MobileNetV2 end to end

def test_mobilenet_v2_int8_end_to_end(tmp_path):
    """kiln.quantize's QDQ MobileNetV2 (random weights, 64 x 64): no float conv or Gemm left where the
    target has VNNI (every depthwise conv on the int8 kernel on any x86 target), the logits close to the
    float QDQ path's, and to ONNX Runtime's on the exported QDQ model where the peer is installed."""
    torch = pytest.importorskip("torch")
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = tv.models.mobilenet_v2().eval()
    x = torch.randn(1, 3, 64, 64)
    path = tmp_path / "mnv2.onnx"
    torch.onnx.export(m, (x,), str(path), input_names=["input"], output_names=["output"], opset_version=14)
    g = kiln.graph.from_onnx(str(path))
    calib = [RNG.standard_normal((1, 3, 64, 64)).astype(np.float32) for _ in range(2)]
    qpath = tmp_path / "mnv2_int8.onnx"
    q = kiln.quantize(g, calibration=calib, export=str(qpath))
    exe = kiln.compile(q)
    ops = [gr["ops"] for gr in exe.groups()]
    assert len(dw_groups(exe)) == 17, ops
    if vnni():
        assert not [o for o in ops if "Conv" in o.replace("kiln.QConvNCHWcI8", "").replace("kiln.QDepthwiseNCHWcI8", "")], ops
        assert not [o for o in ops if "Gemm" in o or "MatMul" in o.replace("kiln.QMatMulI8x4", "")], ops
    xn = x.numpy()
    got, plain = exe(xn)[0], kiln.compile(q, int8=False)(xn)[0]
    scale = np.abs(plain).max()
    assert np.abs(got - plain).max() <= 0.1 * scale, (np.abs(got - plain).max(), scale)
    sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
    import ort_peer
    why = ort_peer.unavailable()
    if why:
        pytest.skip(f"ONNX Runtime: {why}")
    xn.tofile(tmp_path / "x.bin")
    spec = {"module": ort_peer.find_module(), "model": str(qpath), "out": str(tmp_path / "y.bin"),
            "inputs": [{"name": "input", "path": str(tmp_path / "x.bin"), "shape": list(xn.shape)}]}
    subprocess.run(["node", os.path.join(os.path.dirname(__file__), "ort_run_once.js"), json.dumps(spec)], check=True, timeout=120)
    ort = np.fromfile(tmp_path / "y.bin", np.float32).reshape(got.shape)
    # Two int8 runtimes round their requantizations alike but not always: a code a step apart now and then.
    assert np.abs(got - ort).max() <= 0.05 * np.abs(ort).max(), (np.abs(got - ort).max(), np.abs(ort).max())
