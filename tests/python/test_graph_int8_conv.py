"""int8 convolutions (use_int8_conv: kiln.QConvNCHWcI8, vpdpbusd over byte quads of the blocked layout on
VNNI targets): ConvInteger, QLinearConv and the QDQ pattern Q([Relu](Conv(DQ(x), DQ(w), DQ(bias)))) exact
against numpy's integer arithmetic (padding reads the input zero point, channel counts no block divides,
strides 1 and 2, 1x1 and 3x3); a kiln.quantize'd CNN equal through the fused and the float path; bad
scales and zero points rejected."""
import numpy as np
import pytest

import kiln
from kiln.graph import Builder
from kiln_helpers import AVX2, host_has_avx512

RNG = np.random.default_rng(5151)
p = lambda v, t: np.asarray(v, dtype=t).reshape(())  # noqa: E731


def vnni(target="llvm"):
    t = kiln.Target(target)
    return t.has_feature("avx512vnni") or t.has_feature("avxvnni")


AVX_VNNI = "llvm -mcpu=alderlake"  # 256-bit vpdpbusd, 8 int32 lanes: other blocks and padding
# The host, an AVX2 target without VNNI (the portable ops), and an AVX-VNNI one where the host runs it.
TARGETS = ["llvm"] + ([AVX2] if host_has_avx512() else []) + ([AVX_VNNI] if kiln.Target("llvm").has_feature("avxvnni") else [])


def bytes_of(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def np_conv_integer(x, w, zx, zw, stride, pads):
    """int32 sum over taps of (x - zx) * (w - zw[k]), the padding (x - zx) = 0; group 1."""
    N, C, H, W = x.shape
    K, _, KH, KW = w.shape
    xi = np.pad(x.astype(np.int64) - int(zx), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    wi = w.astype(np.int64) - np.asarray(zw, np.int64).reshape(-1, 1, 1, 1)
    OH = (H + pads[0] + pads[2] - KH) // stride + 1
    OW = (W + pads[1] + pads[3] - KW) // stride + 1
    out = np.zeros((N, K, OH, OW), np.int64)
    for r in range(KH):
        for s in range(KW):
            patch = xi[:, :, r:r + stride * (OH - 1) + 1:stride, s:s + stride * (OW - 1) + 1:stride]
            out += np.einsum("nchw,kc->nkhw", patch, wi[:, :, r, s])
    return out.astype(np.int32)


def np_requant(acc, m, zy, dtype, relu=False):
    info = np.iinfo(dtype)
    y = np.round(acc.astype(np.float32) * np.asarray(m, np.float32).reshape(1, -1, 1, 1)) + np.float32(zy)
    y = np.clip(y, info.min, info.max)
    return (np.maximum(y, zy) if relu else y).astype(dtype)


def build(op, x, consts, **attrs):
    b = Builder()
    vals = [b.input("x", x.shape, str(x.dtype))] + [b.constant(f"c{i}", np.ascontiguousarray(c)) if c is not None else None
                                                    for i, c in enumerate(consts)]
    return b.build(b.op(op, *vals, **attrs))


def qconv_groups(exe):
    return [g["ops"] for g in exe.groups() if "kiln.QConvNCHWcI8" in g["ops"]]


# (x dtype, w dtype, per-channel w zero point, C, K, kernel, stride, pads)
CASES = [(np.uint8, np.int8, False, 5, 19, 3, 1, [1, 1, 1, 1]),
         (np.uint8, np.int8, False, 20, 36, 3, 2, [1, 0, 2, 1]),
         (np.int8, np.int8, False, 16, 16, 1, 1, [0, 0, 0, 0]),
         (np.uint8, np.uint8, True, 36, 17, 1, 2, [0, 0, 0, 0]),
         (np.int8, np.uint8, True, 3, 40, 3, 2, [1, 1, 1, 1])]


@pytest.mark.parametrize("xdt,wdt,per_channel,C,K,ks,stride,pads", CASES)
def test_conv_integer_exact(xdt, wdt, per_channel, C, K, ks, stride, pads):
    x = bytes_of((1, C, 11, 9), xdt)
    # uint8 weights near their zero point (w - zw must fit a signed byte for the kernel; else it keeps the op).
    w = bytes_of((K, C, ks, ks), wdt) if wdt == np.int8 else (RNG.integers(60, 196, (K, C, ks, ks))).astype(np.uint8)
    zx = bytes_of((), xdt) // 2
    zw = (RNG.integers(120, 136, K) if per_channel else np.int64(128)).astype(wdt) if wdt == np.uint8 else np.zeros((), wdt)
    exe = kiln.compile(build("ConvInteger", x, [w, zx, zw], strides=[stride, stride], pads=pads))
    assert bool(qconv_groups(exe)) == vnni(), exe.groups()
    np.testing.assert_array_equal(exe(x)[0], np_conv_integer(x, w, zx, zw, stride, pads))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
def test_qlinear_conv_exact(xdt, target):
    """Per-channel weight scales, an int32 bias, the requantization to the output zero point."""
    C, K = 24, 40
    x, w = bytes_of((2, C, 10, 10), xdt), bytes_of((K, C, 3, 3), np.int8)
    sx, zx = p(0.03, np.float32), p(xdt(-5) if xdt == np.int8 else 131, xdt)
    sw, zw = RNG.uniform(0.002, 0.01, K).astype(np.float32), np.zeros(K, np.int8)
    bias = RNG.integers(-3000, 3000, K).astype(np.int32)
    acc = np_conv_integer(x, w, zx, zw, 1, [1, 1, 1, 1]) + bias.reshape(1, -1, 1, 1)
    sy = np.float32(np.abs(acc * sx * sw.reshape(1, -1, 1, 1)).max() / 100)
    zy = p(20 if xdt == np.int8 else 140, xdt)
    exe = kiln.compile(build("QLinearConv", x, [sx, zx, w, sw, zw, p(sy, np.float32), zy, bias], pads=[1, 1, 1, 1]), target=target)
    assert bool(qconv_groups(exe)) == vnni(target), exe.groups()
    want = np_requant(acc, (sx * sw) / np.float32(sy), zy, xdt)
    assert len(np.unique(want)) > 50
    np.testing.assert_array_equal(exe(x)[0], want)


def qdq_conv(x, w, sx, zx, sw, qb, sy, zy, relu, stride=1, pads=(1, 1, 1, 1), clip=None):
    b = Builder()
    xd = b.op("DequantizeLinear", b.input("x", x.shape, str(x.dtype)), b.constant("sx", sx), b.constant("zx", zx))
    wd = b.op("DequantizeLinear", b.constant("w", w), b.constant("sw", sw), b.constant("zw", np.zeros(sw.shape, np.int8)), axis=0)
    bd = b.op("DequantizeLinear", b.constant("b", qb), b.constant("sb", (sx * sw).astype(np.float32)), axis=0)
    h = b.op("Conv", xd, wd, bd, strides=[stride, stride], pads=list(pads))
    if relu:
        h = b.op("Relu", h)
    if clip:
        h = b.op("Clip", h, b.constant("lo", np.float32(clip[0])), b.constant("hi", np.float32(clip[1])))
    return b.build(b.op("QuantizeLinear", h, b.constant("sy", sy), b.constant("zy", zy)))


def test_qdq_conv_clip_is_a_clamp_of_the_codes():
    """DQ -> Conv -> Clip(0, 6) (ReLU6) -> Q: the clip as a clamp of the output codes in the epilogue,
    Q(clip(v, a, b)) = clamp(Q(v), Q(a), Q(b)); exact against numpy."""
    if not vnni():
        pytest.skip("the host has no VNNI: the QDQ conv stays float")
    C, K = 16, 32
    x, w = bytes_of((1, C, 8, 8), np.uint8), bytes_of((K, C, 1, 1), np.int8)
    sx, zx, sw = p(0.02, np.float32), p(128, np.uint8), RNG.uniform(0.005, 0.02, K).astype(np.float32)
    qb = RNG.integers(-500, 500, K).astype(np.int32)
    acc = np_conv_integer(x, w, zx, 0, 1, [0, 0, 0, 0]) + qb.reshape(1, -1, 1, 1)
    real = acc * sx * sw.reshape(1, -1, 1, 1)
    sy, zy = np.float32(np.abs(real).max() / 100), p(60, np.uint8)
    hi = float(np.percentile(real, 80))  # a bound inside the range: the clamp must bite
    exe = kiln.compile(qdq_conv(x, w, sx, zx, sw, qb, p(sy, np.float32), zy, False, pads=(0, 0, 0, 0), clip=(0.0, hi)))
    assert len(qconv_groups(exe)) == 1 and not [g for g in exe.groups() if "Clip" in g["ops"]], exe.groups()
    code_hi = np.clip(np.round(np.float32(hi) / sy) + 60, 0, 255)
    want = np.minimum(np_requant(acc, (sx * sw) / sy, zy, np.uint8, True), code_hi).astype(np.uint8)
    assert (want == code_hi).any() and (want == 60).any()
    np.testing.assert_array_equal(exe(x)[0], want)


@pytest.mark.parametrize("relu,stride", [(False, 1), (True, 2)])
def test_qdq_conv_fuses_into_one_int8_kernel(relu, stride):
    """DQ -> Conv(bias) [-> Relu] -> Q: one kernel with the bias, zero point, requantization (and ReLU) as its
    epilogue, equal to numpy's integer form of the same arithmetic."""
    if not vnni():
        pytest.skip("the host has no VNNI: the QDQ conv stays float (test_graph_quantize covers it)")
    C, K = 13, 34
    x, w = bytes_of((1, C, 15, 12), np.uint8), bytes_of((K, C, 3, 3), np.int8)
    sx, zx = p(0.02, np.float32), p(117, np.uint8)
    sw = RNG.uniform(0.005, 0.02, K).astype(np.float32)
    qb = RNG.integers(-2000, 2000, K).astype(np.int32)
    acc = np_conv_integer(x, w, zx, 0, stride, [1, 1, 1, 1]) + qb.reshape(1, -1, 1, 1)
    sy = np.float32(np.abs(acc * sx * sw.reshape(1, -1, 1, 1)).max() / 60)
    zy = p(100, np.uint8)
    exe = kiln.compile(qdq_conv(x, w, sx, zx, sw, qb, p(sy, np.float32), zy, relu, stride))
    groups = qconv_groups(exe)
    assert len(groups) == 1 and "Conv," not in groups[0] and "DequantizeLinear" not in groups[0], exe.groups()
    want = np_requant(acc, (sx * sw) / np.float32(sy), zy, np.uint8, relu)
    assert len(np.unique(want)) > 30 and (want == 100).any()
    np.testing.assert_array_equal(exe(x)[0], want)


def small_cnn():
    """Conv-Relu-MaxPool-Conv-Relu, a residual Add, a strided conv, pooling and a Gemm: kiln.quantize's QDQ form."""
    b = Builder()
    x = b.input("x", (1, 3, 16, 16), "float32")
    c = lambda n, k, ci, ks: b.constant(n, (RNG.standard_normal((k, ci, ks, ks)) * (2.0 / (ci * ks * ks)) ** 0.5).astype(np.float32))  # noqa: E731
    bias = lambda n, k: b.constant(n, (RNG.standard_normal(k) * 0.1).astype(np.float32))  # noqa: E731
    h = b.op("Relu", b.op("Conv", x, c("w1", 24, 3, 3), bias("b1", 24), pads=[1, 1, 1, 1]))
    h = b.op("MaxPool", h, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    r = b.op("Relu", b.op("Conv", h, c("w2", 24, 24, 3), bias("b2", 24), pads=[1, 1, 1, 1]))
    r = b.op("Conv", r, c("w3", 24, 24, 1), bias("b3", 24))
    h = b.op("Relu", b.op("Add", h, r))
    h = b.op("Relu", b.op("Conv", h, c("w4", 40, 24, 3), bias("b4", 40), pads=[1, 1, 1, 1], strides=[2, 2]))
    h = b.op("GlobalAveragePool", h)
    h = b.op("Flatten", h)
    return b.build(b.op("Gemm", h, b.constant("fc", (RNG.standard_normal((10, 40)) * 0.2).astype(np.float32)), transB=1))


def test_quantized_cnn_fused_equals_float_path():
    """kiln.quantize's QDQ CNN: the int8 kernels (consecutive convs passing blocked uint8, no dequantize
    between them, the MaxPool on the bytes) give the float QDQ path's logits up to a rounding step of the quantized activations."""
    if not vnni():
        pytest.skip("the host has no VNNI: nothing is fused")
    model = small_cnn()
    batches = [RNG.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    q = kiln.quantize(model, calibration=batches)
    fused, plain = kiln.compile(q), kiln.compile(q, int8=False)
    groups = qconv_groups(fused)
    assert len(groups) == 4 and not qconv_groups(plain), fused.groups()
    # No Q/DQ pass of its own between the convs: gone between consecutive ones, in a conv's epilogue
    # (the residual's DQ + Add + Relu + Q) or a pool's elsewhere; only the model's input and tail have one.
    alone = [g["ops"] for g in fused.groups() if ("QuantizeLinear" in g["ops"] or "DequantizeLinear" in g["ops"])
             and "kiln.QConvNCHWcI8" not in g["ops"] and "Pool" not in g["ops"]]
    assert len(alone) == 2 and alone[0].startswith("QuantizeLinear") and "Flatten" in alone[1], fused.groups()
    # The MaxPool between two int8 convs pools the bytes, blocked (not floats in NCHW).
    assert [g["ops"].split("+")[0] for g in fused.groups() if "MaxPool" in g["ops"]] == ["kiln.MaxPoolNCHWc"], fused.groups()
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    a, b = fused(x)[0], plain(x)[0]
    ref = kiln.compile(model)(x)[0]
    # The integer epilogue rounds float32(acc) * multiplier where the float path rounds the float conv / scale:
    # a code may differ by one step now and then; the logits stay within the quantization's own error.
    assert np.abs(a - b).max() <= 0.05 * np.abs(b).max() + 1e-6, (a, b)
    assert np.abs(a - ref).max() <= 0.1 * np.abs(ref).max() + 1e-6


# ---------------------------------------------------------------- bad inputs

def qlinear(x, sx=0.02, zx=128, w_scale=None, zw=None, sy=0.1, zy=128, K=8):
    w = bytes_of((K, 4, 3, 3), np.int8)
    sw = np.full(K, 0.01, np.float32) if w_scale is None else w_scale
    zw = np.zeros(K, np.int8) if zw is None else zw
    return build("QLinearConv", x, [p(sx, np.float32), zx, w, sw, zw, p(sy, np.float32), p(zy, np.uint8)])


@pytest.mark.parametrize("kwargs,match", [
    ({"sx": 0.0}, "x_scale is 0.0.*finite and non-zero"),
    ({"sy": float("nan")}, "y_scale is nan.*finite and non-zero"),
    ({"zx": np.asarray(300, np.int32)}, "x_zero_point 300 is out of the range of uint8"),
    ({"zw": np.full(8, 200, np.int32)}, "w_zero_point 200 is out of the range of int8"),
    ({"w_scale": np.full(5, 0.01, np.float32)}, r"w_scale has shape \[5\].*one value per output channel \[8\]"),
])
def test_qlinear_conv_bad_parameters(kwargs, match):
    x = bytes_of((1, 4, 6, 6), np.uint8)
    kw = dict(kwargs)
    if "zx" in kw and not isinstance(kw["zx"], np.ndarray):
        kw["zx"] = p(kw["zx"], np.uint8)
    kw.setdefault("zx", p(128, np.uint8))
    with pytest.raises(kiln.KilnError, match=match):
        kiln.compile(qlinear(x, **kw))


def test_dequantize_axis_that_does_not_exist():
    b = Builder()
    with pytest.raises(kiln.KilnError, match="axis 4 does not exist in the input of rank 4"):
        b.op("DequantizeLinear", b.constant("w", bytes_of((8, 4, 3, 3), np.int8)), b.constant("s", np.full(8, 0.1, np.float32)), axis=4)


# ---------------------------------------------------------------- ONNX import

def onnx_model(node, x, inits, batch=None):
    from onnx import TensorProto, helper, numpy_helper
    elem = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}
    out = helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)
    shape = [batch or x.shape[0]] + list(x.shape[1:])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem[x.dtype], shape)], [out],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_onnx_qlinear_conv_and_conv_integer_import():
    """QLinearConv (per-channel w, bias, strides 2, asymmetric pads) and ConvInteger (auto_pad SAME_UPPER,
    u8 weights with a zero point) from ONNX files, exact; a grouped QLinearConv runs the portable op."""
    pytest.importorskip("onnx")
    from onnx import helper
    x = bytes_of((1, 8, 9, 9), np.uint8)
    w = bytes_of((12, 8, 3, 3), np.int8)
    sw, b = RNG.uniform(0.002, 0.01, 12).astype(np.float32), RNG.integers(-500, 500, 12).astype(np.int32)
    inits = {"sx": np.float32(0.05), "zx": np.uint8(120), "w": w, "sw": sw, "zw": np.zeros(12, np.int8), "sy": np.float32(0.4),
             "zy": np.uint8(90), "b": b}
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["y"], strides=[2, 2], pads=[1, 0, 1, 2])
    exe = kiln.compile(kiln.graph.from_onnx(onnx_model(node, x, inits)))
    acc = np_conv_integer(x, w, 120, 0, 2, [1, 0, 1, 2]) + b.reshape(1, -1, 1, 1)
    np.testing.assert_array_equal(exe(x)[0], np_requant(acc, (np.float32(0.05) * sw) / np.float32(0.4), 90, np.uint8))
    wu = RNG.integers(70, 190, (6, 8, 3, 3)).astype(np.uint8)
    node = helper.make_node("ConvInteger", ["x", "w", "zx", "zw"], ["y"], auto_pad="SAME_UPPER")
    exe = kiln.compile(kiln.graph.from_onnx(onnx_model(node, x, {"w": wu, "zx": np.uint8(7), "zw": np.uint8(128)})))
    np.testing.assert_array_equal(exe(x)[0], np_conv_integer(x, wu, 7, 128, 1, [1, 1, 1, 1]))
    # Two groups: the portable op (use_int8_conv takes group 1), the same integers.
    wg = bytes_of((6, 4, 3, 3), np.int8)
    inits = {"sx": np.float32(0.05), "zx": np.uint8(120), "w": wg, "sw": np.float32(0.01), "zw": np.int8(0), "sy": np.float32(0.3), "zy": np.uint8(100)}
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"], ["y"], group=2, pads=[1, 1, 1, 1])
    exe = kiln.compile(kiln.graph.from_onnx(onnx_model(node, x, inits)))
    acc = np.concatenate([np_conv_integer(x[:, 4 * g:4 * g + 4], wg[3 * g:3 * g + 3], 120, 0, 1, [1, 1, 1, 1]) for g in range(2)], axis=1)
    np.testing.assert_array_equal(exe(x)[0], np_requant(acc, np.float32(0.05) * np.float32(0.01) / np.float32(0.3), 100, np.uint8))


def test_qlinear_conv_symbolic_batch():
    """A symbolic batch (an ONNX dim_param): one compile, exact at batch 1 and 3."""
    pytest.importorskip("onnx")
    from onnx import helper
    w = bytes_of((20, 8, 3, 3), np.int8)
    inits = {"sx": np.float32(0.05), "zx": np.uint8(100), "w": w, "sw": np.float32(0.01), "zw": np.int8(0), "sy": np.float32(0.3), "zy": np.uint8(90)}
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"], ["y"], pads=[1, 1, 1, 1])
    g = kiln.graph.from_onnx(onnx_model(node, bytes_of((1, 8, 9, 9), np.uint8), inits, batch="batch"), shapes={"x": ("batch", 8, 9, 9)})
    exe = kiln.compile(g, dims={"batch": (1, 8)})
    assert bool(qconv_groups(exe)) == vnni(), exe.groups()
    for n in (1, 3):
        x = bytes_of((n, 8, 9, 9), np.uint8)
        want = np_requant(np_conv_integer(x, w, 100, 0, 1, [1, 1, 1, 1]), np.float32(0.05) * np.float32(0.01) / np.float32(0.3), 90, np.uint8)
        np.testing.assert_array_equal(exe(x)[0], want)


def test_conv_integer_bad_zero_points():
    x = bytes_of((1, 4, 6, 6), np.uint8)
    w = bytes_of((8, 4, 3, 3), np.int8)
    with pytest.raises(kiln.KilnError, match="x_zero_point -1 is out of the range of uint8"):
        kiln.compile(build("ConvInteger", x, [w, np.asarray(-1, np.int32)]))
    with pytest.raises(kiln.KilnError, match=r"w_zero_point has shape \[3\].*one value per output channel \[8\]"):
        kiln.compile(build("ConvInteger", x, [w, np.uint8(3), np.zeros(3, np.int8)]))
