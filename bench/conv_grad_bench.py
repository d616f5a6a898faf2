#!/usr/bin/python3
"""The gradients of blocked convolutions (kiln.ConvGradInputNCHWc, kiln.ConvGradWeightNCHWc) beside PyTorch's.

  bench/conv_grad_bench.py [--threads 2] [--rounds 7] [--repeat 10] [--target llvm] [--batch 8]
                           [--block 0] [--shapes C:K:HW:R:S,...] [--only input|weight] [--packed] [--cpu-time]

Each shape is a ResNet-18 convolution at batch 8 of a 112 x 112 image (the
defaults: the stem's weight gradient, then layer1 to layer4's 3x3 convs,
their stride-2 entries and 1x1 downsamples). kiln: one graph per gradient
op on blocked operands (block --block, 0: two vectors of the target,
or one vector's lanes where C or K is narrower), compiled with the default
schedules; its kernel's time from exe.profile (median of --repeat runs),
which leaves out the copies of the numpy call. PyTorch: torch.nn.grad.conv2d_input /
conv2d_weight (aten's convolution_backward: oneDNN's kernels) on NCHW
tensors (oneDNN limited to AVX2, DNNL_MAX_CPU_ISA, for an AVX2 target), median of --repeat calls. The rounds alternate the two; GFLOP/s
are 2 * N * OH * OW * K * C * R * R over the min and the median of the
rounds' times. --cpu-time: one thread each and the process's CPU time per
whole call (numpy copies in and out included), which on a host shared with
other work compares the kernels where wall time mostly measures the load.
The stem's input gradient is left out (a model never needs it).
"""
import argparse
import os
import statistics
import sys
import time

from conv_shape_args import median_call, parse_conv_shapes

# ResNet-18 at 112 x 112: stem, layer1, layer2 (entry, 1x1 downsample, body), layer3, layer4.
DEFAULT_SHAPES = ("3:64:112:7:2,64:64:28:3:1,64:128:28:3:2,64:128:28:1:2,128:128:14:3:1,128:256:14:3:2,128:256:14:1:2,"
                  "256:256:7:3:1,256:512:7:3:2,256:512:7:1:2,512:512:4:3:1")
QUIET_S = 0.2


def cpu_time_call(fn, repeat):
    """The process's CPU time per call (one thread: time the other processes of a loaded host take is not counted)."""
    t0 = time.process_time()
    for _ in range(repeat):
        fn()
    return (time.process_time() - t0) / repeat


def blocked(np, a, b):
    n, c, h, w = a.shape
    cp = -(-c // b) * b
    full = np.concatenate([a, np.zeros((n, cp - c, h, w), a.dtype)], axis=1)
    return np.ascontiguousarray(full.reshape(n, cp // b, b, h, w).transpose(0, 1, 3, 4, 2))


def block_for(channels, block, lanes):
    if block:
        return block
    return 2 * lanes if channels % (2 * lanes) == 0 else lanes


def bench_shape(kiln, torch, np, shape, args, lanes):
    C, K, HW, R, S = shape
    P = R // 2
    N = args.batch
    OH = (HW + 2 * P - R) // S + 1
    flop = 2.0 * N * OH * OH * K * C * R * R
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, HW, HW)).astype("float32")
    w = rng.standard_normal((K, C, R, R)).astype("float32")
    dy = rng.standard_normal((N, K, OH, OH)).astype("float32")
    cb, kb = block_for(C, args.block, lanes), block_for(K, args.block, lanes)
    a = dict(strides=[S, S], pads=[P] * 4, dilations=[1, 1])
    xt, wt, dyt = torch.tensor(x), torch.tensor(w), torch.tensor(dy)
    xb, dyb = blocked(np, x, cb), blocked(np, dy, kb)
    ops = []
    if args.only != "weight" and C > 3:
        b = kiln.graph.Builder()
        out = b.op("kiln.ConvGradInputNCHWc", b.input("dy", dyb.shape), b.input("w", w.shape), input_shape=list(x.shape), block=cb, **a)
        ops.append(("input", kiln.compile(b.build(out), target=args.target), (dyb, w),
                    lambda: torch.nn.grad.conv2d_input(x.shape, wt, dyt, stride=S, padding=P)))
    if args.only != "input":
        b = kiln.graph.Builder()
        out = b.op("kiln.ConvGradWeightNCHWc", b.input("x", xb.shape), b.input("dy", dyb.shape), weight_shape=list(w.shape), packed=int(args.packed), **a)
        ops.append(("weight", kiln.compile(b.build(out), target=args.target), (xb, dyb),
                    lambda: torch.nn.grad.conv2d_weight(xt, w.shape, dyt, stride=S, padding=P)))
    if args.only is None:
        # The forward conv in the same layout and blocks: what the default tiles reach on this shape under the same load.
        b = kiln.graph.Builder()
        wp = np.zeros((-(-K // kb) * kb, -(-C // cb) * cb, R, R), "float32")
        wp[:K, :C] = w
        wp = np.ascontiguousarray(wp.reshape(-1, kb, wp.shape[1] // cb, cb, R, R).transpose(0, 2, 4, 5, 3, 1))
        out = b.op("kiln.ConvNCHWc", b.input("x", xb.shape), b.input("w", wp.shape), **a)
        ops.insert(0, ("fwd", kiln.compile(b.build(out), target=args.target), (xb, wp),
                       lambda: torch.nn.functional.conv2d(xt, wt, stride=S, padding=P)))
    for kind, exe, feed, peer in ops:
        kt, tt = [], []
        exe(*feed)
        peer()
        for _ in range(args.rounds):
            if args.cpu_time:
                kt.append(cpu_time_call(lambda: exe(*feed), args.repeat))
                with torch.no_grad():
                    tt.append(cpu_time_call(peer, args.repeat))
                continue
            kt.append(sum(r["seconds"] for r in exe.profile(*feed, repeats=args.repeat)))
            time.sleep(QUIET_S)
            with torch.no_grad():
                tt.append(median_call(peer, args.repeat))
            time.sleep(QUIET_S)
        gf = lambda t: flop / t / 1e9  # noqa: E731
        name = f"{kind:6s} {C}->{K} {HW}x{HW} {R}x{R}/s{S} cb{cb} kb{kb}"
        print(f"{name:40s} {gf(min(kt)):8.1f} {gf(statistics.median(kt)):8.1f}   {gf(min(tt)):8.1f} {gf(statistics.median(tt)):8.1f}"
              f"   {statistics.median(tt) / statistics.median(kt):5.2f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="conv_grad_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--block", type=int, default=0, help="the channel block (0: from the target's lanes)")
    ap.add_argument("--only", choices=["input", "weight"], default=None)
    ap.add_argument("--packed", action="store_true", help="the weight gradient in kiln.ConvNCHWc's packed weight layout (packed=1)")
    ap.add_argument("--cpu-time", action="store_true", help="one thread each, timed by the process's CPU time (whole calls, numpy copies "
                    "included): kernel against kernel on a loaded host")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="C:K:HW:R:S items (in, out channels, input side, kernel, stride; padding R // 2)")
    args = ap.parse_args(argv)
    if args.threads < 1 or args.rounds < 1 or args.repeat < 1 or args.batch < 1 or args.block < 0:
        raise SystemExit("conv_grad_bench: --threads, --rounds, --repeat and --batch must be at least 1, --block not negative")
    if args.cpu_time:
        args.threads = 1
    os.environ["KILN_NUM_THREADS"] = str(args.threads)  # read when kiln's thread pool starts
    avx2 = any(t in args.target for t in ("znver3", "avx2", "haswell"))
    if avx2:  # the peer on the same vector ISA: oneDNN's AVX2 kernels (read when torch loads oneDNN)
        os.environ["DNNL_MAX_CPU_ISA"] = os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"
    import numpy as np
    import torch
    import kiln
    torch.set_num_threads(args.threads)
    shapes = parse_conv_shapes(args.shapes, "conv_grad_bench")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
    import blas_choice
    cpu, flags = blas_choice.cpu_info()
    isa = blas_choice.vector_isa(flags)
    lanes = 8 if avx2 else (16 if "512" in isa.lower() else 8)
    print(f"# {cpu} ({isa}); peer: PyTorch {torch.__version__} torch.nn.grad.conv2d_input / conv2d_weight, NCHW, "
          f"torch.set_num_threads({args.threads}){', oneDNN limited to AVX2' if avx2 else ''}, warmed up, in kiln's process; load average {os.getloadavg()[0]:.1f}")
    timing = "CPU time of whole calls" if args.cpu_time else "kiln: exe.profile's kernel time, torch: wall time of calls"
    print(f"target {args.target!r}, batch {args.batch}, {args.threads} threads, {args.rounds} rounds of {args.repeat} runs ({timing}); GFLOP/s min / median")
    print(f"{'gradient':40s} {'kiln kernel':>17s}   {'torch':>17s}   torch/kiln (median time)")
    for shape in shapes:
        bench_shape(kiln, torch, np, shape, args, lanes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
