#!/usr/bin/python3
"""int8 MatMulInteger / QLinearMatMul (u8 x s8, int32 accumulation) against the float32 MatMul of the same shape.

  bench/int8_matmul_bench.py [--target "llvm"] [--sizes 256,512,1024] [--rounds 7] [--reps 5]

Each size compiles the three graphs (default schedules, B a constant), checks the integer results against
numpy exactly, then interleaves them round by round (the machine is shared: best of `rounds`, each the mean
of `reps` calls). Prints GFLOP/s (float) and GOP/s (int8, 2 ops per multiply-add) and the int8/float ratio.
On targets with an int8 dot instruction (AVX-512 VNNI / AVX-VNNI, AArch64 dotprod) use_int8_dot makes both
int8 ops one kernel over byte quads (vpdpbusd / sdot); elsewhere (AVX2) they stay plain integer code.
"""
import argparse
import os
import sys
import time

import numpy as np

import kiln
from kiln.graph import Builder


def compile_op(op, target, a, consts):
    b = Builder()
    vals = [b.input("a", a.shape, str(a.dtype))] + [b.constant(f"c{i}", np.ascontiguousarray(c)) for i, c in enumerate(consts)]
    return kiln.compile(b.build(b.op(op, *vals)), target=target)


def timed(exe, x, reps):
    t = time.perf_counter()
    for _ in range(reps):
        exe(x)
    return (time.perf_counter() - t) / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    p = lambda v, t: np.asarray(v, dtype=t).reshape(())  # noqa: E731
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
    import blas_choice
    m = blas_choice.machine()
    print(f"machine: {m['cpu']}, {m['isa']}, {m['cores']} cores; kiln's int8 ops against its own float32 MatMul (no outside peer yet)")
    print(f"target {args.target!r}; M = N = K; best of {args.rounds} interleaved rounds of {args.reps} calls")
    for n in (int(s) for s in args.sizes.split(",")):
        af, bf = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
        ai, bi = rng.integers(0, 256, (n, n)).astype(np.uint8), rng.integers(-128, 128, (n, n)).astype(np.int8)
        acc = (ai.astype(np.int32) - 128) @ bi.astype(np.int32)
        qparams = [p(0.02, np.float32), p(128, np.uint8), bi, p(0.01, np.float32), p(0, np.int8), p(float(np.abs(acc).max()) * 2e-4 / 100, np.float32),
                   p(128, np.uint8)]
        f32 = compile_op("MatMul", args.target, af, [bf])
        mmi = compile_op("MatMulInteger", args.target, ai, [bi, p(128, np.uint8), p(0, np.int8)])
        qmm = compile_op("QLinearMatMul", args.target, ai, qparams)
        assert np.array_equal(mmi(ai)[0], acc), "MatMulInteger differs from numpy"
        want = np.clip(np.round(acc.astype(np.float32) * (qparams[0] * qparams[3] / qparams[5])) + 128, 0, 255).astype(np.uint8)
        assert np.array_equal(qmm(ai)[0], want), "QLinearMatMul differs from numpy"
        best = {"f32": float("inf"), "mmi": float("inf"), "qmm": float("inf")}
        for _ in range(args.rounds):
            for k, exe, x in (("f32", f32, af), ("mmi", mmi, ai), ("qmm", qmm, ai)):
                best[k] = min(best[k], timed(exe, x, args.reps))
        ops = 2.0 * n ** 3
        print(f"{n:5d}: float32 MatMul {ops / best['f32'] / 1e9:7.1f} GFLOP/s   MatMulInteger {ops / best['mmi'] / 1e9:7.1f} GOP/s "
              f"({best['f32'] / best['mmi']:.2f}x)   QLinearMatMul {ops / best['qmm'] / 1e9:7.1f} GOP/s ({best['f32'] / best['qmm']:.2f}x)")


if __name__ == "__main__":
    main()
