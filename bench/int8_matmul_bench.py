#!/usr/bin/python3
"""int8 MatMulInteger / QLinearMatMul (u8 x s8, int32 accumulation) and the bfloat16 MatMul against the float32 MatMul of the same shape.

  bench/int8_matmul_bench.py [--target "llvm"] [--sizes 256,512,1024] [--rounds 7] [--reps 5] [--no-bf16] [--amx both|on|off]

Each size compiles the graphs (default schedules, B a constant), checks the integer results against numpy
exactly and the bfloat16 one within bfloat16's rounding, then interleaves them round by round (the machine is
shared: best and median of `rounds`, each the mean of `reps` calls). Prints GFLOP/s (float) and GOP/s (int8,
2 ops per multiply-add) and each one's ratio to float32 (by the best times).
On targets with an int8 dot instruction (AVX-512 VNNI / AVX-VNNI, AArch64 dotprod) use_int8_dot makes both
int8 ops one kernel over byte quads (vpdpbusd / sdot); elsewhere (AVX2) they stay plain integer code. Where the
target has AMX the int8 and bfloat16 kernels run on AMX tiles (tdpbusd / tdpbf16ps); --amx both (the default
there) also times them with AMX switched off in the target (-mattr=-amx-tile: vpdpbusd / vdpbf16ps), in the
same rounds.
"""
import argparse
import os
import statistics
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


def stats(times):
    return min(times), statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-bf16", action="store_true", help="leave out the bfloat16 MatMul")
    ap.add_argument("--amx", choices=["both", "on", "off"], default="both", help="where the target has AMX: time with it, without it (-mattr=-amx-tile) or both")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    p = lambda v, t: np.asarray(v, dtype=t).reshape(())  # noqa: E731
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
    import blas_choice
    m = blas_choice.machine()
    t = kiln.Target(args.target)
    amx = t.has_feature("amx-tile")
    targets = {"": args.target}
    if amx and args.amx != "on":
        # The same features less AMX (the host's CPU name may imply fewer: a VM's Sapphire Rapids reads as rocketlake).
        feats = ",".join(["+" + f for f in t.features if not f.startswith("amx")] + ["-amx-tile"])
        no_amx = f"llvm -mcpu={t.mcpu} -num-cores={t.num_cores} -mattr={feats}"
        targets = {" amx": args.target, " no-amx": no_amx} if args.amx == "both" else {" no-amx": no_amx}
    print(f"machine: {m['cpu']}, {m['isa']}, {m['cores']} cores, AMX in target: {amx}; kiln's int8 and bf16 ops against its own float32 MatMul")
    print(f"target {args.target!r}; M = N = K; min / median of {args.rounds} interleaved rounds of {args.reps} calls; load {os.getloadavg()[0]:.1f}")
    for n in (int(s) for s in args.sizes.split(",")):
        af, bf = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
        ai, bi = rng.integers(0, 256, (n, n)).astype(np.uint8), rng.integers(-128, 128, (n, n)).astype(np.int8)
        acc = (ai.astype(np.int32) - 128) @ bi.astype(np.int32)
        qparams = [p(0.02, np.float32), p(128, np.uint8), bi, p(0.01, np.float32), p(0, np.int8), p(float(np.abs(acc).max()) * 2e-4 / 100, np.float32),
                   p(128, np.uint8)]
        want = np.clip(np.round(acc.astype(np.float32) * (qparams[0] * qparams[3] / qparams[5])) + 128, 0, 255).astype(np.uint8)
        runs = [("float32 MatMul", compile_op("MatMul", args.target, af, [bf]), af)]
        for tag, target in targets.items():
            mmi = compile_op("MatMulInteger", target, ai, [bi, p(128, np.uint8), p(0, np.int8)])
            qmm = compile_op("QLinearMatMul", target, ai, qparams)
            assert np.array_equal(mmi(ai)[0], acc), "MatMulInteger differs from numpy"
            assert np.array_equal(qmm(ai)[0], want), "QLinearMatMul differs from numpy"
            runs += [("MatMulInteger" + tag, mmi, ai), ("QLinearMatMul" + tag, qmm, ai)]
            if not args.no_bf16:
                b = Builder()
                bfx = kiln.compile(b.build(b.op("MatMul", b.input("a", af.shape, "float32"), b.constant("w", bf))), target=target, precision="bfloat16")
                got, ref = bfx(af)[0], af.astype(np.float64) @ bf.astype(np.float64)
                err = float(np.abs(got - ref).max() / np.abs(ref).max())
                assert err < 2e-2, f"bfloat16 MatMul's relative error {err}"
                runs.append(("bf16 MatMul" + tag, bfx, af))
        times = {name: [] for name, _, _ in runs}
        for _ in range(args.rounds):
            for name, exe, x in runs:
                times[name].append(timed(exe, x, args.reps))
        ops = 2.0 * n ** 3
        f32_best = min(times["float32 MatMul"])
        for name, _, _ in runs:
            lo, med = stats(times[name])
            unit = "GFLOP/s" if "float" in name or "bf16" in name else "GOP/s  "
            print(f"{n:5d}: {name:24s} {ops / lo / 1e9:7.1f} {unit} (median {ops / med / 1e9:7.1f})  {f32_best / lo:5.2f}x float32")


if __name__ == "__main__":
    main()
