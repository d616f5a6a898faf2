"""Tensor-parallel training (Megatron) of an MLP for 20 steps, Adam: each weight split over the ranks
(w1 by columns, w2 by rows); the losses and parameters follow one process, identical on every rank."""
import numpy as np

import kiln
from common import check, mlp, ok

n = kiln.dist.size()
model, rng = mlp(batch=8, d_in=12, hidden=16 * n, d_out=4 * n, seed=3)
xs = [rng.standard_normal((8, 12)).astype("float32") for _ in range(20)]
ys = [rng.integers(0, 4 * n, 8).astype("int64") for _ in range(20)]
opt = lambda: kiln.train.Adam(lr=0.01)
single = kiln.train.compile(model, loss="cross_entropy", optimizer=opt())
tp = kiln.dist.train(model, kiln.dist.Mesh(("model", n)), strategy="tensor", loss="cross_entropy", optimizer=opt())
check(tp.plan.specs.get("w1") == "R S(model)" and tp.plan.specs.get("w2") == "S(model) R", f"Megatron specs: {tp.plan.specs}")
text = str(tp.plan)
check("AllReduce" in text, "the row-split matmul's partial sums are all-reduced")
if kiln.dist.rank() == 0:
    print(text.splitlines()[-1])
for i, (x, y) in enumerate(zip(xs, ys)):
    a, b = single(x, y), tp(x, y)
    check(abs(a - b) <= 1e-5 * max(1.0, abs(a)), f"step {i}: loss {b} vs one process {a}")
for name in single.parameters:
    p, q = single.parameters[name], tp.parameters[name]
    check(np.allclose(p, q, rtol=1e-4, atol=1e-5), f"parameter {name} differs by {np.abs(p - q).max()}")
    everyone = kiln.dist.all_gather(q)
    check(all(np.array_equal(everyone[0], e) for e in everyone), f"parameter {name} differs between ranks")
ok(f"tp train final loss {b:.5f}")
