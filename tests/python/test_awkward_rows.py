"""Matmuls whose rows (or columns) have no good divisor for the register tile
(ViT's 197 tokens, CLIP's 77, a prime count): the default schedule tiles them
over the padded extent, full tiles plus a guarded remainder, and must give
numpy's results with fused epilogues, on an AVX2 and an AVX-512 target."""
import math

import numpy as np
import pytest

import kiln
from kiln.graph import Builder
from kiln_helpers import host_has

AVX2 = "llvm -mcpu=znver3 -num-cores=2"
AVX512 = "llvm -mcpu=skylake-avx512 -num-cores=2"


TARGETS = [
    pytest.param(AVX2, marks=pytest.mark.skipif(not host_has("avx2") or not host_has("fma"), reason="the host has no AVX2/FMA")),
    pytest.param(AVX512, marks=pytest.mark.skipif(not host_has("avx512f"), reason="the host has no AVX-512")),
]


def gelu(b, y):
    """GELU as ONNX exports it from PyTorch: 0.5 * y * (1 + erf(y / sqrt 2))."""
    c = lambda name, v: b.constant(name, np.array(v, np.float32))
    e = b.op("Erf", b.op("Mul", y, c("r2", 1 / math.sqrt(2))))
    return b.op("Mul", b.op("Mul", y, c("half", 0.5)), b.op("Add", e, c("one", 1.0)))


def gelu_ref(y):
    y = y.astype(np.float64)
    erf = np.vectorize(math.erf)
    return 0.5 * y * (1 + erf(y / math.sqrt(2)))


def dense(rng, M, K, N, epilogue, target):
    x, w, bias = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (K, N), (N,)))
    b = Builder()
    y = b.op("Add", b.op("MatMul", b.input("x", x.shape), b.constant("w", w)), b.constant("bias", bias))
    y = gelu(b, y) if epilogue == "gelu" else b.op("Relu", y)
    exe = kiln.compile(b.build(y), target=target)
    ref = x.astype(np.float64) @ w + bias
    ref = gelu_ref(ref) if epilogue == "gelu" else np.maximum(ref, 0)
    return exe(x)[0], ref, exe


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M", [1, 7, 50, 77, 197, 255])
@pytest.mark.parametrize("K,N,epilogue", [(64, 96, "gelu"), (96, 197, "relu"), (32, 64, "relu")])
def test_dense_epilogue_matches_numpy(rng, target, M, K, N, epilogue):
    got, ref, exe = dense(rng, M, K, N, epilogue, target)
    assert exe.num_kernels == 1
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M,K,N", [(197, 64, 197), (197, 197, 64), (77, 64, 77), (50, 50, 64), (7, 13, 9)])
def test_batched_matmul_matches_numpy(rng, target, M, K, N):
    """The batched matmuls of attention: Q K^T and softmax(.) V over 3 heads."""
    a, c = rng.standard_normal((3, M, K)).astype(np.float32), rng.standard_normal((3, K, N)).astype(np.float32)
    b = Builder()
    exe = kiln.compile(b.build(b.op("MatMul", b.input("a", a.shape), b.input("c", c.shape))), target=target)
    np.testing.assert_allclose(exe(a, c)[0], a.astype(np.float64) @ c, rtol=1e-4, atol=1e-4)


def tile(detail, axis):
    """The factors of `axis` in a group's schedule detail ('matmul.i=33x1x1x6' -> [33, 1, 1, 6])."""
    word = next(w for w in detail.split() if w.startswith(f"matmul.{axis}="))
    return [int(f) for f in word.split("=")[1].split("x")]


@pytest.mark.parametrize("target", TARGETS)
def test_prime_rows_get_a_register_tile(rng, target):
    """197 rows (prime): the default's register tile has several rows (6), not
    the one row that the divisors of 197 allow; its last tile is partial."""
    _, _, exe = dense(rng, 197, 64, 96, "relu", target)
    rows = tile(exe.groups()[0]["schedule_detail"], "i")
    assert rows[-1] == 6 and rows[0] * rows[-1] == 198, rows


@pytest.mark.parametrize("target", TARGETS)
def test_prime_columns_get_whole_vectors(rng, target):
    """197 columns: the vector tile stays two whole vectors (a remainder panel), not 1 lane."""
    a, c = rng.standard_normal((2, 64, 16)).astype(np.float32), rng.standard_normal((2, 16, 197)).astype(np.float32)
    b = Builder()
    exe = kiln.compile(b.build(b.op("MatMul", b.input("a", a.shape), b.input("c", c.shape))), target=target)
    cols = tile(exe.groups()[0]["schedule_detail"], "j")
    lanes = 16 if target == AVX512 else 8
    assert cols[-1] == 2 * lanes, cols


@pytest.mark.parametrize("target", TARGETS)
def test_prime_rows_along_a_batch_axis(rng, target):
    """ViT's projections read [197, 1, 768] (sequence first): the 197 rows are
    the batch axis, and they get the register tile, not the row axis of 1."""
    x, w, bias = rng.standard_normal((197, 1, 64)).astype(np.float32), rng.standard_normal((64, 96)).astype(np.float32), rng.standard_normal(96).astype(np.float32)
    b = Builder()
    y = b.op("Add", b.op("MatMul", b.input("x", x.shape), b.constant("w", w)), b.constant("bias", bias))
    exe = kiln.compile(b.build(y), target=target)
    np.testing.assert_allclose(exe(x)[0], x.astype(np.float64) @ w + bias, rtol=1e-4, atol=1e-4)
    rows = tile(exe.groups()[0]["schedule_detail"], "b0")
    assert rows[-1] == 6 and rows[0] * rows[-1] == 198, rows


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("S", [50, 77, 197])
def test_softmax_over_awkward_rows(rng, target, S):
    """Attention's softmax over S keys: whole vectors and a peeled rest (not one lane at a time at 197)."""
    x = rng.standard_normal((1, 3, S, S)).astype(np.float32)
    b = Builder()
    exe = kiln.compile(b.build(b.op("Softmax", b.input("x", x.shape), axis=-1)), target=target)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(exe(x)[0], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    detail = exe.groups()[0]["schedule_detail"]
    width = int(next(w for w in detail.split() if w.startswith("softmax.sum.k=")).split("x")[-1])
    assert width % 8 == 0, detail
