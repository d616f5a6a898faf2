"""The communicator's calls from Python: send/recv around a ring, broadcast, all-reduce (and in place), all-gather, barrier."""
import numpy as np

import kiln
from common import check, ok

r, n = kiln.dist.rank(), kiln.dist.size()
mine = np.arange(6, dtype="float32").reshape(2, 3) + 10 * r
if r % 2 == 0:  # even ranks send first, so the ring cannot deadlock on blocking sends
    kiln.dist.send(mine, (r + 1) % n, tag=5)
    got = kiln.dist.recv((2, 3), "float32", (r - 1) % n, tag=5)
else:
    got = kiln.dist.recv((2, 3), "float32", (r - 1) % n, tag=5)
    kiln.dist.send(mine, (r + 1) % n, tag=5)
check(np.array_equal(got, np.arange(6, dtype="float32").reshape(2, 3) + 10 * ((r - 1) % n)), f"recv got {got}")
check(np.array_equal(kiln.dist.broadcast(mine, 1), np.arange(6, dtype="float32").reshape(2, 3) + 10), "broadcast from rank 1")
check(np.array_equal(kiln.dist.all_reduce(np.full(3, r, "int64")), np.full(3, n * (n - 1) // 2)), "all_reduce of int64")
buf = np.full(5, r + 0.5, "float64")
back = kiln._ffi._kiln.dist.all_reduce_in_place(buf)
check(np.array_equal(buf, np.full(5, n * (n - 1) / 2 + 0.5 * n)) and back is buf, "all_reduce_in_place sums into the array itself")
try:
    kiln._ffi._kiln.dist.all_reduce_in_place(np.zeros((4, 4), "float32")[:, 1])  # a strided view
    check(False, "all_reduce_in_place took a strided view")
except kiln.KilnError as e:
    check("C-contiguous" in str(e), f"all_reduce_in_place's error names the layout: {e}")
check(kiln.dist.all_gather(np.array([r], "float64"))[:, 0].tolist() == list(range(n)), "all_gather in rank order")
kiln.dist.barrier()
ok("communicator calls")
