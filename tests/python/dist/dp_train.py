"""Data-parallel training of an MLP for 20 steps: losses and parameters as one process on the whole batch, identical on every rank."""
import numpy as np

import kiln
from common import check, mlp, ok

n = kiln.dist.size()
batch = 4 * n
model, rng = mlp(batch=batch, d_in=12, hidden=16, d_out=5, seed=2)
xs = [rng.standard_normal((batch, 12)).astype("float32") for _ in range(20)]
ys = [rng.integers(0, 5, batch).astype("int64") for _ in range(20)]
opt = lambda: kiln.train.SGD(lr=0.1, momentum=0.9)
single = kiln.train.compile(model, loss="cross_entropy", optimizer=opt())
dp = kiln.dist.data_parallel(kiln.train.compile(model, loss="cross_entropy", optimizer=opt()), kiln.dist.Mesh(("data", n)))
if kiln.dist.rank() == 0:
    print(dp.plan)
for i, (x, y) in enumerate(zip(xs, ys)):
    a, b = single(x, y), dp(x, y)
    check(abs(a - b) <= 1e-5 * max(1.0, abs(a)), f"step {i}: loss {b} vs one process {a}")
    for name in single.parameters:
        p, q = single.parameters[name], dp.parameters[name]
        check(np.allclose(p, q, rtol=1e-4, atol=1e-5), f"step {i}: parameter {name} differs by {np.abs(p - q).max()}")
        everyone = kiln.dist.all_gather(q)
        check(all(np.array_equal(everyone[0], e) for e in everyone), f"step {i}: parameter {name} differs between ranks")
ok(f"dp train final loss {b:.5f}")
