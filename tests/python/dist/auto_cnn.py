"""strategy="auto" on a CNN over a mesh of the ranks: with a memory limit that
replicated convolution weights exceed, the plan splits conv weights (by output
or input channels), and every rank's output equals the one-process result."""
import numpy as np

import kiln
from common import check, ok, reference

n = kiln.dist.size()
channels, layers, batch, size = 64, 3, 2, 8
rng = np.random.default_rng(5)
ws = [(rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(9 * channels)).astype("float32") for _ in range(layers)]
b = kiln.graph.Builder()
h = b.input("x", (batch, channels, size, size))
for i, w in enumerate(ws):
    h = b.op("Relu", b.op("Conv", h, b.constant(f"w{i}", w), pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
model = b.build(h)

mesh = kiln.dist.Mesh(("model", n))
limit = int(layers * ws[0].nbytes * 0.75)  # replicated weights do not fit
plan = kiln.dist.shard(model, mesh, strategy="auto", memory_limit=limit)
if kiln.dist.rank() == 0:
    print(plan.report, flush=True)
split = [plan.specs[f"w{i}"] for i in range(layers) if plan.specs[f"w{i}"] != "R R R R"]
check(split, f"conv weights are split under the limit: {plan.specs}")
check(plan.estimate()["memory_bytes"] <= limit, f"the plan fits the limit: {plan.estimate()}")
xv = rng.standard_normal((batch, channels, size, size)).astype("float32")
want = reference(model, xv)
got = plan.compile()(xv)[0]
check(np.allclose(got, want, rtol=1e-4, atol=1e-4), f"max error {np.abs(got - want).max()}")
ok(f"auto cnn: {split}")
