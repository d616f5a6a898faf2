"""Data-parallel steps until the test takes a host down (tests/python/test_dist_hosts.py): each rank
prints "step i rank r" after each step (its stdout: a file of its own); the survivors must then stop with kiln's timeout error."""
import time

import kiln
from common import mlp

n = kiln.dist.size()
model, rng = mlp(batch=4 * n, d_in=12, hidden=16, d_out=5, seed=2)
step = kiln.dist.train(model, kiln.dist.Mesh(("data", n)), loss="cross_entropy", optimizer=kiln.train.SGD(lr=0.1))
x, y = rng.standard_normal((4 * n, 12)).astype("float32"), rng.integers(0, 5, 4 * n)
for i in range(100000):
    step(x, y)
    print(f"step {i} rank {kiln.dist.rank()}", flush=True)
    time.sleep(0.02)  # a few steps a second: the host goes down mid-run, not after a flood of output
