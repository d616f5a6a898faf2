"""One rank leaves (exits, or hangs with KILLED_MODE=hang) before a collective; the others must stop with an error, not hang."""
import os
import sys
import time

import numpy as np

import kiln
from common import mlp

model, rng = mlp()
plan = kiln.dist.shard(model, kiln.dist.Mesh(("model", kiln.dist.size())), strategy="tensor")
runner = plan.compile()
if kiln.dist.rank() == 1:
    if os.environ.get("KILLED_MODE") == "hang":
        time.sleep(600)
    print("rank 1 exits early", flush=True)
    os._exit(3)
time.sleep(0.5)
runner(rng.standard_normal((8, 16)).astype("float32"))
print(f"rank {kiln.dist.rank()} finished a collective without its peer", flush=True)
sys.exit(0)
