"""TVM's names: the schedule steps of TVM's "How to optimize GEMM on CPU"
tutorial, written as a TVM user would (``import kiln as tvm``), each
checked against numpy.

The steps, as that tutorial takes them: the default schedule; blocking (a
bn x bn tile of C, the reduction split by kfactor); vectorising the
innermost tile axis; permuting the loops so that the reduction's inner part
sits outside the tile's rows; packing B into (N/bn, K, bn) so the inner loop
reads it contiguously; a write cache for the tile computed at the tile's
column loop; and finally a parallel outer loop. The sizes are smaller than
the tutorial's 1024 to keep the suite fast; the schedules are the same.
"""
import numpy as np
import pytest

import kiln as tvm
from kiln import te

M = N = K = 128
BN = 32       # the tile of C
KFACTOR = 4   # the split of the reduction
DTYPE = "float32"
TARGET = "llvm"


def gemm(packed):
    """A (M, K) x B (K, N) -> C; with `packed`, C reads B through a packed copy."""
    k = te.reduce_axis((0, K), "k")
    A = te.placeholder((M, K), name="A", dtype=DTYPE)
    B = te.placeholder((K, N), name="B", dtype=DTYPE)
    if not packed:
        C = te.compute((M, N), lambda m, n: te.sum(A[m, k] * B[k, n], axis=k), name="C")
        return A, B, C, None
    packedB = te.compute((N // BN, K, BN), lambda bigN, kk, littleN: B[kk, bigN * BN + littleN], name="packedB")
    C = te.compute(
        (M, N),
        lambda m, n: te.sum(A[m, k] * packedB[tvm.tir.indexdiv(n, BN), k, tvm.tir.indexmod(n, BN)], axis=k),
        name="C")
    return A, B, C, packedB


def default():
    A, B, C, _ = gemm(False)
    return te.create_schedule(C.op), (A, B, C)


def blocking(vectorize=False, permute=False):
    A, B, C, _ = gemm(False)
    s = te.create_schedule(C.op)
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], BN, BN)
    (kaxis,) = s[C].op.reduce_axis
    ko, ki = s[C].split(kaxis, factor=KFACTOR)
    if permute:  # the reduction's inner part outside the rows of the tile
        s[C].reorder(mo, no, ko, mi, ki, ni)
    else:
        s[C].reorder(mo, no, ko, ki, mi, ni)
    if vectorize:
        s[C].vectorize(ni)
    return s, (A, B, C)


def packing():
    A, B, C, packedB = gemm(True)
    s = te.create_schedule(C.op)
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], BN, BN)
    (kaxis,) = s[C].op.reduce_axis
    ko, ki = s[C].split(kaxis, factor=KFACTOR)
    s[C].reorder(mo, no, ko, mi, ki, ni)
    s[C].vectorize(ni)
    bigN, _, littleN = s[packedB].op.axis
    s[packedB].vectorize(littleN)
    s[packedB].parallel(bigN)
    return s, (A, B, C)


def write_cache(parallel=False):
    A, B, C, packedB = gemm(True)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")  # the tile accumulates here, then is written to C
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], BN, BN)
    s[CC].compute_at(s[C], no)
    mc, nc = s[CC].op.axis
    (kaxis,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kaxis, factor=KFACTOR)
    s[CC].reorder(ko, mc, ki, nc)
    s[CC].vectorize(nc)
    s[CC].unroll(ki)
    bigN, _, littleN = s[packedB].op.axis
    s[packedB].vectorize(littleN)
    s[packedB].parallel(bigN)
    if parallel:
        s[C].parallel(mo)
    return s, (A, B, C)


STEPS = {
    "default": default,
    "blocking": blocking,
    "vectorize": lambda: blocking(vectorize=True),
    "loop_permutation": lambda: blocking(vectorize=True, permute=True),
    "array_packing": packing,
    "write_cache": write_cache,
    "parallel": lambda: write_cache(parallel=True),
}


@pytest.fixture(scope="module")
def data():
    dev = tvm.device(TARGET, 0)
    rng = np.random.default_rng(0)
    a = tvm.nd.array(rng.random((M, K)).astype(DTYPE), dev)
    b = tvm.nd.array(rng.random((K, N)).astype(DTYPE), dev)
    # The reference in float64, independent of any float32 summation order.
    answer = (a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)).astype(DTYPE)
    return dev, a, b, answer


@pytest.mark.parametrize("step", list(STEPS))
def test_tutorial_step_matches_numpy(step, data):
    dev, a, b, answer = data
    s, args = STEPS[step]()
    text = str(tvm.lower(s, list(args), simple_mode=True))
    assert "for" in text and "C" in text, text
    func = tvm.build(s, list(args), target=TARGET, name="mmult")
    assert func.entry_name == "mmult"
    c = tvm.nd.array(np.zeros((M, N), dtype=DTYPE), dev)
    func(a, b, c)
    tvm.testing.assert_allclose(c.numpy(), answer, rtol=1e-5)
    evaluator = func.time_evaluator(func.entry_name, dev, number=1)
    assert evaluator(a, b, c).mean > 0
    tvm.testing.assert_allclose(c.numpy(), answer, rtol=1e-5)  # timing reruns it in place


def test_the_steps_print_what_they_did():
    s, args = write_cache(parallel=True)
    text = str(tvm.lower(s, list(args), simple_mode=True))
    assert "parallel" in text and "packedB" in text, text


def test_aliases():
    assert tvm.device("llvm", 0).device_type == "cpu"
    assert tvm.device(tvm.Target("llvm")).device_type == "cpu"
    with pytest.raises(tvm.KilnError, match="CPU"):
        tvm.device("cuda", 0)
    n = te.var("n")
    assert str(tvm.tir.indexmod(n, 4)) == str(n % 4)
    assert str(tvm.tir.indexdiv(n, 4)) == str(n // 4)
    # assert_allclose takes kiln arrays and fails on a difference or a shape mismatch.
    x = tvm.nd.array(np.array([1.0, 2.0], dtype=DTYPE))
    tvm.testing.assert_allclose(x, [1.0, 2.0])
    with pytest.raises(AssertionError):
        tvm.testing.assert_allclose(x, [1.0, 2.1], rtol=1e-5)
    with pytest.raises(AssertionError):
        tvm.testing.assert_allclose(x, [1.0, 2.0, 3.0])
