"""Tutorial 1: from a naive matrix multiplication to a fast one.

We declare C = A @ B once, then change only its *schedule*, step by step,
the way TVM's and Halide's GEMM tutorials do:

  1. the default schedule (three nested loops)
  2. tiling: split and reorder the loops so blocks of A, B and C stay in cache
  3. vectorization of the innermost loop
  4. a register accumulator: cache_write + compute_at, with unrolling
  5. parallel outer loops
  6. packing B into a vector-friendly layout

At each step we print the loop nest, check the result against numpy and time
it next to numpy (OpenBLAS). Run it with

  PYTHONPATH=python:build/python /usr/bin/python3 tutorials/01_schedule_matmul.py [--small]

--small (or KILN_TUTORIAL_SMALL=1) uses 128 x 128 matrices: the test suite
runs every tutorial that way.
"""
import os
import sys
import time

import numpy as np

import kiln
from kiln import te

SMALL = "--small" in sys.argv or os.environ.get("KILN_TUTORIAL_SMALL", "0") not in ("", "0")
N = 128 if SMALL else 512
M = K = N
# Register blocking: each task computes an MR x NR block of C in registers.
# NR = 32 floats is four AVX2 vectors per row; MR = 4 rows makes 16 vector
# accumulators, which fit in the 16 ymm registers with room for A and B.
MR, NR, KU = 4, 32, 4

######################################################################
# The computation, declared once. The lambda's parameter names (i, j)
# become the names of C's axes, and so of its loops.
A = te.placeholder((M, K), "float32", name="A")
B = te.placeholder((K, N), "float32", name="B")
k = te.reduce_axis((0, K), name="k")
C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (M, K)).astype("float32")
b = rng.uniform(-1, 1, (K, N)).astype("float32")
expected = a @ b


def time_numpy(repeat=5):
    """numpy's (OpenBLAS's) time for the same product: the median of a few runs."""
    out = np.empty((M, N), "float32")
    np.matmul(a, b, out=out)  # warm up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.matmul(a, b, out=out)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


NUMPY_SECONDS = time_numpy()
print(f"C = A @ B with {M}x{K} and {K}x{N} float32 matrices; numpy takes {NUMPY_SECONDS * 1e3:.2f} ms\n")
results = []


def evaluate(title, s, args=(A, B, C), show=True):
    """Prints the loop nest of `s`, builds it, checks it against numpy and times it."""
    print("=" * 72)
    print(title)
    print("=" * 72)
    if show:
        print(kiln.lower(s, list(args)))
    mod = kiln.build(s, list(args), target="llvm")
    c = np.zeros((M, N), "float32")
    mod(a, b, c)  # the kernel writes into c itself: no copy in or out
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * K)
    # The slow first steps get one call per measurement; fast ones are
    # repeated until a measurement lasts 20 ms.
    timer = mod.time_evaluator("main", number=1, repeat=3, min_repeat_ms=20)
    seconds = timer(a, b, c).median
    results.append((title, seconds))
    gflops = 2.0 * M * N * K / seconds * 1e-9
    print(f"-> {seconds * 1e3:8.2f} ms  ({gflops:6.1f} GFLOP/s), numpy {NUMPY_SECONDS * 1e3:.2f} ms, "
          f"ratio kiln/numpy {seconds / NUMPY_SECONDS:.2f}\n")


######################################################################
# Step 1: the default schedule. One loop per axis, i, j, then k: for every
# element of C the k loop walks a column of B, a stride of N floats, so
# nearly every load of B misses the cache.
s = te.create_schedule(C)
evaluate("1. naive: for i, for j, for k", s)

######################################################################
# Step 2: tiling. tile() splits i and j by the block sizes and orders the
# loops i.outer, j.outer, i.inner, j.inner. We split k too and put the k
# loops outside the block loops: a block of C is updated with one row of B
# at a time, read contiguously.
s = te.create_schedule(C)
i, j = C.op.axis
io, jo, ii, ji = s[C].tile(i, j, MR, NR)
ko, ki = s[C].split(k, factor=KU)
s[C].reorder(io, jo, ko, ki, ii, ji)
evaluate("2. tiling: blocks of C, k outside the block loops", s)

######################################################################
# Step 3: vectorization. The innermost loop (j.inner, NR iterations) reads B
# and writes C contiguously: vectorize it into SIMD instructions.
s[C].vectorize(ji)
evaluate("3. + vectorize j.inner", s)

######################################################################
# Step 4: an accumulator in registers. cache_write makes a stage C.local that
# computes the sums into a small local buffer; C becomes a copy out of it.
# compute_at places C.local inside C's block loop, so the buffer is one
# MR x NR block: with k outermost in C.local and the block loops unrolled and
# vectorized, LLVM keeps the whole block in vector registers.
# C.op.axis still names C's loops after cache_write; s[CL].op.axis are the
# axes of the new stage.
s = te.create_schedule(C)
CL = s.cache_write(C, "local")
io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], MR, NR)
s[C].vectorize(ji)
s[CL].compute_at(s[C], jo)
ci, cj = s[CL].op.axis
(ck,) = s[CL].op.reduce_axis
cko, cki = s[CL].split(ck, factor=KU)
s[CL].reorder(cko, cki, ci, cj)
s[CL].unroll(cki)
s[CL].unroll(ci)
s[CL].vectorize(cj)
evaluate("4. cache_write: the MR x NR block accumulates in registers", s)

######################################################################
# Step 5: parallelism. Fuse the two block loops into one loop of
# (M/MR)*(N/NR) independent blocks and run it on all cores. compute_at now
# attaches the accumulator to the fused loop (fuse first: an axis that was
# fused is no longer a loop). The gain depends on free cores: with other
# work running, the measured time is what this machine gives right now.
def register_blocked(s, C, CL, parallel=True):
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], MR, NR)
    block = s[C].fuse(io, jo)
    if parallel:
        s[C].parallel(block)
    s[C].vectorize(ji)
    s[CL].compute_at(s[C], block)
    ci, cj = s[CL].op.axis
    cko, cki = s[CL].split(s[CL].op.reduce_axis[0], factor=KU)
    s[CL].reorder(cko, cki, ci, cj)
    s[CL].unroll(cki)
    s[CL].unroll(ci)
    s[CL].vectorize(cj)


s = te.create_schedule(C)
CL = s.cache_write(C, "local")
register_blocked(s, C, CL)
evaluate("5. + parallel over the blocks of C", s)

######################################################################
# Step 6: packing B. In step 5 each block reads an NR-wide column panel of
# B: NR floats from each of K rows that lie N floats apart. A packing stage
# copies B once into panels, packedB[j // NR, k, j % NR], so a block reads
# its panel as one contiguous stream. cache_read could copy B, but only in
# B's own layout; a new layout is a new compute stage, read through the new
# indices. The packing stage is cheap (N*K copies, itself parallel and
# vectorized) next to the M*N*K multiply-adds.
packedB = te.compute((N // NR, K, NR), lambda jo, kk, ji: B[kk, jo * NR + ji], name="packedB")
k2 = te.reduce_axis((0, K), name="k")
C2 = te.compute((M, N), lambda i, j: te.sum(A[i, k2] * packedB[j // NR, k2, j % NR], axis=k2), name="C")
s = te.create_schedule(C2)
CL = s.cache_write(C2, "local")
register_blocked(s, C2, CL)
pjo, pk, pji = packedB.op.axis
s[packedB].parallel(pjo)
s[packedB].vectorize(pji)
evaluate("6. + B packed into NR-wide panels", s, args=(A, B, C2), show=not SMALL)

######################################################################
# The whole story, and the schedule of the last step as a trace: the JSON
# that the tuner and the tuning database store, replayable with
# te.Schedule.from_trace([C2], trace).
print("=" * 72)
print(f"{'step':60s} {'ms':>9s}")
for title, seconds in results:
    print(f"{title[:60]:60s} {seconds * 1e3:9.2f}")
print(f"{'numpy (OpenBLAS)':60s} {NUMPY_SECONDS * 1e3:9.2f}")
print("\ntrace of step 6:", s.trace())
replayed = te.Schedule.from_trace([C2], s.trace())
assert str(kiln.lower(replayed, [A, B, C2])) == str(kiln.lower(s, [A, B, C2]))
