"""Gradient all-reduces overlapped with the backward pass in buckets (bucket_mb): the same losses and
parameters, bit for bit, as the runner that all-reduces each gradient in turn (sums of the same numbers
in the same order), for an MLP with SGD and a CNN with Adam (DP_OVERLAP_MLP_ONLY=1: the MLP only); the
stats count the buckets."""
import os

import numpy as np

import kiln
from common import check, mlp, ok

n = kiln.dist.size()
mesh = kiln.dist.Mesh(("data", n))


def cnn(batch, rng):
    b = kiln.graph.Builder()
    x = b.input("x", (batch, 3, 8, 8))
    h = b.op("Relu", b.op("Conv", x, b.constant("w1", rng.standard_normal((6, 3, 3, 3)).astype("float32") * 0.3),
                          b.constant("b1", np.zeros(6, "float32")), pads=[1, 1, 1, 1]))
    h = b.op("Relu", b.op("Conv", h, b.constant("w2", rng.standard_normal((8, 6, 3, 3)).astype("float32") * 0.3),
                          b.constant("b2", np.zeros(8, "float32")), pads=[1, 1, 1, 1]))
    h = b.op("Flatten", b.op("GlobalAveragePool", h))
    y = b.op("Gemm", h, b.constant("fc", rng.standard_normal((4, 8)).astype("float32") * 0.3), b.constant("fcb", np.zeros(4, "float32")), transB=1)
    return b.build(y), (batch, 3, 8, 8)


def compare(name, model, xshape, classes, optimizer, bucket_mb, rng):
    batch = xshape[0]
    plain = kiln.dist.train(model, mesh, bucket_mb=0, loss="cross_entropy", optimizer=optimizer())
    over = kiln.dist.train(model, mesh, bucket_mb=bucket_mb, loss="cross_entropy", optimizer=optimizer())
    n_params = len(plain.parameters)
    st = over.runner.stats()
    check(plain.runner.stats()["buckets"] == 0, f"{name}: bucket_mb=0 made buckets")
    check(st["buckets"] >= 2, f"{name}: {bucket_mb} MiB buckets should split the {n_params} gradients, got {st['buckets']} bucket(s)")
    check(over.runner._r.num_segments > plain.runner._r.num_segments, f"{name}: the backward pass was not cut into parts")
    for i in range(4):
        x = rng.standard_normal(xshape).astype("float32")
        y = rng.integers(0, classes, batch)
        a, b = plain(x, y), over(x, y)
        check(a == b, f"{name} step {i}: loss {b!r} overlapped vs {a!r} in turn")
        for k in plain.parameters:
            check(np.array_equal(plain.parameters[k], over.parameters[k]), f"{name} step {i}: parameter {k} differs")
    st = over.runner.stats()
    check(st["runs"] == 4 and all(c["calls"] == 4 for c in st["collectives"]), f"{name}: stats {st}")
    check(st["bucket_wait_seconds"] <= st["collective_seconds"] <= st["seconds"], f"{name}: times {st}")
    return b


rng = np.random.default_rng(3)
model, _ = mlp(batch=4 * n, d_in=12, hidden=16, d_out=5, seed=2)
l1 = compare("mlp", model, (4 * n, 12), 5, lambda: kiln.train.SGD(lr=0.1, momentum=0.9), 0.0002, rng)
if os.environ.get("DP_OVERLAP_MLP_ONLY") != "1":
    model, xshape = cnn(2 * n, rng)
    l1 = compare("cnn", model, xshape, 4, lambda: kiln.train.Adam(lr=0.01), 0.0002, rng)
ok(f"overlap loss {l1:.5f}")
