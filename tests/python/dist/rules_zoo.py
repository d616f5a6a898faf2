"""Operators of every rule family on split inputs (embedding, reductions, softmax on a split and a
whole axis, layer norm, transpose, reshapes, expand, concat by the replicated fallback), each rank's
output against the one-process run and numpy."""
import numpy as np

import kiln
from common import check, ok, reference

n = kiln.dist.size()
rng = np.random.default_rng(11)
B, T, V, E = 2 * n, 3, 10, 4 * n
table = rng.standard_normal((V, E)).astype("float32")
scale, bias = rng.standard_normal(E).astype("float32"), rng.standard_normal(E).astype("float32")
b = kiln.graph.Builder()
ids = b.input("ids", (B, T), "int64")
x = b.input("x", (B, T, E))
emb = b.op("Gather", b.constant("table", table), ids, axis=0)                      # [B, T, E]
h = b.op("Add", emb, x)
ln = b.op("LayerNormalization", h, b.constant("ln.s", scale), b.constant("ln.b", bias), axis=-1)
s0 = b.op("Softmax", ln, axis=0)                                                  # over the split batch: gathered
s2 = b.op("Softmax", ln, axis=-1)
tot = b.op("ReduceSum", s2, b.constant("axes", np.array([0], "int64")), keepdims=0)  # partial over the batch
mean = b.op("ReduceMean", ln, axes=[2], keepdims=1)                               # [B, T, 1]
ex = b.op("Expand", mean, b.constant("shape", np.array([B, T, E], "int64")))
tr = b.op("Transpose", b.op("Mul", ex, s0), perm=[2, 0, 1])                       # [E, B, T]
flat = b.op("Reshape", tr, b.constant("flat", np.array([E, B * T], "int64")))
cat = b.op("Concat", flat, flat, axis=1)
model = b.build([tot, cat])
plan = kiln.dist.shard(model, kiln.dist.Mesh(("data", n)), specs={"ids": "S(data) R", "x": "S(data) R R"})
if kiln.dist.rank() == 0:
    print(plan)
iv = rng.integers(0, V, (B, T)).astype("int64")
xv = rng.standard_normal((B, T, E)).astype("float32")
outs = plan.compile()(iv, xv)
refs = [reference(model, iv, xv)]
# reference() returns the first output; the second by numpy below.
hh = table[iv] + xv
lnv = (hh - hh.mean(-1, keepdims=True)) / np.sqrt(hh.var(-1, keepdims=True) + 1e-5) * scale + bias
sm = lambda a, ax: np.exp(a - a.max(ax, keepdims=True)) / np.exp(a - a.max(ax, keepdims=True)).sum(ax, keepdims=True)
want_tot = sm(lnv, -1).sum(0)
want_flat = (np.broadcast_to(lnv.mean(2, keepdims=True), (B, T, E)) * sm(lnv, 0)).transpose(2, 0, 1).reshape(E, B * T)
np.testing.assert_allclose(outs[0], refs[0], rtol=1e-4, atol=1e-5)
np.testing.assert_allclose(outs[0], want_tot, rtol=1e-4, atol=1e-5)
np.testing.assert_allclose(outs[1], np.concatenate([want_flat, want_flat], 1), rtol=1e-4, atol=1e-5)
ok(f"rules zoo max err {np.abs(outs[0] - want_tot).max():.2e}")
