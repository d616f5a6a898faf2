"""Pipeline-parallel training: a 4-layer MLP cut into one stage per rank, 4 micro-batches, SGD with
momentum, 5 steps, under the 1F1B and the GPipe schedules; the losses and every parameter follow
kiln.train's one-process run on the whole batch, and 1F1B keeps fewer micro-batches stashed."""
import numpy as np

import kiln
from common import check, ok

micro, m_count, width, classes = 4, 4, 16, 5


def mlp(batch):
    rng = np.random.default_rng(11)
    b = kiln.graph.Builder()
    h = b.input("x", (batch, width))
    dims = [width, 32, 32, 24, classes]
    for i, (a, c) in enumerate(zip(dims, dims[1:])):
        h = b.op("Add", b.op("MatMul", h, b.constant(f"w{i}", (rng.standard_normal((a, c)) / np.sqrt(a)).astype("float32"))),
                 b.constant(f"b{i}", np.full(c, 0.01 * i, "float32")))
        if i < 3:
            h = b.op("Tanh", h)
    return b.build(h)


opt = lambda: kiln.train.SGD(lr=0.1, momentum=0.9)
n, r = kiln.dist.size(), kiln.dist.rank()
for schedule in ("1f1b", "gpipe"):
    plan = kiln.dist.pipeline_train(mlp(micro), loss="cross_entropy", optimizer=opt(), micro_batches=m_count, schedule=schedule)
    if r == 0:
        print(plan, flush=True)
    step = plan.compile()
    ref = kiln.train.compile(mlp(micro * m_count), loss="cross_entropy", optimizer=opt())
    rng = np.random.default_rng(4)
    for i in range(5):
        x = rng.standard_normal((micro * m_count, width)).astype("float32")
        y = rng.integers(0, classes, micro * m_count)
        got, want = step(x, y), ref(x, y)
        check(abs(got - want) <= 1e-5 * max(1.0, abs(want)), f"{schedule} step {i}: loss {got} against {want}")
    params = step.all_parameters()
    check(sorted(params) == sorted(ref.parameters), f"parameters {sorted(params)} against {sorted(ref.parameters)}")
    for name, v in params.items():
        check(np.allclose(v, ref.parameters[name], rtol=1e-4, atol=1e-5), f"{schedule} {name}: max difference {np.abs(v - ref.parameters[name]).max()}")
    # GPipe keeps every micro-batch's stage inputs; 1F1B at most one per stage from here to the last.
    want_stash = m_count if schedule == "gpipe" else min(n - r, m_count)
    check(step.stats["max_stashed"] == want_stash, f"{schedule}: stashed {step.stats['max_stashed']}, expected {want_stash}")
    if r == 0:
        print(f"{schedule}: losses match; stats {step.stats}", flush=True)
ok("pipeline training")
