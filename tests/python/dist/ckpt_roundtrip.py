"""Checkpoint round trips (tests/python/test_dist_checkpoint.py):
    ckpt_roundtrip.py save STRATEGY DIR    3 Adam steps on this many ranks, then kiln.train.save
    ckpt_roundtrip.py load STRATEGY DIR    kiln.train.load on this many ranks (maybe another count or plan):
                                           the parameters equal one process's after the same 3 steps, and
                                           3 more steps follow its losses.
STRATEGY: plain (one process), data, tensor or pipeline."""
import json
import os
import sys

import numpy as np

import kiln
from common import check, mlp, ok

mode, strategy, path = sys.argv[1:4]
n, r = kiln.dist.size(), kiln.dist.rank()
model, _ = mlp(batch=8, d_in=12, hidden=16, d_out=4, seed=3)
micro, _ = mlp(batch=4, d_in=12, hidden=16, d_out=4, seed=3)  # the same weights; a pipeline takes 2 micro-batches of 4
rng = np.random.default_rng(7)
xs = [rng.standard_normal((8, 12)).astype("float32") for _ in range(6)]
ys = [rng.integers(0, 4, 8) for _ in range(6)]
opt = lambda: kiln.train.Adam(lr=0.01)


def make():
    if strategy == "plain":
        check(n == 1, "plain runs on one rank")
        return kiln.train.compile(model, loss="cross_entropy", optimizer=opt())
    if strategy == "pipeline":
        return kiln.dist.pipeline_train(micro, loss="cross_entropy", optimizer=opt(), micro_batches=2, num_stages=n).compile()
    axis = "model" if strategy == "tensor" else "data"
    return kiln.dist.train(model, kiln.dist.Mesh((axis, n)), strategy=strategy, loss="cross_entropy", optimizer=opt())


def params(step):
    return step.all_parameters() if strategy == "pipeline" else dict(step.parameters)


step = make()
if mode == "save":
    for i in range(3):
        step(xs[i], ys[i])
    kiln.train.save(step, path, data_position=3, extra={"saved_by": strategy})
    if r == 0:
        m = json.load(open(os.path.join(path, "manifest.json")))
        check(m["ranks"] == n and m["steps"] == 3, f"manifest ranks {m['ranks']} steps {m['steps']}")
        bins = [f for f in m["files"] if f.endswith(".bin")]
        check(len(bins) == n and all(m["files"][f]["bytes"] > 0 for f in bins), f"each rank writes its shard: {m['files']}")
        w1 = m["tensors"]["param/w1"]["pieces"]
        check(len(w1) == (n if strategy == "tensor" else 1), f"w1 saved in {len(w1)} pieces")
        check(not os.path.exists(path + ".partial"), "the temporary directory is left")
    ok(f"saved {strategy} on {n}")
else:
    ref = kiln.train.compile(model, loss="cross_entropy", optimizer=opt())
    for i in range(3):
        ref(xs[i], ys[i])
    info = kiln.train.load(step, path)
    check(info["data_position"] == 3 and step.steps == 3, f"loaded {info}, steps {step.steps}")
    for name, v in params(step).items():
        check(np.allclose(v, ref.parameters[name], rtol=1e-5, atol=1e-6), f"loaded {name} differs by {np.abs(v - ref.parameters[name]).max()}")
    for i in range(3, 6):
        a, b = ref(xs[i], ys[i]), step(xs[i], ys[i])
        check(abs(a - b) <= 1e-5 * max(1.0, abs(a)), f"step {i}: loss {b} against one process {a}")
    for name, v in params(step).items():
        check(np.allclose(v, ref.parameters[name], rtol=1e-4, atol=1e-5), f"after 6 steps {name} differs by {np.abs(v - ref.parameters[name]).max()}")
    ok(f"loaded {info['extra']['saved_by']} into {strategy} on {n}")
