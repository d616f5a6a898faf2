"""A transformer block split by heads (Megatron: Q/K/V column split, output projection row split, one all-reduce),
against the one-process run and PyTorch's multi-head attention arithmetic."""
import numpy as np
import torch

import kiln
from common import check, ok, reference

n = kiln.dist.size()
B, S, E, H = 2, 4, 16, 4
D = E // H
rng = np.random.default_rng(3)
w = {k: rng.standard_normal((E, E)).astype("float32") * 0.3 for k in ("wq", "wk", "wv", "wo")}
scale, bias = rng.standard_normal(E).astype("float32"), rng.standard_normal(E).astype("float32")
b = kiln.graph.Builder()
x = b.input("x", (B, S, E))


def heads(name, perm):
    p = b.op("MatMul", x, b.constant(name, w[name]))
    return b.op("Transpose", b.op("Reshape", p, b.constant(name + ".shape", np.array([B, S, H, D], "int64"))), perm=perm)


q, k, v = heads("wq", [0, 2, 1, 3]), heads("wk", [0, 2, 3, 1]), heads("wv", [0, 2, 1, 3])
s = b.op("Softmax", b.op("Mul", b.op("MatMul", q, k), b.constant("scale", np.array(D ** -0.5, "float32"))), axis=-1)
o = b.op("Reshape", b.op("Transpose", b.op("MatMul", s, v), perm=[0, 2, 1, 3]), b.constant("merge", np.array([B, S, E], "int64")))
y = b.op("LayerNormalization", b.op("Add", b.op("MatMul", o, b.constant("wo", w["wo"])), x), b.constant("ln.scale", scale),
         b.constant("ln.bias", bias), axis=-1)
model = b.build(y)
plan = kiln.dist.shard(model, kiln.dist.Mesh(("model", n)), strategy="tensor")
if kiln.dist.rank() == 0:
    print(plan)
check([c[0] for c in plan.collectives()] == ["kiln.AllReduce"], f"collectives {plan.collectives()}")
xv = rng.standard_normal((B, S, E)).astype("float32")
(out,) = plan.compile()(xv)
ref = reference(model, xv)
t = torch.from_numpy(xv)
T = {k: torch.from_numpy(a) for k, a in w.items()}
split = lambda m: (t @ m).reshape(B, S, H, D).transpose(1, 2)
att = torch.softmax(split(T["wq"]) @ split(T["wk"]).transpose(-1, -2) * D ** -0.5, dim=-1) @ split(T["wv"])
z = att.transpose(1, 2).reshape(B, S, E) @ T["wo"] + t
z = torch.nn.functional.layer_norm(z, (E,), torch.from_numpy(scale), torch.from_numpy(bias))
np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
np.testing.assert_allclose(out, z.numpy(), rtol=1e-4, atol=1e-4)
ok(f"tp attention max err {np.abs(out - z.numpy()).max():.2e}")
