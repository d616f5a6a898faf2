"""The int8 dot-product kernel (use_int8_dot: kiln.QMatMulI8x4 over byte quads, vpdpbusd on VNNI,
sdot on AArch64, widening integer code on AVX2): MatMulInteger, QLinearMatMul and the QDQ pattern
Q([Relu](MatMul(DQ(a), DQ(b)))) become that one kernel, exact against numpy's integer arithmetic for
every signedness and zero point, on the host, an AVX2 target and (compiled, and run under qemu where
it is installed) AArch64."""
import subprocess

import numpy as np
import pytest

import kiln
from kiln.graph import Builder
from kiln_helpers import cpu_targets
import test_export_aarch64 as arm
from test_export_aarch64 import runner  # noqa: F401 (the cross-built C runner, a fixture)

RNG = np.random.default_rng(1851)
TARGETS = cpu_targets()
p = lambda v, t: np.asarray(v, dtype=t).reshape(())  # noqa: E731


def bytes_of(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def np_integer(a, b, za, zb):
    return (a.astype(np.int32) - np.int32(za)) @ (b.astype(np.int32) - np.asarray(zb).astype(np.int32))


def np_requant(acc, m, zy, dtype, relu=False):
    info = np.iinfo(dtype)
    y = np.round(acc.astype(np.float32) * m) + np.float32(zy)
    y = np.clip(y, info.min, info.max)
    return (np.maximum(y, zy) if relu else y).astype(dtype)


def build(op, a, consts):
    b = Builder()
    vals = [b.input("a", a.shape, str(a.dtype))] + [b.constant(f"c{i}", np.ascontiguousarray(c)) for i, c in enumerate(consts)]
    return b.build(b.op(op, *vals))


def int8_groups(exe):
    return [g["ops"] for g in exe.groups() if "kiln.QMatMulI8x4" in g["ops"]]


def has_dot(target):
    """Whether use_int8_dot rewrites for `target`: x86 with VNNI, AArch64 with dotprod; AVX2 keeps the plain integer ops."""
    t = kiln.Target(target)
    return t.has_feature("avx512vnni") or t.has_feature("avxvnni") or t.has_feature("dotprod")


CASES = [(np.uint8, np.int8, False), (np.int8, np.int8, False), (np.uint8, np.uint8, True), (np.int8, np.uint8, True)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("adt,bdt,per_column", CASES)
def test_matmul_integer_on_quads(adt, bdt, per_column, target):
    """Each signedness (the 128 shifts and their zero-point terms), K not a multiple of 4, batch dims."""
    a, b = bytes_of((2, 9, 45), adt), bytes_of((45, 35), bdt)
    za = bytes_of((), adt) // 2
    zb = bytes_of((35,) if per_column else (), bdt) // 2
    exe = kiln.compile(build("MatMulInteger", a, [b, za, zb]), target=target)
    assert bool(int8_groups(exe)) == has_dot(target), exe.groups()
    np.testing.assert_array_equal(exe(a)[0], np_integer(a, b, za, zb))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("adt", [np.uint8, np.int8])
def test_qlinear_matmul_on_quads(adt, target):
    M, K, N = 70, 96, 50
    a, b = bytes_of((M, K), adt), bytes_of((K, N), np.int8)
    sa, za, sb, zb = p(0.03, np.float32), bytes_of((), adt) // 2, RNG.uniform(0.01, 0.05, N).astype(np.float32), np.zeros(N, np.int8)
    acc = np_integer(a, b, za, zb)
    sy = np.float32(np.abs(acc * sa * sb).max() / 100)
    zy = p(20 if adt == np.int8 else 140, adt)
    exe = kiln.compile(build("QLinearMatMul", a, [sa, za, b, sb, zb, p(sy, np.float32), zy]), target=target)
    assert bool(int8_groups(exe)) == has_dot(target), exe.groups()
    want = np_requant(acc, sa * sb / np.float32(sy), zy, adt)
    assert len(np.unique(want)) > 50
    np.testing.assert_array_equal(exe(a)[0], want)


def qdq_model(a, w, sa, za, sw, zw, sy, zy, relu):
    b = Builder()
    x = b.op("DequantizeLinear", b.input("a", a.shape, str(a.dtype)), b.constant("sa", sa), b.constant("za", za))
    wd = b.op("DequantizeLinear", b.constant("w", w), b.constant("sw", sw), b.constant("zw", zw), axis=1)
    h = b.op("MatMul", x, wd)
    if relu:
        h = b.op("Relu", h)
    return b.build(b.op("QuantizeLinear", h, b.constant("sy", sy), b.constant("zy", zy)))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("relu", [False, True])
def test_qdq_matmul_fuses_into_one_int8_kernel(relu, target):
    """DQ -> MatMul [-> Relu] -> Q: one kernel, int32 accumulation and the requantization (and ReLU) as its
    epilogue, equal to numpy's integer form of the same arithmetic."""
    if not has_dot(target):
        pytest.skip(f"{target} has no int8 dot instruction: the QDQ ops stay float (test_graph_quantize covers them)")
    M, K, N = 33, 64, 40
    a, w = bytes_of((M, K), np.uint8), bytes_of((K, N), np.int8)
    sa, za = p(0.02, np.float32), p(128, np.uint8)
    sw, zw = RNG.uniform(0.005, 0.02, N).astype(np.float32), np.zeros(N, np.int8)
    acc = np_integer(a, w, za, zw)
    sy = np.float32(np.abs(acc * sa * sw).max() / 60)
    zy = p(100, np.uint8)
    exe = kiln.compile(qdq_model(a, w, sa, za, sw, zw, p(sy, np.float32), zy, relu), target=target)
    groups = int8_groups(exe)
    assert len(groups) == 1 and "MatMul," not in groups[0] and "DequantizeLinear" not in groups[0], exe.groups()
    want = np_requant(acc, sa * sw / np.float32(sy), zy, np.uint8, relu)
    assert len(np.unique(want)) > 30 and (want == 100).any()
    np.testing.assert_array_equal(exe(a)[0], want)


def test_aarch64_build_uses_the_kernel_and_matches_under_qemu(runner, tmp_path, monkeypatch):
    """u8 activations on AArch64 (shifted to s8 for sdot), QLinearMatMul and a fused QDQ ReLU, run
    under qemu-aarch64 (skipped, naming what is missing, without the cross tools): identical to numpy."""
    M, K, N = 12, 44, 20
    a, w = bytes_of((M, K), np.uint8), bytes_of((K, N), np.int8)
    sa, za, sw, zw = p(0.02, np.float32), p(120, np.uint8), RNG.uniform(0.005, 0.02, N).astype(np.float32), np.zeros(N, np.int8)
    acc = np_integer(a, w, za, zw)
    sy = np.float32(np.abs(acc * sa * sw).max() / 60)
    model = qdq_model(a, w, sa, za, sw, zw, p(sy, np.float32), p(90, np.uint8), True)
    want = np_requant(acc, sa * sw / sy, 90, np.uint8, True)
    exe = kiln.compile(model, target=arm.ARM)
    assert int8_groups(exe), exe.groups()
    so = tmp_path / "q.so"
    monkeypatch.setenv("CC", "aarch64-linux-gnu-gcc")
    exe.export_library(so)
    a.tofile(tmp_path / "in.bin")
    r = subprocess.run([arm._qemu(), "-L", arm.SYSROOT, runner, str(so), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out.bin", dtype="uint8").reshape(want.shape), want)


def dq_product(op, a, w, sa, za, sw, bias=None, **attrs):
    """DQ(a) op DQ(w) [+ bias] with a float output (a classifier's logits: no QuantizeLinear after it)."""
    b = Builder()
    x = b.op("DequantizeLinear", b.input("a", a.shape, str(a.dtype)), b.constant("sa", sa), b.constant("za", za))
    wd = b.op("DequantizeLinear", b.constant("w", w), b.constant("sw", sw), b.constant("zw", np.zeros(sw.shape, w.dtype)),
              axis=0 if attrs.get("transB") else 1)
    extra = [b.constant("c", bias)] if bias is not None else []
    return b.build(b.op(op, x, wd, *extra, **attrs))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op,trans_b,with_bias", [("MatMul", 0, False), ("Gemm", 1, True), ("Gemm", 0, False)])
def test_float_output_product_runs_on_the_codes(op, trans_b, with_bias, target):
    """DQ -> MatMul / Gemm (transB: per-row weight scales, as torchvision's classifier) with a float output:
    the int32 product of the codes times a_scale * w_scale[n] (+ bias), against numpy's integer product."""
    if not has_dot(target):
        pytest.skip(f"{target} has no int8 dot instruction: the QDQ ops stay float")
    M, K, N = 1, 200, 48
    a, w = bytes_of((M, K), np.uint8), bytes_of((N, K) if trans_b else (K, N), np.int8)
    sa, za = p(0.02, np.float32), p(121, np.uint8)
    sw = RNG.uniform(0.005, 0.02, N).astype(np.float32)
    bias = RNG.standard_normal(N).astype(np.float32) if with_bias else None
    attrs = {"transB": trans_b} if op == "Gemm" else {}
    exe = kiln.compile(dq_product(op, a, w, sa, za, sw, bias, **attrs), target=target)
    groups = int8_groups(exe)
    assert len(groups) == 1 and op + "," not in groups[0] and "DequantizeLinear" not in groups[0], exe.groups()
    acc = np_integer(a, w.T if trans_b else w, za, 0)
    want = acc.astype(np.float32) * (sa * sw).astype(np.float32)
    if with_bias:  # the add may be contracted into a multiply-add: one rounding fewer
        np.testing.assert_allclose(exe(a)[0], want + bias, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    else:
        np.testing.assert_array_equal(exe(a)[0], want)
