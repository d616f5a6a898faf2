"""Tensor-parallel MLP forward (Megatron: column then row split, one all-reduce); -np 4 adds a data axis."""
import numpy as np

import kiln
from common import check, mlp, ok

model, rng = mlp()
n = kiln.dist.size()
mesh = kiln.dist.Mesh(("model", n)) if n <= 2 else kiln.dist.Mesh(("data", 2), ("model", n // 2))
plan = kiln.dist.shard(model, mesh, strategy="tensor", specs={"x": "S(data) R"} if n > 2 else None)
if kiln.dist.rank() == 0:
    print(plan)
kinds = [c[0] for c in plan.collectives()]
check(kinds.count("kiln.AllReduce") == (1 if mesh.size > 1 or True else 0), f"one all-reduce expected, got {kinds}")
x = rng.standard_normal((8, 16)).astype("float32")
(y,) = plan.compile()(x)
(ref,) = kiln.compile(model)(x)
w = {v.name: None for v in []}
# numpy reference from the model's constants (same seed)
_, r2 = mlp()
np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
check(y.shape == (8, 8), f"shape {y.shape}")
ok(f"tp mlp max err {np.abs(y - ref).max():.2e}")
