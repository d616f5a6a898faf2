"""Data-parallel training that saves every 3 steps and may be killed (tests/python/test_dist_checkpoint.py):
    ckpt_resume.py DIR full          30 steps
    ckpt_resume.py DIR die K         rank 1 kills itself (SIGKILL) after step K
    ckpt_resume.py DIR run           like full, but the test takes rank 1's host down mid-run
    ckpt_resume.py DIR resume        loads DIR/ckpt and goes on from its data position to step 30
Rank 0 appends "i loss" (the float's repr) to DIR/losses.<mode> as each step ends."""
import os
import signal
import sys
import time

import numpy as np

import kiln
from common import mlp, ok

path, mode = sys.argv[1], sys.argv[2]
n, r = kiln.dist.size(), kiln.dist.rank()
model, _ = mlp(batch=4 * n, d_in=12, hidden=16, d_out=5, seed=2)
step = kiln.dist.train(model, kiln.dist.Mesh(("data", n)), loss="cross_entropy", optimizer=kiln.train.Adam(lr=0.01))
data = np.random.default_rng(11)  # the batches come from this generator: its state is saved with the position
start = 0
if mode == "resume":
    start = kiln.train.load(step, os.path.join(path, "ckpt"), rng=data)["data_position"]
log = open(os.path.join(path, f"losses.{mode}"), "a") if r == 0 else None
for i in range(start, 30):
    x, y = data.standard_normal((4 * n, 12)).astype("float32"), data.integers(0, 5, 4 * n)
    loss = step(x, y)
    if log:
        log.write(f"{i} {loss!r}\n")
        log.flush()
    print(f"step {i} rank {r}", flush=True)
    if mode == "die" and r == 1 and i == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
    if (i + 1) % 3 == 0:
        kiln.train.save(step, os.path.join(path, "ckpt"), data_position=i + 1, rng=data)
    if mode == "run":
        time.sleep(0.05)  # the host goes down mid-run
ok(f"{mode} to step 30")
