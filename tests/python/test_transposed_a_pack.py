"""A transposed-A matmul (a Linear layer's weight gradient: Gemm transA, A^T[k, i]) packs A into
panels as wide as the register tile's rows, beside B's panels, where the row tile divides A's rows:
each reduce step then reads its few elements of A from one contiguous run instead of a new row.
The results must stay numpy's, packed or not, float32 and bfloat16 pairs, on AVX2 and AVX-512."""
import numpy as np
import pytest

import kiln
from kiln.graph import Builder

from test_awkward_rows import AVX2, TARGETS


def gemm_ta(K, M, N, target, alpha=1.0):
    b = Builder()
    a, w = b.input("a", (K, M)), b.input("b", (K, N))
    return kiln.compile(b.build(b.op("Gemm", a, w, transA=1, alpha=alpha)), target=target)


# B over 1 MB and 64 rows or more: the pack rule packs B, so A too where the row tile divides M.
@pytest.mark.parametrize("target", TARGETS)
# 384 and 126 rows: 64 and 21 row tiles of 6 on AVX2, copied in blocks of 16 and 7 (pack_transposed_a).
@pytest.mark.parametrize("K,M,N", [(256, 96, 1280), (200, 120, 1344), (256, 97, 1280), (256, 384, 1280), (256, 126, 1280)])
def test_transposed_a_gemm_matches_numpy(rng, target, K, M, N):
    exe = gemm_ta(K, M, N, target, alpha=0.5)
    A, B = rng.standard_normal((K, M)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    np.testing.assert_allclose(exe(A, B)[0], 0.5 * (A.T.astype(np.float64) @ B), rtol=1e-4, atol=1e-3)
    detail = exe.groups()[0]["schedule_detail"]
    assert "pack 'b' and transposed 'a'" in detail, detail


def test_plain_a_is_not_taken_for_a_transposed_one(rng):
    """A read by rows (no transA) keeps B's pack alone."""
    b = Builder()
    a, w = b.input("a", (96, 256)), b.input("b", (256, 1280))
    exe = kiln.compile(b.build(b.op("MatMul", a, w)))
    A, B = rng.standard_normal((96, 256)).astype(np.float32), rng.standard_normal((256, 1280)).astype(np.float32)
    np.testing.assert_allclose(exe(A, B)[0], A.astype(np.float64) @ B, rtol=1e-4, atol=1e-3)
    assert "transposed" not in exe.groups()[0]["schedule_detail"]


def test_transposed_a_bf16_pairs_match_the_rounded_product(rng):
    """The weight gradient's Gemm under bfloat16 autocast: MatMulBF16Pairs with transA."""
    K, M, N = 256, 96, 1280
    b = Builder()
    a, w = b.input("a", (K, M)), b.input("b", (K, N))
    g = kiln.graph.autocast(b.build(b.op("Gemm", a, w, transA=1)), "bfloat16")
    exe = kiln.compile(g, bf16_dot=True)  # the pair form on every host (the default keeps FMAs where vdpbf16ps is slow)
    assert "kiln.MatMulBF16Pairs" in " ".join(gr["ops"] for gr in exe.groups())
    A, B = rng.standard_normal((K, M)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)

    def rounded(x):
        return (np.ascontiguousarray(x, np.float32).view(np.uint32) + 0x7FFF + ((np.ascontiguousarray(x, np.float32).view(np.uint32) >> 16) & 1)
                & 0xFFFF0000).view(np.float32)

    want = rounded(A).T.astype(np.float64) @ rounded(B)
    np.testing.assert_allclose(exe(A, B)[0], want, rtol=2 ** -7, atol=0.05)


def decision(detail, name):
    word = next(w for w in detail.split() if w.startswith(name + "="))
    return [int(v) for v in word[len(name) + 1:].split("x")]


@pytest.mark.parametrize("target", TARGETS)
def test_large_transposed_a_runs_in_row_blocks_on_narrow_panels(rng, target):
    """A weight gradient whose transposed A (6 MiB here) is over twice B: on AVX2's 16-wide panels (24 of them)
    the rows go in blocks of A that stay in L2, the panels inside (block_rows_of_large_a); AVX-512's 64-wide
    panels (6) keep the panel loop outermost. Either way, with the SGD momentum epilogue, numpy's result."""
    K, M, N = 1024, 1536, 384
    b = Builder()
    a, w, v = b.input("a", (K, M)), b.input("b", (K, N)), b.input("v", (M, N))
    y = b.op("Add", b.op("Mul", v, b.constant("m", np.array(0.9, np.float32))), b.op("Gemm", a, w, transA=1, alpha=0.5))
    exe = kiln.compile(b.build(y), target=target)
    A, B, V = (rng.standard_normal(s).astype(np.float32) for s in ((K, M), (K, N), (M, N)))
    np.testing.assert_allclose(exe(A, B, V)[0], 0.9 * V + 0.5 * (A.T.astype(np.float64) @ B), rtol=1e-4, atol=2e-3)
    detail = next(g["schedule_detail"] for g in exe.groups() if "Gemm" in g["ops"])
    assert "transposed 'a'" in detail, detail
    rows = next(decision(detail, w.split("=")[0]) for w in detail.split() if w.split("=")[0].endswith(".i"))
    panel_outer = next(decision(detail, w.split("=")[0]) for w in detail.split() if w.split("=")[0].endswith(".panel_outer"))
    if target == AVX2:
        assert rows == [M // 48, 8, 1, 6] and panel_outer == [0], detail
    else:
        assert rows[1] == 1 and panel_outer == [1], detail


def test_small_transposed_a_keeps_the_panel_loop_outermost():
    """A under 6 MiB (or not twice B) keeps the seed's order on AVX2 too."""
    K, M, N = 1024, 768, 1024
    b = Builder()
    a, w = b.input("a", (K, M)), b.input("b", (K, N))
    exe = kiln.compile(b.build(b.op("Gemm", a, w, transA=1)), target=AVX2)
    detail = exe.groups()[0]["schedule_detail"]
    assert "panel_outer=1" in detail and ".i=128x1x1x6" in detail, detail
