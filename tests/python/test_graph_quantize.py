"""The ONNX quantized operators (QuantizeLinear, DequantizeLinear, MatMulInteger,
QLinearMatMul) against numpy references doing the same integer and float32
arithmetic, compared exactly: per tensor and per channel, built with
kiln.graph's Builder and imported from ONNX files, on the host and an AVX2
target; a hand-built QDQ graph; and each bad input raising KilnError."""
import subprocess

import numpy as np
import pytest

import kiln
from kiln.graph import Builder
from kiln_helpers import cpu_targets
import test_export_aarch64 as arm
from test_export_aarch64 import runner  # noqa: F401 (the cross-built C runner, a fixture)

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(51)
TARGETS = cpu_targets()


# ---------------------------------------------------------------- numpy references

def along(p, ndim, axis):
    """A per-channel parameter shaped to broadcast along `axis` (a scalar stays as it is)."""
    p = np.asarray(p)
    if p.ndim == 0 or p.size == 1:
        return p.reshape(())
    shape = [1] * ndim
    shape[axis] = -1
    return p.reshape(shape)


def np_quantize(x, s, z, axis=1, dtype=np.uint8):
    s, z = along(s, x.ndim, axis), along(z, x.ndim, axis)
    info = np.iinfo(dtype)
    y = np.round(x / s) + z.astype(np.float32)  # float32 throughout; np.round rounds half to even
    y = np.where(np.isnan(y), z.astype(np.float32), y)  # kiln's choice where ONNX leaves NaN undefined: the zero point
    return np.clip(y, info.min, info.max).astype(dtype)


def np_dequantize(x, s, z, axis=1):
    s, z = along(s, x.ndim, axis), along(z, x.ndim, axis)
    return (x.astype(np.int32) - z.astype(np.int32)).astype(np.float32) * s


def np_matmul_integer(a, b, za, zb):
    za = np.asarray(za).reshape(-1, 1) if np.asarray(za).size > 1 else np.asarray(za)
    return (a.astype(np.int32) - za.astype(np.int32)) @ (b.astype(np.int32) - np.asarray(zb).astype(np.int32))


def np_qlinear_matmul(a, sa, za, b, sb, zb, sy, zy):
    acc = np_matmul_integer(a, b, za, zb)
    row = lambda p: np.asarray(p).reshape(-1, 1) if np.asarray(p).size > 1 else np.asarray(p).reshape(())  # noqa: E731
    m = row(sa) * np.asarray(sb) / row(sy)  # float32, in the kernel's order
    info = np.iinfo(zy.dtype)
    y = np.round(acc.astype(np.float32) * m) + row(zy).astype(np.float32)
    return np.clip(y, info.min, info.max).astype(zy.dtype)


# ---------------------------------------------------------------- running through kiln

def run_built(op, feeds, target="llvm", **attrs):
    """`op` on feeds: ("in", array) graph inputs, ("const", array) constants, None absent."""
    b = Builder()
    vals, feed = [], []
    for i, f in enumerate(feeds):
        if f is None:
            vals.append(None)
        elif f[0] == "in":
            vals.append(b.input(f"x{i}", f[1].shape, str(f[1].dtype)))
            feed.append(f[1])
        else:
            vals.append(b.constant(f"c{i}", np.ascontiguousarray(f[1])))
    exe = kiln.compile(b.build(b.op(op, *vals, **attrs)), target=target)
    return exe(*feed)[0]


ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
        np.dtype(np.int32): TensorProto.INT32}


def run_onnx(op, feeds, out_dtype, target="llvm", **attrs):
    """`op` as an ONNX model (opset 13) made with onnx.helper: "in" feeds are graph inputs, "const" ones initializers."""
    names, inputs, inits, feed = [], [], [], []
    for i, f in enumerate(feeds):
        if f is None:
            names.append("")
            continue
        names.append(f"t{i}")
        if f[0] == "in":
            inputs.append(helper.make_tensor_value_info(f"t{i}", ELEM[f[1].dtype], f[1].shape))
            feed.append(f[1])
        else:
            inits.append(numpy_helper.from_array(np.asarray(f[1]), f"t{i}"))
    node = helper.make_node(op, names, ["y"], **attrs)
    out = helper.make_tensor_value_info("y", ELEM[np.dtype(out_dtype)], None)
    m = helper.make_model(helper.make_graph([node], "g", inputs, [out], inits), opset_imports=[helper.make_opsetid("", 13)])
    exe = kiln.compile(kiln.graph.from_onnx(m.SerializeToString()), target=target)
    return exe(*feed)[0]


def scales(n):
    return (RNG.uniform(0.01, 0.2, n) if n else RNG.uniform(0.01, 0.2, ())).astype(np.float32)


def zero_points(n, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min // 2, info.max // 2 + 1, n if n else ()).astype(dtype)


def float_input(shape):
    """Random values plus exact ties (x / s half-way between integers at the scale 0.125), values that saturate, NaN and +-inf."""
    x = RNG.standard_normal(shape).astype(np.float32) * 8
    flat = x.reshape(-1)
    flat[::7] = (RNG.integers(-20, 20, flat[::7].shape) + 0.5).astype(np.float32) * 0.125
    flat[::11] = 1e4
    flat[5::11] = -1e4
    flat[3::13] = np.nan
    flat[4::17] = np.inf
    flat[6::17] = -np.inf
    return x


# ---------------------------------------------------------------- QuantizeLinear / DequantizeLinear

QDQ_CASES = [
    # (x shape, per-channel axis or None, quantized dtype)
    ((4, 6, 5), None, np.uint8),
    ((4, 6, 5), None, np.int8),
    ((4, 6, 5), 1, np.uint8),
    ((4, 6, 5), 1, np.int8),
    ((3, 8), 0, np.int8),
    ((2, 3, 7), -1, np.uint8),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape,axis,dtype", QDQ_CASES)
@pytest.mark.parametrize("front", ["builder", "onnx"])
def test_quantize_dequantize(shape, axis, dtype, front, target):
    x = float_input(shape)
    n = 0 if axis is None else shape[axis]
    s, z = scales(n), zero_points(n, dtype)
    if n:
        s[0] = 0.125  # the ties of float_input land on this channel's half-way points
    else:
        s = np.float32(0.125).reshape(())
    attrs = {} if axis is None else {"axis": axis}
    qfeeds = [("in", x), ("const", s), ("const", z)]
    q = run_built("QuantizeLinear", qfeeds, target, **attrs) if front == "builder" else run_onnx("QuantizeLinear", qfeeds, dtype, target, **attrs)
    want = np_quantize(x, s, z, axis if axis is not None else 1, dtype)
    assert q.dtype == dtype
    np.testing.assert_array_equal(q, want)
    dfeeds = [("in", want), ("const", s), ("const", z)]
    d = run_built("DequantizeLinear", dfeeds, target, **attrs) if front == "builder" else run_onnx("DequantizeLinear", dfeeds, np.float32, target, **attrs)
    np.testing.assert_array_equal(d, np_dequantize(want, s, z, axis if axis is not None else 1))


def near_ties(s, n=4096):
    """float32 values at and beside x / s = k + 0.5 (the float32 nearest each tie and its neighbours), plus random ones."""
    k = RNG.integers(-140, 140, n // 4).astype(np.float64)
    t = ((k + 0.5) * np.float64(s)).astype(np.float32)
    return np.concatenate([t, np.nextafter(t, np.float32(np.inf)), np.nextafter(t, np.float32(-np.inf)),
                           RNG.standard_normal(n // 4).astype(np.float32) * np.float32(s) * 100]).reshape(4, -1)


@pytest.mark.parametrize("target", TARGETS)
def test_quantize_constant_scale_matches_division(target):
    """A constant per-tensor scale gives the float32 division's codes bit for bit on values at and beside the
    rounding ties, where a multiply by the float32 reciprocal differs (a guard for any division-free rewrite; an
    exact one is float32(double(x) * double(1/s)), measured no faster here, issue 51)."""
    naive_differs = False
    for s in np.array([0.0731, 0.1, 1 / 3, 0.0123457, 0.011764706], np.float32):
        x = near_ties(s)
        z = np.uint8(128).reshape(())
        want = np_quantize(x, s.reshape(()), z)
        np.testing.assert_array_equal(run_built("QuantizeLinear", [("in", x), ("const", s.reshape(())), ("const", z)], target), want)
        naive = np.clip(np.round(x * (np.float32(1) / s)) + np.float32(128), 0, 255).astype(np.uint8)
        naive_differs |= bool((naive != want).any())
    assert naive_differs  # the values reach the ties a float32 reciprocal rounds the wrong way


def test_quantize_defaults_and_runtime_scale():
    """No zero point: uint8 with zero point 0; a scale given as a graph input (a kernel argument) computes the same."""
    x = float_input((5, 9))
    s = np.float32(0.25).reshape(())
    np.testing.assert_array_equal(run_built("QuantizeLinear", [("in", x), ("const", s)]), np_quantize(x, s, np.uint8(0)))
    z = np.int8(-3).reshape(())
    np.testing.assert_array_equal(run_built("QuantizeLinear", [("in", x), ("in", s), ("in", z)]), np_quantize(x, s, z, dtype=np.int8))


# ---------------------------------------------------------------- MatMulInteger / QLinearMatMul

def int8_matrix(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


MM_CASES = [
    # (a dtype, b dtype, per-row/column params)
    (np.uint8, np.int8, False),
    (np.int8, np.int8, False),
    (np.uint8, np.uint8, True),
    (np.int8, np.uint8, True),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("adt,bdt,per_axis", MM_CASES)
@pytest.mark.parametrize("front", ["builder", "onnx"])
def test_matmul_integer(adt, bdt, per_axis, front, target):
    M, K, N = 7, 37, 19
    a, b = int8_matrix((M, K), adt), int8_matrix((K, N), bdt)
    za, zb = zero_points(M if per_axis else 0, adt), zero_points(N if per_axis else 0, bdt)
    feeds = [("in", a), ("const", b), ("const", za), ("const", zb)]
    got = run_built("MatMulInteger", feeds, target) if front == "builder" else run_onnx("MatMulInteger", feeds, np.int32, target)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np_matmul_integer(a, b, za, zb))
    if front == "builder":  # no zero points: the plain integer product
        np.testing.assert_array_equal(run_built("MatMulInteger", [("in", a), ("in", b)], target), a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("adt,bdt,per_axis", MM_CASES)
@pytest.mark.parametrize("front", ["builder", "onnx"])
def test_qlinear_matmul(adt, bdt, per_axis, front, target):
    M, K, N = 6, 33, 21
    ydt = np.int8 if adt == np.int8 else np.uint8
    a, b = int8_matrix((M, K), adt), int8_matrix((K, N), bdt)
    sa, za = scales(M if per_axis else 0), zero_points(M if per_axis else 0, adt)
    sb, zb = scales(N if per_axis else 0), zero_points(N if per_axis else 0, bdt)
    # y's scale from the real products' range (per row or overall), its zero point near the middle of its type
    real = np.abs(np_matmul_integer(a, b, za, zb) * (sa.reshape(-1, 1) if per_axis else sa) * sb)
    sy = (real.max(axis=1) if per_axis else real.max()).astype(np.float32) / np.float32(100)
    zy = (zero_points(M if per_axis else 0, np.int8) // 4 + (128 if ydt == np.uint8 else 0)).astype(ydt)
    feeds = [("in", a), ("const", sa), ("const", za), ("const", b), ("const", sb), ("const", zb), ("const", sy), ("const", zy)]
    got = run_built("QLinearMatMul", feeds, target) if front == "builder" else run_onnx("QLinearMatMul", feeds, ydt, target)
    want = np_qlinear_matmul(a, sa, za, b, sb, zb, sy, zy)
    assert got.dtype == ydt
    assert len(np.unique(want)) > 20  # the scales spread the outputs (not all saturated)
    np.testing.assert_array_equal(got, want)


def test_qlinear_matmul_batched():
    """Batch dimensions with per-tensor parameters."""
    a, b = int8_matrix((3, 5, 16), np.uint8), int8_matrix((16, 4), np.int8)
    p = lambda v, t: np.asarray(v, dtype=t).reshape(())  # noqa: E731
    feeds = [("in", a), ("const", p(0.05, np.float32)), ("const", p(128, np.uint8)), ("const", b), ("const", p(0.02, np.float32)),
             ("const", p(0, np.int8)), ("const", p(0.1, np.float32)), ("const", p(100, np.uint8))]
    got = run_built("QLinearMatMul", feeds)
    want = np.stack([np_qlinear_matmul(a[i], *[f[1] for f in feeds[1:3]], b, *[f[1] for f in feeds[4:]]) for i in range(3)])
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- a QDQ graph

@pytest.mark.parametrize("target", TARGETS)
def test_qdq_matmul_graph(target):
    """x -> Q -> DQ -> MatMul(DQ(int8 weights, per column)) -> Q -> DQ, from an ONNX file, equal to numpy.
    Power-of-two scales keep every float32 product and sum exact, so the float MatMul's order cannot change a bit."""
    M, K, N = 8, 24, 12
    x = (RNG.integers(-40, 40, (M, K)) * 0.25).astype(np.float32)
    sx, zx = np.float32(0.5).reshape(()), np.uint8(128).reshape(())
    wq = int8_matrix((K, N), np.int8)
    sw = (2.0 ** -RNG.integers(3, 7, N)).astype(np.float32)
    zw = np.zeros(N, np.int8)
    sy, zy = np.float32(8.0).reshape(()), np.uint8(120).reshape(())
    inits = [numpy_helper.from_array(v, n) for v, n in [(sx, "sx"), (zx, "zx"), (wq, "wq"), (sw, "sw"), (zw, "zw"), (sy, "sy"), (zy, "zy")]]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["h"]),
        helper.make_node("QuantizeLinear", ["h", "sy", "zy"], ["hq"]),
        helper.make_node("DequantizeLinear", ["hq", "sy", "zy"], ["y"]),
    ]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    got = kiln.compile(kiln.graph.from_onnx(m.SerializeToString()), target=target)(x)[0]
    xd = np_dequantize(np_quantize(x, sx, zx), sx, zx)
    h = xd @ np_dequantize(wq, sw, zw, axis=1)
    want = np_dequantize(np_quantize(h, sy, zy), sy, zy)
    assert len(np.unique(want)) > 10
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- bad inputs

def f32(v):
    return np.asarray(v, dtype=np.float32)


X = np.ones((2, 3), np.float32)

BAD = [
    # (op, feeds, attrs, message)
    ("QuantizeLinear", [("in", X), ("const", f32(0)), ("const", np.uint8(3).reshape(()))], {}, "y_scale is 0.*finite and non-zero"),
    ("QuantizeLinear", [("in", X), ("const", f32(np.nan)), None], {}, "y_scale is nan.*finite and non-zero"),
    ("QuantizeLinear", [("in", X), ("const", f32([0.1, 0.0, 0.2])), ("const", np.zeros(3, np.int8))], {}, "y_scale element 1 is 0"),
    ("DequantizeLinear", [("in", np.zeros((2, 3), np.uint8)), ("const", f32(np.inf)), None], {}, "x_scale is inf"),
    ("QuantizeLinear", [("in", X), ("const", f32(0.1)), ("const", np.asarray(300))], {"output_dtype": 2}, "300 is out of the range of uint8 \\[0, 255\\]"),
    ("QuantizeLinear", [("in", X), ("const", f32(0.1)), ("const", np.asarray(3))], {}, "y_zero_point has dtype int64.*output_dtype"),
    ("DequantizeLinear", [("in", np.zeros((2, 3), np.int8)), ("const", f32(0.1)), ("const", np.asarray(-129, np.int32))], {},
     "-129 is out of the range of int8 \\[-128, 127\\]"),
    ("QuantizeLinear", [("in", X), ("const", f32([0.1, 0.2, 0.3])), None], {"axis": 2}, "axis 2 does not exist in the input of rank 2"),
    ("DequantizeLinear", [("in", np.zeros((2, 3), np.uint8)), ("const", f32([0.1, 0.2, 0.3])), None], {"axis": -3}, "axis -3 does not exist"),
    ("QuantizeLinear", [("in", X), ("const", f32([0.1, 0.2])), None], {"axis": 1}, "y_scale has 2 values but axis 1 of the input has 3"),
    ("QuantizeLinear", [("in", X), ("const", f32([0.1, 0.2, 0.3])), ("const", np.zeros(2, np.uint8))], {"axis": 1}, "y_zero_point has 2 values"),
    ("MatMulInteger", [("in", np.zeros((2, 3), np.uint8)), ("in", np.zeros((3, 4), np.int8)), ("const", np.asarray(256, np.int32)), None], {},
     "a_zero_point 256 is out of the range of uint8"),
    ("MatMulInteger", [("in", np.zeros((2, 3), np.uint8)), ("in", np.zeros((3, 4), np.int8)), None, ("const", np.zeros(3, np.int8))], {},
     "b_zero_point has 3 values but the columns of \\[3, 4\\] has 4"),
    ("MatMulInteger", [("in", np.zeros((2, 3), np.float32)), ("in", np.zeros((3, 4), np.int8))], {}, "A has dtype float32; it must be uint8 or int8"),
    ("QLinearMatMul", [("in", np.zeros((2, 3), np.uint8)), ("const", f32(0.0)), ("const", np.uint8(0).reshape(())), ("const", np.zeros((3, 4), np.int8)),
                       ("const", f32(0.1)), ("const", np.int8(0).reshape(())), ("const", f32(0.1)), ("const", np.uint8(0).reshape(()))], {},
     "a_scale is 0"),
    ("QLinearMatMul", [("in", np.zeros((2, 3), np.uint8)), ("const", f32(0.1)), ("const", np.uint8(0).reshape(())), ("const", np.zeros((3, 4), np.int8)),
                       ("const", f32([0.1, 0.1])), ("const", np.int8(0).reshape(())), ("const", f32(np.nan)), ("const", np.uint8(0).reshape(()))], {},
     "b_scale has 2 values but the columns"),
]


@pytest.mark.parametrize("op,feeds,attrs,message", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_inputs(op, feeds, attrs, message):
    with pytest.raises(kiln.KilnError, match=message):
        run_built(op, feeds, **attrs)


def test_bad_scale_from_onnx():
    """The importer reports a zero scale in a model, naming the node."""
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q0")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 3])],
                          [numpy_helper.from_array(f32(0), "s"), numpy_helper.from_array(np.uint8(0).reshape(()), "z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(kiln.KilnError, match="QuantizeLinear node 'q0'.*y_scale is 0"):
        kiln.graph.from_onnx(m.SerializeToString())


# ---------------------------------------------------------------- larger shapes, other targets

@pytest.mark.parametrize("target", TARGETS)
def test_vectorized_shapes(target):
    """Shapes the default schedules vectorize and tile (odd tails included), per channel."""
    x = float_input((8, 64, 35))
    s, z = scales(64), zero_points(64, np.int8)
    s[0] = 0.125
    q = run_built("QuantizeLinear", [("in", x), ("const", s), ("const", z)], target, axis=1)
    np.testing.assert_array_equal(q, np_quantize(x, s, z, 1, np.int8))
    np.testing.assert_array_equal(run_built("DequantizeLinear", [("in", q), ("const", s), ("const", z)], target, axis=1), np_dequantize(q, s, z, 1))
    feeds, want = qlinear_case(130, 256, 97)
    np.testing.assert_array_equal(run_built("QLinearMatMul", feeds, target), want)


def qlinear_case(M, K, N):
    """QLinearMatMul feeds (u8 x s8 -> u8, per row and column) and numpy's answer."""
    a, b = int8_matrix((M, K), np.uint8), int8_matrix((K, N), np.int8)
    sa, za, sb, zb = scales(M), zero_points(M, np.uint8), scales(N), zero_points(N, np.int8)
    real = np.abs(np_matmul_integer(a, b, za, zb) * sa.reshape(-1, 1) * sb)
    sy = real.max(axis=1).astype(np.float32) / np.float32(100)
    zy = (zero_points(M, np.int8) // 4 + 128).astype(np.uint8)
    feeds = [("in", a), ("const", sa), ("const", za), ("const", b), ("const", sb), ("const", zb), ("const", sy), ("const", zy)]
    return feeds, np_qlinear_matmul(a, sa, za, b, sb, zb, sy, zy)


def test_quantized_graph_exported_for_aarch64_under_qemu(runner, tmp_path, monkeypatch):
    """Q -> QLinearMatMul -> DQ built for AArch64, run under qemu-aarch64 through the C API (the runner
    fixture skips, naming what is missing, where the cross tools or qemu are absent): identical to numpy."""
    M, K, N = 12, 40, 9
    x = (RNG.integers(-60, 60, (M, K)) * 0.25).astype(np.float32)
    w = int8_matrix((K, N), np.int8)
    sw = (2.0 ** -RNG.integers(2, 6, N)).astype(np.float32)
    p = lambda v, t: np.asarray(v, dtype=t).reshape(())  # noqa: E731
    sx, zx, zw, sy, zy = p(0.25, np.float32), p(128, np.uint8), np.zeros(N, np.int8), p(4.0, np.float32), p(110, np.uint8)
    b = Builder()
    xq = b.op("QuantizeLinear", b.input("x", x.shape), b.constant("sx", sx), b.constant("zx", zx))
    yq = b.op("QLinearMatMul", xq, b.constant("sx2", sx), b.constant("zx2", zx), b.constant("w", w), b.constant("sw", sw), b.constant("zw", zw),
              b.constant("sy", sy), b.constant("zy", zy))
    model = b.build(b.op("DequantizeLinear", yq, b.constant("sy2", sy), b.constant("zy2", zy)), names=["y"])
    xq_np = np_quantize(x, sx, zx)
    want = np_dequantize(np_qlinear_matmul(xq_np, sx, zx, w, sw, zw, sy, zy), sy, zy)
    np.testing.assert_array_equal(kiln.compile(model)(x)[0], want)
    exe = kiln.compile(model, target=arm.ARM)
    so = tmp_path / "q.so"
    monkeypatch.setenv("CC", "aarch64-linux-gnu-gcc")
    exe.export_library(so)
    x.tofile(tmp_path / "in.bin")
    r = subprocess.run([arm._qemu(), "-L", arm.SYSROOT, runner, str(so), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out.bin", dtype="float32").reshape(want.shape), want)


def test_symbolic_batch_from_onnx():
    """A dim_param batch: Q (per channel on the last axis), DQ and MatMulInteger compile once and run at every size."""
    s, z, w = scales(16), zero_points(16, np.int8), int8_matrix((16, 8), np.int8)
    inits = [numpy_helper.from_array(s, "s"), numpy_helper.from_array(z, "z"), numpy_helper.from_array(w, "w")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=-1), helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=-1),
             helper.make_node("MatMulInteger", ["q", "w"], ["m"])]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in [("q", TensorProto.INT8), ("y", TensorProto.FLOAT), ("m", TensorProto.INT32)]]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])], outs, inits)
    exe = kiln.compile(kiln.graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()))
    for n in (1, 3, 17):
        x = float_input((n, 16))
        q, y, m = exe(x)
        np.testing.assert_array_equal(q, np_quantize(x, s, z, 1, np.int8))
        np.testing.assert_array_equal(y, np_dequantize(q, s, z, 1))
        np.testing.assert_array_equal(m, np_matmul_integer(q, w, np.int8(0), np.int8(0)))
