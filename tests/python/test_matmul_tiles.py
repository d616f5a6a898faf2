"""The default register tile of a matmul follows the target's registers: on
AVX-512 (32 vector registers) four vectors wide (6 rows x 64 columns, the
packed weights' panels as wide), on AVX2 two (6 x 16). Each must give numpy's
results, with the fused epilogues of a transformer's projections."""
import numpy as np
import pytest

import kiln
from kiln.graph import Builder

from test_awkward_rows import AVX2, AVX512, TARGETS, gelu, gelu_ref, tile


def lanes(target):
    return 16 if target == AVX512 else 8


def projection(rng, M, K, N, target, epilogue="gelu", residual=False):
    """x [M, K] @ w + bias, then GELU, ReLU or (residual) + x: BERT's and ViT's FFN and projections."""
    x, w, bias = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (K, N), (N,)))
    b = Builder()
    xi = b.input("x", x.shape)
    y = b.op("Add", b.op("MatMul", xi, b.constant("w", w)), b.constant("bias", bias))
    ref = x.astype(np.float64) @ w + bias
    if residual:
        y, ref = b.op("Add", y, xi), ref + x
    elif epilogue == "gelu":
        y, ref = gelu(b, y), gelu_ref(ref)
    else:
        y, ref = b.op("Relu", y), np.maximum(ref, 0)
    exe = kiln.compile(b.build(y), target=target)
    return exe(x)[0], ref, exe


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M,K,N,residual", [(197, 96, 192, False), (128, 64, 256, False), (50, 64, 128, False), (197, 192, 192, True)])
def test_projection_tile_follows_the_registers(rng, target, M, K, N, residual):
    got, ref, exe = projection(rng, M, K, N, target, residual=residual)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    assert exe.num_kernels == 1
    detail = exe.groups()[0]["schedule_detail"]
    want = 4 if target == AVX512 and M >= 128 else 2  # under 128 rows two vectors ran faster (Swin-T's 49)
    assert tile(detail, "j")[-1] == want * lanes(target), detail
    rows = tile(detail, "i")[-1]
    assert rows * want + want + 1 <= (32 if target == AVX512 else 16), detail


@pytest.mark.parametrize("target", TARGETS)
def test_columns_four_vectors_do_not_divide_keep_two(rng, target):
    """N = 96 on AVX-512 is six vectors, not a multiple of four: panels and tile stay two vectors wide."""
    got, ref, exe = projection(rng, 50, 64, 96, target, epilogue="relu")
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    assert tile(exe.groups()[0]["schedule_detail"], "j")[-1] == 2 * lanes(target)


@pytest.mark.parametrize("target", TARGETS)
def test_attention_values_product(rng, target):
    """softmax(.) V of attention at 197 tokens, heads of 64: one four-vector tile across the head on AVX-512."""
    a, v = rng.standard_normal((3, 197, 197)).astype(np.float32), rng.standard_normal((3, 197, 64)).astype(np.float32)
    b = Builder()
    exe = kiln.compile(b.build(b.op("MatMul", b.input("a", a.shape), b.input("v", v.shape))), target=target)
    np.testing.assert_allclose(exe(a, v)[0], a.astype(np.float64) @ v, rtol=1e-4, atol=1e-4)
    assert tile(exe.groups()[0]["schedule_detail"], "j")[-1] == (64 if target == AVX512 else 16)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M", [197, 128])
def test_full_four_vector_tile_unrolls_its_reduce_steps(rng, target, M):
    """AVX-512: a 6 x 4-vector tile (197 rows) unrolls up to 512 steps, its reduce steps too
    (ViT 0.90-0.92x); 4 x 4 (128 rows) and AVX2's tiles keep 64 (unroll choice 2)."""
    got, ref, exe = projection(rng, M, 128, 128, target, residual=True)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    detail = exe.groups()[0]["schedule_detail"]
    full = target == AVX512 and tile(detail, "i")[-1] == 6
    assert full == (target == AVX512 and M == 197), detail
    assert f"matmul.unroll={3 if full else 2}" in detail, detail
