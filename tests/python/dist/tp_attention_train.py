"""Tensor-parallel training of a transformer block split by heads (Megatron: Q/K/V by columns, the
output projection by rows): 10 Adam steps with an MSE loss follow one process, on every rank."""
import numpy as np

import kiln
from common import check, ok

n = kiln.dist.size()
B, S, E, H = 2, 4, 16, 4
D = E // H
rng = np.random.default_rng(5)
b = kiln.graph.Builder()
x = b.input("x", (B, S, E))


def heads(name, perm):
    p = b.op("MatMul", x, b.constant(name, rng.standard_normal((E, E)).astype("float32") * 0.3))
    return b.op("Transpose", b.op("Reshape", p, b.constant(name + ".shape", np.array([B, S, H, D], "int64"))), perm=perm)


q, k, v = heads("wq", [0, 2, 1, 3]), heads("wk", [0, 2, 3, 1]), heads("wv", [0, 2, 1, 3])
s = b.op("Softmax", b.op("Mul", b.op("MatMul", q, k), b.constant("scale", np.array(D ** -0.5, "float32"))), axis=-1)
o = b.op("Reshape", b.op("Transpose", b.op("MatMul", s, v), perm=[0, 2, 1, 3]), b.constant("merge", np.array([B, S, E], "int64")))
wo = b.constant("wo", rng.standard_normal((E, E)).astype("float32") * 0.3)
model = b.build(b.op("Add", b.op("MatMul", o, wo), x))
opt = lambda: kiln.train.Adam(lr=0.01)
single = kiln.train.compile(model, loss="mse", optimizer=opt())
tp = kiln.dist.train(model, kiln.dist.Mesh(("model", n)), strategy="tensor", loss="mse", optimizer=opt())
check(tp.plan.specs.get("wq") == "R S(model)" and tp.plan.specs.get("wo") == "S(model) R", f"Megatron specs: {tp.plan.specs}")
for i in range(10):
    xv, yv = rng.standard_normal((B, S, E)).astype("float32"), rng.standard_normal((B, S, E)).astype("float32")
    a, c = single(xv, yv), tp(xv, yv)
    check(abs(a - c) <= 1e-4 * max(1.0, abs(a)), f"step {i}: loss {c} vs one process {a}")
for name in single.parameters:
    p, q_ = single.parameters[name], tp.parameters[name]
    check(np.allclose(p, q_, rtol=1e-3, atol=1e-5), f"parameter {name} differs by {np.abs(p - q_).max()}")
ok(f"tp attention train final loss {c:.5f}")
