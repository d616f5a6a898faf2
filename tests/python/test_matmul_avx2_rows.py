"""On 16 vector registers (AVX2) a matmul whose rows have no divisor of 6 pads them to whole 6-row tiles (6 x 2
vectors, 12 accumulators) rather than taking 4 rows (8); 32 registers (AVX-512) keep their divisor."""
import numpy as np
import pytest

import kiln
from kiln import te


def rows_tile(M, target):
    A, B = te.placeholder((M, 64), name="A"), te.placeholder((64, 48), name="B")
    C = kiln.ops.matmul(A, B)
    text = kiln.tuner.default_decisions([A, B, C], target=target)
    word = next(w for w in text.split() if w.startswith("C.i="))
    return [int(v) for v in word[4:].split("x")], (A, B, C), text


def test_avx2_pads_rows_to_six():
    tiles, _, text = rows_tile(1024, "llvm -mcpu=znver3")
    assert tiles[-1] == 6 and np.prod(tiles) == 1026, text


def test_avx512_and_divisible_rows_keep_their_tiles():
    tiles, _, text = rows_tile(1024, "llvm -mcpu=skylake-avx512")
    assert np.prod(tiles) == 1024, text
    tiles, _, text = rows_tile(768, "llvm -mcpu=znver3")
    assert tiles[-1] == 6 and np.prod(tiles) == 768, text


def host_has_avx2():
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return " avx2" in flags and " fma" in flags


@pytest.mark.skipif(not host_has_avx2(), reason="the host runs no AVX2 code")
def test_padded_rows_compute_the_product():
    avx2 = "llvm -mcpu=znver3"
    _, (A, B, C), text = rows_tile(1024, avx2)
    sch = te.Schedule.from_trace(C, kiln.tuner.candidate_trace([A, B, C], text, target=avx2))
    mod = kiln.build(sch, [A, B, C], target=avx2)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1024, 64)).astype("float32"), rng.standard_normal((64, 48)).astype("float32")
    c = kiln.nd.array(np.zeros((1024, 48), "float32"))
    mod(kiln.nd.array(a), kiln.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def batched_rows_tile(batch, M, target):
    A, B = te.placeholder((batch, M, 64), name="A"), te.placeholder((64, 48), name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((batch, M, 48), lambda b, i, j: te.sum(A[b, i, k] * B[k, j], axis=k), name="C")
    text = kiln.tuner.default_decisions([A, B, C], target=target)
    word = next(w for w in text.split() if w.startswith("C.i="))
    return [int(v) for v in word[4:].split("x")], (A, B, C), text


def test_avx2_pads_a_batch_of_rows_only_by_a_small_share():
    """[8, 128, K] x W pads each batch's 128 rows to 132 (3%); torch's sequence-first attention input
    [128, 8, K] keeps its 8 rows (padded to 12 they computed half as many rows again)."""
    tiles, _, text = batched_rows_tile(8, 128, "llvm -mcpu=znver3")
    assert np.prod(tiles) == 132 and tiles[-1] == 6, text
    tiles, _, text = batched_rows_tile(128, 8, "llvm -mcpu=znver3")
    assert np.prod(tiles) == 8, text


@pytest.mark.skipif(not host_has_avx2(), reason="the host runs no AVX2 code")
def test_unpadded_batch_rows_compute_the_product():
    avx2 = "llvm -mcpu=znver3"
    _, (A, B, C), text = batched_rows_tile(128, 8, avx2)
    sch = te.Schedule.from_trace(C, kiln.tuner.candidate_trace([A, B, C], text, target=avx2))
    mod = kiln.build(sch, [A, B, C], target=avx2)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((128, 8, 64)).astype("float32"), rng.standard_normal((64, 48)).astype("float32")
    c = kiln.nd.array(np.zeros((128, 8, 48), "float32"))
    mod(kiln.nd.array(a), kiln.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)
