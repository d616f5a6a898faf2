"""Pipeline parallel: an 8-layer MLP with a residual connection across the cut, cut into one
stage per rank, 4 micro-batches; every rank's output equals numpy's. Rank 0 prints the cut
and the measured bubble."""
import numpy as np

import kiln
from common import check, ok

n = kiln.dist.size()
width, layers, micro, m_count = 64, 8, 4, 4
rng = np.random.default_rng(5)
ws = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype("float32") for _ in range(layers)]
b = kiln.graph.Builder()
x = b.input("x", (micro, width))
scale = b.input("scale", (1, width))  # a model input read only at the end
h = x
for i, w in enumerate(ws):
    h = b.op("Relu", b.op("MatMul", h, b.constant(f"w{i}", w)))
model = b.build(b.op("Mul", b.op("Add", h, x), scale))  # x crosses every cut

plan = kiln.dist.pipeline(model, micro_batches=m_count)
if kiln.dist.rank() == 0:
    print(plan, flush=True)
runner = plan.compile()
xv = rng.standard_normal((micro * m_count, width)).astype("float32")
sv = rng.standard_normal((m_count, width)).astype("float32")
runner(xv, sv)  # the first run warms up
got = runner(xv, sv)[0]
want = []
for m in range(m_count):
    hm = xv[m * micro:(m + 1) * micro]
    for w in ws:
        hm = np.maximum(hm @ w, 0)
    want.append((hm + xv[m * micro:(m + 1) * micro]) * sv[m:m + 1])
want = np.concatenate(want)
check(got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-4), f"max error {np.abs(got - want).max()}")
check(0.0 <= runner.stats["bubble"] <= 1.0 and 0.0 <= runner.stats["bubble_mean"] <= 1.0, f"bubble share {runner.stats}")
try:
    runner(xv[:5], sv)
    check(False, "a batch that is not micro_batches x the model's must fail")
except kiln.KilnError as e:
    check("4 micro-batches" in str(e), str(e))
if kiln.dist.rank() == 0:
    print(f"measured: {runner.stats}", flush=True)
ok("pipeline")
