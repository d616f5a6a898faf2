#!/usr/bin/python3
"""Kernels compiled once over a symbolic extent against kernels compiled for each exact extent.

  bench/dynamic_kernels_bench.py [--target llvm] [--threads 2] [--rounds 5] [--repeat-ms 20]
                                 [--sizes 1,7,33,64,100,128,200,384] [--kernels dense,...] [--build DIR] [--variants]

Each kernel of a BERT-base layer (and a ResNet conv) is built with the
default schedule (the graph compiler's, ops::SearchSpace's default
candidate) twice: once with its rows / sequence length / batch a shape
variable (te.var), called at every size, and once per size with that size a
constant. Each round times every (kernel, size, dynamic|static) back to back
for at least --repeat-ms (in C++: Module.time_evaluator), rounds
interleaved. Printed: the time of the static kernel (best round) and the
ratio dynamic / static, of the best rounds and the median of the per-round
ratios. The goal is at most 1.10 at every size. With --variants the
dynamic kernel at each size is the one a graph group keeps for that size
(graph/kernel_variants.h: scheduled at its size bucket's hint).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))

SIZES = (1, 7, 33, 64, 100, 128, 200, 384)


def _gelu(te, x):
    return x * 0.5 * (1.0 + te.erf(x * 0.70710678))


def dense(te, n, K=768, N=768):
    """x[n, K] @ w[K, N]: a projection of a sequence of n tokens."""
    X, W = te.placeholder((n, K), name="X"), te.placeholder((K, N), name="W")
    k = te.reduce_axis((0, K), "k")
    return [X, W, te.compute((n, N), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name="dense")]


def dense_gelu(te, n, K=768, N=3072):
    """The MLP's first layer: x @ w + b, GELU fused."""
    X, W, b = te.placeholder((n, K), name="X"), te.placeholder((K, N), name="W"), te.placeholder((N,), name="b")
    k = te.reduce_axis((0, K), "k")
    C = te.compute((n, N), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name="dense")
    return [X, W, b, te.compute((n, N), lambda i, j: _gelu(te, C[i, j] + b[j]), name="gelu")]


def qk(te, n, H=12, D=64):
    """Attention scores: q[h, n, 64] @ kT[h, 64, n]."""
    Q, Kt = te.placeholder((H, n, D), name="Q"), te.placeholder((H, D, n), name="Kt")
    k = te.reduce_axis((0, D), "k")
    return [Q, Kt, te.compute((H, n, n), lambda b, i, j: te.sum(Q[b, i, k] * Kt[b, k, j], axis=k), name="qk")]


def pv(te, n, H=12, D=64):
    """Attention output: p[h, n, n] @ v[h, n, 64] (the reduction over n too)."""
    P, V = te.placeholder((H, n, n), name="P"), te.placeholder((H, n, D), name="V")
    k = te.reduce_axis((0, n), "k")
    return [P, V, te.compute((H, n, D), lambda b, i, j: te.sum(P[b, i, k] * V[b, k, j], axis=k), name="pv")]


def softmax(te, n, H=12):
    """Softmax over the last axis of [h, n, n] scores."""
    X = te.placeholder((H, n, n), name="X")
    k1, k2 = te.reduce_axis((0, n), "k"), te.reduce_axis((0, n), "k")
    mx = te.compute((H, n), lambda h, i: te.max(X[h, i, k1], axis=k1), name="sm.max")
    ex = te.compute((H, n, n), lambda h, i, j: te.exp(X[h, i, j] - mx[h, i]), name="sm.exp")
    sm = te.compute((H, n), lambda h, i: te.sum(ex[h, i, k2], axis=k2), name="sm.sum")
    return [X, te.compute((H, n, n), lambda h, i, j: ex[h, i, j] / sm[h, i], name="softmax")]


def layernorm(te, n, D=768):
    """Layer norm of [n, 768] rows (kiln.ops.layer_norm)."""
    import kiln
    X, g, b = te.placeholder((n, D), name="X"), te.placeholder((D,), name="g"), te.placeholder((D,), name="be")
    return [X, g, b, kiln.ops.layer_norm(X, g, b)]


def bias_gelu(te, n, D=3072):
    """An elementwise group: bias + GELU over [n, 3072]."""
    X, b = te.placeholder((n, D), name="X"), te.placeholder((D,), name="b")
    return [X, b, te.compute((n, D), lambda i, j: _gelu(te, X[i, j] + b[j]), name="gelu")]


def conv(te, n, C=64, K=64, HW=56):
    """A ResNet 3x3 conv, NCHWc, over a batch of n images."""
    import kiln
    cb, kb = kiln.ops.nchwc_blocks(C, K)
    X = te.placeholder((n, C // cb, HW, HW, cb), name="X")
    W = te.placeholder((K // kb, C // cb, 3, 3, cb, kb), name="W")
    Y, _ = kiln.ops.conv2d_nchwc(X, W, 1, 1)
    return [X, W, Y]


KERNELS = {"dense": dense, "dense_gelu": dense_gelu, "qk": qk, "pv": pv, "softmax": softmax, "layernorm": layernorm, "bias_gelu": bias_gelu,
           "conv": conv}
# Conv sizes are batches of 56 x 56 images: a few are enough.
CONV_SIZES = (1, 2, 3, 4, 7, 8)


# The graph's size buckets (graph/kernel_variants.h): (lo, hi, hint) of the shape variable.
BUCKETS = ((0, 1, 1), (2, 16, 8), (17, 256, 128), (257, 1 << 62, 512))


def bucket_hint(n):
    return next(h for lo, hi, h in BUCKETS if lo <= n <= hi)


def default_module(args, target, hints=None):
    """The kernel with the schedule a graph group gets without tuning (ops::SearchSpace's default candidate)."""
    import kiln
    from kiln._ffi import _kiln
    task = _kiln.tuner.make_task(list(args), target, "", hints or {})
    sched = _kiln.Schedule.from_trace(task.outputs, _kiln.tuner.default_trace(task))
    return kiln.build(sched, list(args), target), _kiln.tuner.default_description(task)


def concrete_shape(t, n):
    """t's shape with the shape variable at n."""
    return tuple(n if not str(d).lstrip("-").isdigit() else int(str(d)) for d in t.shape)


def inputs(np, args, n, seed=0):
    rng = np.random.default_rng(seed)
    ins = [rng.standard_normal(concrete_shape(t, n)).astype(np.float32) for t in args if t.op.kind != "compute"]
    outs = [np.zeros(concrete_shape(t, n), np.float32) for t in args if t.op.kind == "compute"]
    return ins + outs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="llvm", help="kiln's target; -num-cores=T is added")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat-ms", type=float, default=20.0)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="kiln's build (its python/), where kiln is not importable")
    ap.add_argument("--variants", action="store_true",
                    help="the dynamic kernel at each size is the graph's size variant for it: scheduled at its bucket's hint")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    names = args.kernels.split(",")
    for k in names:
        if k not in KERNELS:
            raise SystemExit(f"--kernels: unknown kernel '{k}'; known: {', '.join(KERNELS)}")
    os.environ["KILN_NUM_THREADS"] = str(args.threads)
    sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(args.build, "python")]
    import blas_choice
    import numpy as np
    from kiln import te
    target = f"{args.target} -num-cores={args.threads}"
    cpu, flags = blas_choice.cpu_info()
    print(f"# {cpu} ({blas_choice.vector_isa(flags)}), target '{target}', {args.threads} threads, "
          f"{args.rounds} rounds of {args.repeat_ms:g} ms per kernel and size, interleaved")
    cases = []  # (kernel, size, dynamic evaluator, static evaluator, arrays)
    for name in names:
        build = KERNELS[name]
        dyn_args = build(te, te.var("n"))
        dyn, desc = default_module(dyn_args, target)
        print(f"# {name}: dynamic schedule {desc}")
        variants = {}  # bucket hint -> its kernel, as the graph keeps them
        for n in (CONV_SIZES if name == "conv" and args.sizes == ",".join(map(str, SIZES)) else sizes):
            if args.variants:
                h = bucket_hint(n)
                if h not in variants:
                    variants[h] = default_module(dyn_args, target, {"n": h})
                    print(f"# {name}: variant for n in bucket of hint {h}: {variants[h][1]}")
                dyn = variants[h][0]
            st, _ = default_module(build(te, n), target)
            arrays = inputs(np, dyn_args, n)
            dyn(*arrays)
            got = arrays[-1].copy()
            st(*arrays)
            np.testing.assert_allclose(got, arrays[-1], rtol=1e-4, atol=1e-4, err_msg=f"{name} at {n}: dynamic and static kernels disagree")
            timer = lambda m: m.time_evaluator(number=1, repeat=1, min_repeat_ms=args.repeat_ms)  # noqa: E731
            cases.append((name, n, timer(dyn), timer(st), arrays))
    times = {}
    for r in range(args.rounds):
        for c, (_, _, dyn, st, arrays) in enumerate(cases):
            # Alternate which goes first, so neither always runs on a warmer cache.
            order = (("dyn", dyn), ("static", st)) if (r + c) % 2 == 0 else (("static", st), ("dyn", dyn))
            for who, ev in order:
                times.setdefault((c, who), []).append(ev(*arrays).min)
    print(f"{'kernel':<11} {'size':>5} {'static us':>10} {'dynamic us':>11} {'dyn/static best':>16} {'median':>7}")
    worst = 0.0
    for c, (name, n, *_rest) in enumerate(cases):
        d, s = np.array(times[(c, "dyn")]), np.array(times[(c, "static")])
        best, med = d.min() / s.min(), float(np.median(d / s))
        worst = max(worst, med)
        print(f"{name:<11} {n:>5} {s.min() * 1e6:>10.1f} {d.min() * 1e6:>11.1f} {best:>16.2f} {med:>7.2f}")
    print(f"# worst median ratio {worst:.2f} (goal: 1.10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
