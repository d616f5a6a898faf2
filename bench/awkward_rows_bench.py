#!/usr/bin/python3
"""Matmuls whose rows have no good divisor against their next multiple of 16: GFLOP/s side by side.

  bench/awkward_rows_bench.py [--target llvm] [--threads 2] [--rounds 7] [--repeat-ms 40]
                              [--rows 197:208,77:80,50:64] [--build DIR]

Kiln's default schedules (kiln.compile of a one-group graph) against numpy
(OpenBLAS, with bench/peers/blas_choice.py's core type), for the matmuls of
ViT-B/16 at each pair of row counts M (awkward) and M' (its neighbour): the
dense layers x[M, K] @ W[K, N] + bias, ReLU fused (K, N = 768, 768; 768,
3072; 3072, 768), and attention's batched matmuls over 12 heads, Q K^T
[12, M, 64] @ [12, 64, M] and P V [12, M, M] @ [12, M, 64] (their columns and
reduce axis follow M too). Each round times every case back to back for at
least --repeat-ms, rounds interleaved; GFLOP/s of the best (min time) and
median round. The ratio columns are M's GFLOP/s over M''s, best and median: the goal
is at least 0.85 (within 15% of the neighbour's rate).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))


def parse_pairs(text):
    pairs = []
    for item in text.split(","):
        a, _, b = item.partition(":")
        try:
            pairs.append((int(a), int(b)))
        except ValueError:
            raise SystemExit(f"--rows: '{item}' is not M:NEIGHBOUR (e.g. 197:208)")
    return pairs


def cases(M):
    """(name, flop, inputs builder) of the ViT-B/16 matmuls at M rows."""
    out = [(f"dense {K}->{N}", 2 * M * K * N, ("dense", M, K, N)) for K, N in ((768, 768), (768, 3072), (3072, 768))]
    out.append(("QK^T 12x64", 2 * 12 * M * 64 * M, ("bmm", 12, M, 64, M)))
    out.append(("PV 12xMx64", 2 * 12 * M * M * 64, ("bmm", 12, M, M, 64)))
    return out


def make(spec, target, np, kiln, Builder):
    """(kiln callable, numpy callable) of one case, on seeded random inputs."""
    rng = np.random.default_rng(0)
    b = Builder()
    if spec[0] == "dense":
        _, M, K, N = spec
        x, w, bias = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (K, N), (N,)))
        y = b.op("Relu", b.op("Add", b.op("MatMul", b.input("x", x.shape), b.constant("w", w)), b.constant("b", bias)))
        exe = kiln.compile(b.build(y), target=target)
        return (lambda: exe(x)), (lambda: np.maximum(x @ w + bias, 0)), exe
    _, H, M, K, N = spec
    x, w = rng.standard_normal((H, M, K)).astype(np.float32), rng.standard_normal((H, K, N)).astype(np.float32)
    exe = kiln.compile(b.build(b.op("MatMul", b.input("x", x.shape), b.input("w", w.shape))), target=target)
    return (lambda: exe(x, w)), (lambda: np.matmul(x, w)), exe


def time_round(fn, repeat_ms):
    """Seconds per call: the best of this round's back-to-back calls."""
    best, deadline = float("inf"), time.perf_counter() + repeat_ms / 1e3
    while True:
        t0 = time.perf_counter()
        fn()
        t = time.perf_counter() - t0
        best = min(best, t)
        if t0 + t > deadline:
            return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="llvm", help="kiln's target; -num-cores=T is added")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat-ms", type=float, default=40.0)
    ap.add_argument("--rows", default="197:208,77:80,50:64", help="pairs M:NEIGHBOUR")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="kiln's build (its python/), where kiln is not importable")
    args = ap.parse_args()
    pairs = parse_pairs(args.rows)
    # Threads and OpenBLAS's core type before numpy and kiln load.
    import blas_choice
    choice = blas_choice.choose(args.threads)
    if choice.get("coretype"):
        os.environ["OPENBLAS_CORETYPE"] = choice["coretype"]
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["KILN_NUM_THREADS"] = str(args.threads)
    sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(args.build, "python")]
    import numpy as np
    import kiln
    from kiln.graph import Builder
    target = f"{args.target} -num-cores={args.threads}"
    cpu, flags = blas_choice.cpu_info()
    print(f"# {cpu} ({blas_choice.vector_isa(flags)}), target '{target}', {args.threads} threads, OpenBLAS {choice.get('arch')}, "
          f"{args.rounds} rounds of {args.repeat_ms:g} ms")
    rows = []  # (M, neighbour, name, flop pair, kiln fns, numpy fns)
    for M, Mn in pairs:
        for (name, flop, spec), (_, flop_n, spec_n) in zip(cases(M), cases(Mn)):
            k, n, exe = make(spec, target, np, kiln, Builder)
            kn, nn, _ = make(spec_n, target, np, kiln, Builder)
            np.testing.assert_allclose(k()[0], n(), rtol=1e-3, atol=1e-3)
            rows.append((M, Mn, name, (flop, flop_n), (k, kn), (n, nn), exe.groups()[0]["schedule_detail"]))
    times = {}
    for _ in range(args.rounds):
        for r, row in enumerate(rows):
            for side in (0, 1):
                for who, fns in (("kiln", row[4]), ("numpy", row[5])):
                    times.setdefault((r, side, who), []).append(time_round(fns[side], args.repeat_ms))
    print(f"{'case':<16} {'M':>4} {'kiln best/med':>14} {'numpy best/med':>14} | {'M2':>4} {'kiln best/med':>14} {'numpy best/med':>14} | kiln M/M2 best, med")
    for r, (M, Mn, name, flops, _, _, detail) in enumerate(rows):
        cells, med, best = [], [], []
        for side in (0, 1):
            for who in ("kiln", "numpy"):
                t = np.array(times[(r, side, who)])
                g = flops[side] / t / 1e9
                cells.append(f"{g.max():6.0f}/{np.median(g):<6.0f}")  # best (the min time) / median
                if who == "kiln":
                    med.append(np.median(g))
                    best.append(g.max())
        print(f"{name:<16} {M:>4} {cells[0]:>14} {cells[1]:>14} | {Mn:>4} {cells[2]:>14} {cells[3]:>14} | {best[0] / best[1]:.2f}, {med[0] / med[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
