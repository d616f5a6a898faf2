"""Pipeline-parallel training with a weight shared by the first stage and a later one (tied, as an
embedding and its output projection are): each of their ranks keeps a copy, the step sums the
copy's gradients over them, and the copies stay bitwise equal. Losses and parameters follow
kiln.train's one-process run for 5 steps of Adam, under 1F1B."""
import numpy as np

import kiln
from common import check, follow_one_process, ok

micro, m_count, width, classes = 4, 4, 16, 5


def tied_mlp(batch):
    rng = np.random.default_rng(5)
    b = kiln.graph.Builder()
    tied = b.constant("tied", (rng.standard_normal((width, width)) / np.sqrt(width)).astype("float32"))
    h = b.op("Tanh", b.op("MatMul", b.input("x", (batch, width)), tied))
    for i, (a, c) in enumerate([(width, 32), (32, 32), (32, width)]):
        h = b.op("Tanh", b.op("MatMul", h, b.constant(f"w{i}", (rng.standard_normal((a, c)) / np.sqrt(a)).astype("float32"))))
    h = b.op("Tanh", b.op("MatMul", h, tied))  # the same weight again, at the far end
    return b.build(b.op("MatMul", h, b.constant("out", (rng.standard_normal((width, classes)) / 4).astype("float32"))))


opt = lambda: kiln.train.Adam(lr=0.01)
n, r = kiln.dist.size(), kiln.dist.rank()
plan = kiln.dist.pipeline_train(tied_mlp(micro), loss="cross_entropy", optimizer=opt(), micro_batches=m_count)
check(plan.shared == ["tied"], f"shared parameters {plan.shared}, expected ['tied'] (read by stages {plan.holders.get('tied')})")
holders = plan.holders["tied"]
check(len(holders) == 2 and holders[0] == 0 and holders[1] > 0, f"'tied' is held by stages {holders}, expected the first and a later one")
step = plan.compile()
ref = kiln.train.compile(tied_mlp(micro * m_count), loss="cross_entropy", optimizer=opt())
follow_one_process(step, ref, micro * m_count, width, classes)
# The copies on the first and the later rank are bitwise equal.
copy = kiln._ffi._kiln.dist.broadcast(np.ascontiguousarray(step.parameters["tied"] if r == holders[1] else np.empty((width, width), "float32")), holders[1])
if r == 0:
    check(np.array_equal(copy, step.parameters["tied"]), "the copies of 'tied' differ between the first and the later rank")
if r == 0:
    print("shared weight: losses match", flush=True)
ok("pipeline training with a shared weight")
