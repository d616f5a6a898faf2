"""AMX tiles for kiln's int8 and bfloat16 matmuls (ops::amx_schedule, codegen_amx.cpp): on a target with
AMX, kiln.QMatMulI8x4 and the bfloat16 weight-panel matmul run on tdpbusd / tdpbf16ps ("amx tiles" in the
group's schedule detail), exact against numpy's integer arithmetic for int8 and within bfloat16's rounding
for bfloat16; targets without AMX keep the vpdpbusd / vdpbf16ps kernels; shapes the tiles cannot take fall
back to them. Runs need a host with AMX (skipped otherwise, after compiling)."""
import numpy as np
import pytest

import kiln
from kiln.graph import Builder

AMX = "llvm -mcpu=sapphirerapids"
RNG = np.random.default_rng(5151)
p = lambda v, t: np.asarray(v, dtype=t).reshape(())  # noqa: E731


def host_has(feature):
    return kiln.Target("llvm").has_feature(feature)


def build(op, a, consts):
    b = Builder()
    vals = [b.input("a", a.shape, str(a.dtype))] + [b.constant(f"c{i}", np.ascontiguousarray(c)) for i, c in enumerate(consts)]
    return b.build(b.op(op, *vals))


def details(exe, op):
    return [g.get("schedule_detail", "") for g in exe.groups() if op in g["ops"]]


def bytes_of(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("M,K,N", [(64, 256, 96), (48, 128, 40), (2 * 16, 64, 32), (256, 128, 64)])
def test_int8_matmul_runs_on_amx_tiles_exactly(M, K, N):
    a, b = bytes_of((M, K), np.uint8), bytes_of((K, N), np.int8)
    za, zb = p(7, np.uint8), bytes_of((N,), np.int8) // 4
    exe = kiln.compile(build("MatMulInteger", a, [b, za, zb]), target=AMX)
    assert details(exe, "kiln.QMatMulI8x4") == ["amx tiles"], exe.groups()
    if not (host_has("amx-tile") and host_has("amx-int8")):
        pytest.skip("this host has no AMX-INT8: compiled for sapphirerapids, not run")
    want = (a.astype(np.int32) - 7) @ (b.astype(np.int32) - zb.astype(np.int32))
    np.testing.assert_array_equal(exe(a)[0], want)


def test_qlinear_matmul_requantizes_after_the_tiles():
    M, K, N = 64, 192, 64
    a, b = bytes_of((M, K), np.int8), bytes_of((K, N), np.int8)
    sa, za, sb, zb = p(0.02, np.float32), p(-3, np.int8), RNG.uniform(0.01, 0.03, N).astype(np.float32), np.zeros(N, np.int8)
    acc = (a.astype(np.int32) + 3) @ b.astype(np.int32)
    sy, zy = np.float32(np.abs(acc * sa * sb).max() / 100), p(5, np.int8)
    exe = kiln.compile(build("QLinearMatMul", a, [sa, za, b, sb, zb, p(sy, np.float32), zy]), target=AMX)
    assert details(exe, "kiln.QMatMulI8x4") == ["amx tiles"]
    if not (host_has("amx-tile") and host_has("amx-int8")):
        pytest.skip("this host has no AMX-INT8: compiled for sapphirerapids, not run")
    y = np.clip(np.round(acc.astype(np.float32) * (sa * sb / sy)) + np.float32(5), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(exe(a)[0], y)


def test_targets_without_amx_and_odd_shapes_keep_the_vector_kernels():
    a, b = bytes_of((32, 256), np.uint8), bytes_of((256, 32), np.int8)
    for target in ("llvm -mcpu=cascadelake", "llvm -mcpu=znver4", AMX + " -mattr=-amx-tile"):
        exe = kiln.compile(build("MatMulInteger", a, [b, p(0, np.uint8), p(0, np.int8)]), target=target)
        assert details(exe, "kiln.QMatMulI8x4") and "amx" not in details(exe, "kiln.QMatMulI8x4")[0], target
    # K = 200: 50 words of K, not a multiple of the tiles' 16.
    odd = bytes_of((32, 200), np.uint8), bytes_of((200, 32), np.int8)
    exe = kiln.compile(build("MatMulInteger", odd[0], [odd[1], p(0, np.uint8), p(0, np.int8)]), target=AMX)
    assert "amx" not in details(exe, "kiln.QMatMulI8x4")[0]
    if host_has("avx512vnni") and host_has("amx-tile"):
        np.testing.assert_array_equal(exe(odd[0])[0], odd[0].astype(np.int32) @ odd[1].astype(np.int32))


def test_rows_the_tiles_cannot_take_run_the_vector_kernel_on_the_weight_panels():
    """67 rows (prime, over 32): the weights are packed in panels for AMX, the schedule refuses the rows, and the
    search space's vpdpbusd kernel runs on the panels, exactly; a K of 32 (8 words, under a tile's 16) runs on tiles."""
    for M, K in ((67, 256), (64, 32)):
        a, b = bytes_of((M, K), np.uint8), bytes_of((K, 64), np.int8)
        exe = kiln.compile(build("MatMulInteger", a, [b, p(1, np.uint8), p(0, np.int8)]), target=AMX)
        assert ("amx" in details(exe, "kiln.QMatMulI8x4")[0]) == (M == 64)
        if host_has("amx-tile") and host_has("amx-int8"):
            np.testing.assert_array_equal(exe(a)[0], (a.astype(np.int32) - 1) @ b.astype(np.int32))


def bf16_round(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("xshape", [(64, 256), (48, 1, 256), (256, 256)])
def test_bf16_weight_panels_run_on_amx_tiles(xshape):
    """2-D rows, rows [seq, batch 1, K] as BERT's projections have them (the rows' block over seq), and rows
    enough for several row blocks per tile configuration."""
    K, N = xshape[-1], 128
    x = RNG.standard_normal(xshape).astype(np.float32)
    w = RNG.standard_normal((K, N)).astype(np.float32)
    b = Builder()
    y = b.op("MatMul", b.input("x", x.shape, "float32"), b.constant("w", w))
    exe = kiln.compile(b.build(y), target=AMX, precision="bfloat16")
    assert "amx tiles" in details(exe, "kiln.MatMulPackedBBF16Pairs"), exe.groups()
    if not (host_has("amx-tile") and host_has("amx-bf16")):
        pytest.skip("this host has no AMX-BF16: compiled for sapphirerapids, not run")
    want = bf16_round(x).astype(np.float64) @ bf16_round(w).astype(np.float64)
    scale = np.abs(bf16_round(x)).astype(np.float64) @ np.abs(bf16_round(w)).astype(np.float64)
    got = exe(x)[0]
    assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-6), np.max(np.abs(got - want) / scale)


@pytest.mark.parametrize("C,K,H,ks,stride,pad", [(64, 64, 28, 1, 1, 0), (64, 128, 28, 3, 2, 1), (32, 32, 7, 3, 1, 1)])
def test_bf16_blocked_convs_run_on_amx_tiles(C, K, H, ks, stride, pad):
    """kiln.ConvNCHWcBF16Pairs on tiles (1x1, a strided 3x3 with padding, a 7x7 map) equals the vdpbf16ps kernel
    of a target without AMX up to float32 rounding of the same bfloat16 products."""
    x = RNG.standard_normal((1, C, H, H)).astype(np.float32)
    w = (RNG.standard_normal((K, C, ks, ks)) * 0.1).astype(np.float32)
    b = Builder()
    y = b.op("Relu", b.op("Conv", b.input("x", x.shape, "float32"), b.constant("w", w), strides=[stride] * 2, pads=[pad] * 4, kernel_shape=[ks] * 2))
    g = b.build(y)
    amx = kiln.compile(g, target=AMX, precision="bfloat16", winograd=False)
    assert "amx tiles" in details(amx, "kiln.ConvNCHWcBF16Pairs"), amx.groups()
    if not (host_has("amx-tile") and host_has("amx-bf16")):
        pytest.skip("this host has no AMX-BF16: compiled for sapphirerapids, not run")
    vec = kiln.compile(g, target=AMX + " -mattr=-amx-tile", precision="bfloat16", winograd=False)
    assert not any("amx" in d for d in details(vec, "kiln.ConvNCHWcBF16Pairs"))
    got, want = amx(x)[0], vec(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))


def test_exported_library_asks_for_the_tiles_itself(tmp_path):
    """An exported library's AMX kernels ask for the tile state through the runtime they carry or bind."""
    import kiln.runtime
    a, b = bytes_of((64, 256), np.uint8), bytes_of((256, 64), np.int8)
    exe = kiln.compile(build("MatMulInteger", a, [b, p(3, np.uint8), p(0, np.int8)]), target=AMX)
    assert details(exe, "kiln.QMatMulI8x4") == ["amx tiles"]
    if not (host_has("amx-tile") and host_has("amx-int8")):
        pytest.skip("this host has no AMX-INT8: compiled for sapphirerapids, not run")
    want = (a.astype(np.int32) - 3) @ b.astype(np.int32)
    path = tmp_path / "amx_model.so"
    exe.export_library(path, static_runtime=True)
    np.testing.assert_array_equal(kiln.runtime.load_model(str(path))(a)[0], want)


def test_bf16_batched_matmul_of_activations_runs_on_amx_tiles():
    """Attention's products: a batch of matmuls of two computed operands (kiln.MatMulBF16Pairs, B [h, K/2, N])."""
    x = RNG.standard_normal((4, 64, 64)).astype(np.float32)
    y = RNG.standard_normal((4, 64, 96)).astype(np.float32)
    b = Builder()
    out = b.op("MatMul", b.input("x", x.shape, "float32"), b.input("y", y.shape, "float32"))
    exe = kiln.compile(b.build(out), target=AMX, precision="bfloat16")
    assert "amx tiles" in details(exe, "kiln.MatMulBF16Pairs"), exe.groups()
    if not (host_has("amx-tile") and host_has("amx-bf16")):
        pytest.skip("this host has no AMX-BF16: compiled for sapphirerapids, not run")
    want = bf16_round(x).astype(np.float64) @ bf16_round(y).astype(np.float64)
    scale = np.abs(bf16_round(x)).astype(np.float64) @ np.abs(bf16_round(y)).astype(np.float64)
    got = exe(x, y)[0]
    assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-6), np.max(np.abs(got - want) / scale)


@pytest.mark.parametrize("trans_a,trans_b", [(1, 0), (0, 1), (1, 1)])
def test_bf16_transposed_operands_run_on_amx_tiles(trans_a, trans_b):
    """A Gemm reading A or B transposed (as a training step's gradients do): use_amx_operands transposes the pair
    words, and the product runs on tiles; within bfloat16's rounding of numpy's."""
    M, K, N = 64, 128, 96
    a = RNG.standard_normal((K, M) if trans_a else (M, K)).astype(np.float32)
    w = RNG.standard_normal((N, K) if trans_b else (K, N)).astype(np.float32)
    b = Builder()
    y = b.op("Gemm", b.input("a", a.shape, "float32"), b.input("w", w.shape, "float32"), transA=trans_a, transB=trans_b)
    exe = kiln.compile(b.build(y), target=AMX, precision="bfloat16")
    assert "amx tiles" in details(exe, "kiln.MatMulBF16Pairs"), exe.groups()
    if not (host_has("amx-tile") and host_has("amx-bf16")):
        pytest.skip("this host has no AMX-BF16: compiled for sapphirerapids, not run")
    A, W = bf16_round(a).astype(np.float64), bf16_round(w).astype(np.float64)
    A, W = (A.T if trans_a else A), (W.T if trans_b else W)
    want, scale = A @ W, np.abs(A) @ np.abs(W)
    got = exe(a, w)[0]
    assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-6), np.max(np.abs(got - want) / scale)
