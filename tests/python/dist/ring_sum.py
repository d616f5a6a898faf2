"""kiln's segmented ring all-reduce (dist/src/ring_all_reduce.cpp) against MPI's own sum: the same
buffers all-reduced by MPI_Iallreduce (the ring off) and by the ring with small segments, counts that
do not divide into ranks x segments (some blocks and segments empty), float32 and bfloat16, one at a
time and several in flight at once. Integer values make every order of summation exact, so the two
must agree bit for bit; random ones are checked against numpy's float64 sum."""
import numpy as np

import kiln
from common import check, ok

d = kiln._ffi._kiln.dist
r, n = kiln.dist.rank(), kiln.dist.size()
MPI_ONLY = (0, 1 << 20, 4)  # min_bytes 0: MPI_Iallreduce for every size


def inputs(count, seed, integers):
    """Every rank's buffer, the same on every rank (each rank takes its own)."""
    rng = np.random.default_rng(seed)
    if integers:  # |v| <= 64: sums of 3 exact in float32 and in bfloat16's 8 bits
        return [rng.integers(-64, 65, count).astype("float32") for _ in range(n)]
    return [rng.standard_normal(count).astype("float32") for _ in range(n)]


def reduce_with(options, bufs, bf16):
    d.set_ring(*options)
    a = bufs[r].copy()
    (d.all_reduce_bf16_in_place if bf16 else d.all_reduce_in_place)(a)
    return a


for count in (2, 1000, 100003, 262147):  # fewer elements than ranks x segments, and odd ones
    for segment_bytes, window, pairs in ((4096, 3, True), (20000, 1, False)):  # on 2 ranks: one exchange, and the ring
        ring = (1, segment_bytes, window, pairs)
        for bf16 in (False, True):
            bufs = inputs(count, count + segment_bytes, integers=True)
            mpi, got = reduce_with(MPI_ONLY, bufs, bf16), reduce_with(ring, bufs, bf16)
            what = (f"count {count}, segments of {segment_bytes} B, window {window}, pair exchange {pairs}, "
                    f"{'bfloat16' if bf16 else 'float32'}")
            check(np.array_equal(got, mpi), f"{what}: the ring's sum differs from MPI's at {np.flatnonzero(got != mpi)[:5]}")
            check(np.array_equal(got, np.sum(bufs, axis=0)), f"{what}: the sum is not numpy's")
            # The same result on every rank, bit for bit.
            check(all(np.array_equal(g, got) for g in kiln.dist.all_gather(got)), f"{what}: ranks disagree")
        bufs = inputs(count, 7, integers=False)
        got = reduce_with(ring, bufs, False)
        want = np.sum(np.array(bufs, "float64"), axis=0)
        check(np.allclose(got, want, rtol=1e-5, atol=1e-5), f"count {count}: max error {np.abs(got - want).max()}")

# The runner's buckets: several all-reduces in flight at once, each its own tags.
d.set_ring(1, 8192, 2, n == 2)
bufs = [inputs(50000 + i, 100 + i, integers=True) for i in range(5)]
arrays = [b[r].copy() for b in bufs]
d.all_reduce_many_in_place(arrays)
for a, b in zip(arrays, bufs):
    check(np.array_equal(a, np.sum(b, axis=0)), "overlapped all-reduces: a sum is wrong")
ok(f"of {n}")
