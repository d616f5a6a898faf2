#!/usr/bin/python3
"""Transformer dense layers, one kiln group each: GFLOP/s, and an A/B of two compiles.

  bench/large_weight_gemm_bench.py [--target llvm] [--threads 2] [--rounds 7] [--repeat-ms 40]
                                   [--rows 128,197,77] [--build DIR] [--details]

The shapes of BERT-base's and ViT-B/16's layers as ONNX exports them:
x[1, M, K] @ W[K, N] + bias (the batched form with one weight), with the
FFN's activation fused: 768 -> 768 (a projection), 768 -> 3072 + GELU
(erf form), 3072 -> 768; and the 2-D x[M, 768] @ W + bias, ReLU.
Each case is checked against numpy (float64 GELU). Each round times every
case back to back for at least --repeat-ms, the A/B pair interleaved;
GFLOP/s of the best (min time) and median round. --details prints each
group's schedule detail. --ab VAR=VALUE compiles each case a second time
with that environment setting (an experiment's switch) and times both in
one process. No peer column: numpy in this process ran at a quarter of
its own rate beside kiln's thread pool (OpenBLAS SkylakeX, 31 against 130
GFLOP/s); bench/gemm_bench and bench/profile_vs_ort.py time the peers in
processes of their own.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SHAPES = ((768, 768, "none"), (768, 3072, "gelu"), (3072, 768, "none"), (768, 3072, "relu2d"))


def make(M, K, N, act, target, np, kiln, Builder):
    """(kiln callable, numpy reference callable, executable) for one dense layer on seeded inputs."""
    rng = np.random.default_rng(0)
    two_d = act.endswith("2d")
    x = rng.standard_normal((M, K) if two_d else (1, M, K)).astype(np.float32)
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    b = Builder()
    y = b.op("Add", b.op("MatMul", b.input("x", x.shape), b.constant("w", w)), b.constant("b", bias))
    if act == "gelu":
        half = b.constant("half", np.array(0.5, np.float32))
        one = b.constant("one", np.array(1.0, np.float32))
        rs2 = b.constant("rs2", np.array(1 / np.sqrt(2), np.float32))
        y = b.op("Mul", b.op("Mul", y, half), b.op("Add", b.op("Erf", b.op("Mul", y, rs2)), one))
    elif act.startswith("relu"):
        y = b.op("Relu", y)
    exe = kiln.compile(b.build(y), target=target)

    def ref():
        r = x @ w + bias
        if act == "gelu":
            import math
            r = 0.5 * r * (1 + np.vectorize(math.erf)(r / np.sqrt(2)).astype(np.float32))
        elif act.startswith("relu"):
            r = np.maximum(r, 0)
        return r

    return (lambda: exe(x)), ref, exe


def time_round(fn, repeat_ms, clock=time.perf_counter):
    best, deadline = float("inf"), time.perf_counter() + repeat_ms / 1e3
    while True:
        c0 = clock()
        fn()
        t = clock() - c0
        best = min(best, t)
        if time.perf_counter() > deadline:
            return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="llvm", help="kiln's target; -num-cores=T is added")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat-ms", type=float, default=40.0)
    ap.add_argument("--rows", default="128,197,77")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--details", action="store_true")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the process's CPU time (all its threads), steadier on a shared machine at 1 thread")
    ap.add_argument("--ab", default="", help="VAR=VALUE: also time kiln compiled with this environment setting (column 'kiln B')")
    args = ap.parse_args()
    os.environ["KILN_NUM_THREADS"] = str(args.threads)
    sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(args.build, "python")]
    import numpy as np
    import kiln
    from kiln.graph import Builder
    target = f"{args.target} -num-cores={args.threads}"
    print(f"# target '{target}', {args.threads} threads, build {args.build}, load {os.getloadavg()[0]:.1f}")
    rows = []
    for M in (int(m) for m in args.rows.split(",")):
        for K, N, act in SHAPES:
            k, ref, exe = make(M, K, N, act, target, np, kiln, Builder)
            fns = [("kiln", k)]
            details = [exe.groups()[0]["schedule_detail"]]
            if args.ab:
                var, _, val = args.ab.partition("=")
                old = os.environ.get(var)
                os.environ[var] = val
                kb, _, exe_b = make(M, K, N, act, target, np, kiln, Builder)
                os.environ.pop(var) if old is None else os.environ.__setitem__(var, old)
                fns.append(("kiln B", kb))
                details.append(exe_b.groups()[0]["schedule_detail"])
            for _, fn in fns:
                np.testing.assert_allclose(fn()[0].reshape(-1, N), ref().reshape(-1, N), rtol=2e-3, atol=2e-3)
            rows.append((f"{M}x{K}x{N} {act}", 2 * M * K * N, fns, details))
    times = {}
    for _ in range(args.rounds):
        for r, row in enumerate(rows):
            for who, fn in row[2]:
                times.setdefault((r, who), []).append(time_round(fn, args.repeat_ms, time.process_time if args.clock == "cpu" else time.perf_counter))
    whos = [w for w, _ in rows[0][2]]
    print(f"{'case':<24} " + " ".join(f"{w + ' best/med':>15}" for w in whos) + ("  B/kiln time (best, med)" if args.ab else ""))
    for r, (name, flop, fns, details) in enumerate(rows):
        g = {who: flop / np.array(times[(r, who)]) / 1e9 for who in whos}
        line = f"{name:<24} " + " ".join(f"{g[w].max():7.0f}/{np.median(g[w]):<7.0f}" for w in whos)
        if args.ab:
            line += f"  {g['kiln'].max() / g['kiln B'].max():.2f}, {np.median(g['kiln']) / np.median(g['kiln B']):.2f}"
        print(line)
        if args.details:
            for dt in details:
                print("   ", dt)
    print(f"# load after {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
