"""strategy="auto" on a chain of matmuls over a 2 x (n/2) mesh: with a memory limit that
replicated weights exceed, the plan splits weights, and every rank's output equals
numpy's. Prints the plan's report on rank 0, and its estimated and measured time."""
import numpy as np

import kiln
from common import check, ok

n = kiln.dist.size()
width, layers, batch = 256, 4, 32
rng = np.random.default_rng(3)
ws = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype("float32") for _ in range(layers)]
b = kiln.graph.Builder()
h = x = b.input("x", (batch, width))
for i, w in enumerate(ws):
    h = b.op("Relu", b.op("MatMul", h, b.constant(f"w{i}", w)))
model = b.build(h)

mesh = kiln.dist.Mesh(("data", 2), ("model", n // 2)) if n >= 4 else kiln.dist.Mesh(("model", n))
weight_bytes = layers * width * width * 4
limit = int(weight_bytes * 0.75)  # replicated weights do not fit
plan = kiln.dist.shard(model, mesh, strategy="auto", memory_limit=limit)
if kiln.dist.rank() == 0:
    print(plan.report, flush=True)
check(any(plan.specs[f"w{i}"] != "R R" for i in range(layers)), f"weights are split under the limit: {plan.specs}")
est = plan.estimate()
check(est["memory_bytes"] <= limit, f"the plan fits the limit: {est}")
over = [name for name, e in plan.baselines.items() if e["memory_bytes"] > limit]
check("replicated" in over, f"the replicated plan is over the limit: {plan.baselines}")

runner = plan.compile()
xv = rng.standard_normal((batch, width)).astype("float32")
want = xv
for w in ws:
    want = np.maximum(want @ w, 0)
got = runner(xv)[0]
check(np.allclose(got, want, rtol=1e-4, atol=1e-4), f"max error {np.abs(got - want).max()}")
cost = kiln.dist.calibrate(reps=5)
check(all(v > 0 for k, v in cost.items() if k.endswith("per_s")), f"calibrated rates are positive: {cost}")
m = plan.measure(xv, runs=30, runner=runner, **cost)
check(m["best_s"] > 0 and m["median_s"] >= m["best_s"] and m["estimate_s"] > 0, f"measure: {m}")
if kiln.dist.rank() == 0:
    print(f"calibrated cost {cost}", flush=True)
    print(f"estimate {est['total_s'] * 1e3:.3f} ms (default cost), {m['estimate_s'] * 1e3:.3f} ms (calibrated); measured "
          f"{m['best_s'] * 1e3:.3f} ms per run (the slowest rank's best; median {m['median_s'] * 1e3:.3f} ms)", flush=True)
ok("auto plan")
