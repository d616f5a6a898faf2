"""Data-parallel CNN forward against the one-process run and PyTorch."""
import numpy as np
import torch

import kiln
from common import check, ok, reference

rng = np.random.default_rng(1)
n = kiln.dist.size()
batch = 2 * n
w1 = rng.standard_normal((8, 3, 3, 3)).astype("float32") * 0.3
b1 = rng.standard_normal(8).astype("float32") * 0.1
w2 = rng.standard_normal((8, 8, 3, 3)).astype("float32") * 0.2
fc = rng.standard_normal((5, 8)).astype("float32") * 0.3
fcb = rng.standard_normal(5).astype("float32") * 0.1
b = kiln.graph.Builder()
x = b.input("x", (batch, 3, 10, 10))
h = b.op("Relu", b.op("Conv", x, b.constant("w1", w1), b.constant("b1", b1), pads=[1, 1, 1, 1]))
h = b.op("MaxPool", h, kernel_shape=[2, 2], strides=[2, 2])
h = b.op("Relu", b.op("Conv", h, b.constant("w2", w2), strides=[2, 2], pads=[0, 1, 1, 0]))
h = b.op("Flatten", b.op("GlobalAveragePool", h))
y = b.op("Softmax", b.op("Gemm", h, b.constant("fc", fc), b.constant("fcb", fcb), transB=1))
model = b.build(y)
plan = kiln.dist.shard(model, kiln.dist.Mesh(("data", n)), strategy="data")
if kiln.dist.rank() == 0:
    print(plan)
check([c[0] for c in plan.collectives()] == (["kiln.AllGather"] if n > 1 else []), f"collectives {plan.collectives()}")
xv = rng.standard_normal((batch, 3, 10, 10)).astype("float32")
(out,) = plan.compile()(xv)
ref = reference(model, xv)
t = torch.from_numpy(xv)
t = torch.relu(torch.nn.functional.conv2d(t, torch.from_numpy(w1), torch.from_numpy(b1), padding=1))
t = torch.nn.functional.max_pool2d(t, 2, 2)
t = torch.relu(torch.nn.functional.conv2d(torch.nn.functional.pad(t, (1, 0, 0, 1)), torch.from_numpy(w2), stride=2))
t = torch.softmax(t.mean(dim=(2, 3)) @ torch.from_numpy(fc).T + torch.from_numpy(fcb), dim=-1)
np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-6)
np.testing.assert_allclose(out, t.numpy(), rtol=1e-4, atol=1e-5)
ok(f"dp cnn max err {np.abs(out - t.numpy()).max():.2e}")
