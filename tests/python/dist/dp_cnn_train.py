"""Data-parallel training of a small CNN with Adam: the backward pass stays batch-split (convolution and
pool gradients on the rank's block, weight gradients partial sums all-reduced); losses and parameters
as one process on the whole batch."""
import numpy as np

import kiln
from common import check, ok

n = kiln.dist.size()
batch = 4 * n
rng = np.random.default_rng(5)
b = kiln.graph.Builder()
x = b.input("x", (batch, 3, 8, 8))
h = b.op("Relu", b.op("Conv", x, b.constant("w1", rng.standard_normal((6, 3, 3, 3)).astype("float32") * 0.3),
                      b.constant("b1", np.zeros(6, "float32")), pads=[1, 1, 1, 1]))
h = b.op("MaxPool", h, kernel_shape=[2, 2], strides=[2, 2])
h = b.op("Flatten", b.op("GlobalAveragePool", h))
y = b.op("Gemm", h, b.constant("fc", rng.standard_normal((4, 6)).astype("float32") * 0.3), b.constant("fcb", np.zeros(4, "float32")), transB=1)
model = b.build(y)
single = kiln.train.compile(model, optimizer=kiln.train.Adam(lr=0.01))
dp = kiln.dist.data_parallel(kiln.train.compile(model, optimizer=kiln.train.Adam(lr=0.01)), kiln.dist.Mesh(("data", n)))
gathers = [c for c in dp.plan.collectives() if c[0] == "kiln.AllGather"]
check(not gathers, f"the batch should never be gathered, got {gathers}")
for i in range(4):
    xv, yv = rng.standard_normal((batch, 3, 8, 8)).astype("float32"), rng.integers(0, 4, batch)
    a, c = single(xv, yv), dp(xv, yv)
    check(abs(a - c) <= 1e-5 * max(1.0, abs(a)), f"step {i}: loss {c} vs one process {a}")
    for k in single.parameters:
        check(np.allclose(single.parameters[k], dp.parameters[k], rtol=1e-4, atol=1e-5), f"step {i}: parameter {k} differs")
ok(f"dp cnn train loss {c:.5f}")
