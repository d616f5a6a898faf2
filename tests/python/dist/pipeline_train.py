"""Pipeline-parallel training: a 4-layer MLP cut into one stage per rank, 4 micro-batches, SGD with
momentum, 5 steps, under the 1F1B and the GPipe schedules; the losses and every parameter follow
kiln.train's one-process run on the whole batch, and 1F1B keeps fewer micro-batches stashed."""
import numpy as np

import kiln
from common import check, follow_one_process, ok

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
    follow_one_process(step, ref, micro * m_count, width, classes, label=f"{schedule} ")
    # GPipe keeps every micro-batch's stage inputs; 1F1B at most one per stage from here to the last.
    want_stash = m_count if schedule == "gpipe" else min(n - r, m_count)
    check(step.stats["max_stashed"] == want_stash, f"{schedule}: stashed {step.stats['max_stashed']}, expected {want_stash}")
    if r == 0:
        print(f"{schedule}: losses match; stats {step.stats}", flush=True)
ok("pipeline training")
