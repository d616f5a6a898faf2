"""The communicator's calls from Python: send/recv around a ring, broadcast, all-reduce, all-gather, barrier."""
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
check(kiln.dist.all_gather(np.array([r], "float64"))[:, 0].tolist() == list(range(n)), "all_gather in rank order")
kiln.dist.barrier()
ok("communicator calls")
