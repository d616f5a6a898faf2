"""Tensor-parallel MLP forward (Megatron: column then row split, one all-reduce); -np 4 adds a data axis."""
import numpy as np
import torch

import kiln
from common import check, mlp, ok, reference

model, rng = mlp()
n = kiln.dist.size()
mesh = kiln.dist.Mesh(("model", n)) if n <= 2 else kiln.dist.Mesh(("data", 2), ("model", n // 2))
plan = kiln.dist.shard(model, mesh, strategy="tensor", specs={"x": "S(data) R"} if n > 2 else None)
if kiln.dist.rank() == 0:
    print(plan)
kinds = [c[0] for c in plan.collectives()]
check(kinds.count("kiln.AllReduce") == 1, f"one all-reduce expected, got {kinds}")
x = rng.standard_normal((8, 16)).astype("float32")
(y,) = plan.compile()(x)
ref = reference(model, x)
np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
check(y.shape == (8, 8), f"shape {y.shape}")

# The same MLP as PyTorch's Linear layers export it: Gemm with transB=1 and biases. The row-split
# Gemm's bias joins the partial sum (one rank of the group adds it).
torch.manual_seed(0)  # the same layers on every rank
lin1, lin2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)
b = kiln.graph.Builder()
xin = b.input("x", (8, 16))
h = b.op("Relu", b.op("Gemm", xin, b.constant("l1.w", lin1.weight.detach().numpy()), b.constant("l1.b", lin1.bias.detach().numpy()), transB=1))
gemm_model = b.build(b.op("Gemm", h, b.constant("l2.w", lin2.weight.detach().numpy()), b.constant("l2.b", lin2.bias.detach().numpy()), transB=1))
gplan = kiln.dist.shard(gemm_model, mesh, strategy="tensor", specs={"x": "S(data) R"} if n > 2 else None)
check(str(gplan).count("kiln.AllReduce") == 1 and "kiln.ToPartial" in str(gplan), str(gplan))
(gy,) = gplan.compile()(x)
want = lin2(torch.relu(lin1(torch.from_numpy(x)))).detach().numpy()
np.testing.assert_allclose(gy, want, rtol=1e-4, atol=1e-5)
ok(f"tp mlp max err {np.abs(y - ref).max():.2e}, gemm form {np.abs(gy - want).max():.2e}")
