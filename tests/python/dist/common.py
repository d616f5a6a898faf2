"""Shared by the scripts mpirun starts (tests/python/test_dist.py): models and reporting."""
import sys

import numpy as np

import kiln


def mlp(batch=8, d_in=16, hidden=32, d_out=8, seed=0):
    rng = np.random.default_rng(seed)
    b = kiln.graph.Builder()
    x = b.input("x", (batch, d_in))
    w1 = b.constant("w1", rng.standard_normal((d_in, hidden)).astype("float32") * 0.3)
    b1 = b.constant("b1", rng.standard_normal(hidden).astype("float32") * 0.1)
    w2 = b.constant("w2", rng.standard_normal((hidden, d_out)).astype("float32") * 0.3)
    b2 = b.constant("b2", rng.standard_normal(d_out).astype("float32") * 0.1)
    h = b.op("Relu", b.op("Add", b.op("MatMul", x, w1), b1))
    y = b.op("Add", b.op("MatMul", h, w2), b2)
    return b.build(y), rng


def follow_one_process(step, ref, batch, width, classes, steps=5, label=""):
    """Trains a pipelined `step` and kiln.train's one-process `ref` on the same random batches: the
    losses agree at every step, and every stage's parameters equal ref's at the end."""
    rng = np.random.default_rng(4)
    for i in range(steps):
        x = rng.standard_normal((batch, width)).astype("float32")
        y = rng.integers(0, classes, batch)
        got, want = step(x, y), ref(x, y)
        check(abs(got - want) <= 1e-5 * max(1.0, abs(want)), f"{label}step {i}: loss {got} against {want}")
    params = step.all_parameters()
    check(sorted(params) == sorted(ref.parameters), f"parameters {sorted(params)} against {sorted(ref.parameters)}")
    for name, v in params.items():
        check(np.allclose(v, ref.parameters[name], rtol=1e-4, atol=1e-5), f"{label}{name}: max difference {np.abs(v - ref.parameters[name]).max()}")


def ok(msg=""):
    print(f"OK rank {kiln.dist.rank()} {msg}", flush=True)


def check(cond, msg):
    if not cond:
        print(f"FAIL rank {kiln.dist.rank()}: {msg}", file=sys.stderr, flush=True)
        sys.exit(1)


def reference(model, *inputs):
    """The one-process kiln result, compiled on rank 0 only (to spare the shared cores) and sent to every rank."""
    shape, dtype = model.output_types[0]
    out = kiln.compile(model)(*inputs)[0] if kiln.dist.rank() == 0 else np.empty(shape, dtype)
    return kiln.dist.broadcast(np.ascontiguousarray(out, dtype=dtype), 0)
