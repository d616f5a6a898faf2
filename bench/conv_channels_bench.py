#!/usr/bin/python3
"""Convolutions whose channels no vector divides, beside their padded neighbours, through kiln's graph compiler and PyTorch.

  bench/conv_channels_bench.py [--threads 2] [--rounds 7] [--repeat 20] [--target llvm] [--shapes C:K:HW:R:S[:P],...]

Each shape is Conv2d(C, K, R, stride S, padding P (R//2 if not given)) + bias + ReLU on a
1 x C x HW x HW input (random weights), exported to ONNX and compiled by
kiln.compile (blocked layout, default schedules). Per round: kiln's conv
group alone (exe.profile, median of --repeat runs: the model's view, where
the input and output stay blocked between convolutions), kiln's whole call
(with the NCHW layout changes at the graph's edges) and PyTorch's eager call
(median of --repeat calls), interleaved. GFLOP/s count the true channels
(a 58-channel conv padded to 64 is credited 58's work); min and median are
over the rounds (min: best round's time). ShuffleNetV2's 1x1 convs (58, 116,
232 channels at 28, 14, 7) sit beside 64, 128 and 256; the stems are
MobileNet/ShuffleNet's 3 -> 24 3x3 and ResNet's 3 -> 64 7x7, stride 2.
"""
import argparse
import io
import os
import statistics
import sys
import time

from conv_shape_args import median_call, parse_conv_shapes

DEFAULT_SHAPES = ("58:58:28:1:1,64:64:28:1:1,116:116:14:1:1,128:128:14:1:1,232:232:7:1:1,256:256:7:1:1,"
                  "58:58:28:3:1,64:64:28:3:1,116:116:14:3:2,128:128:14:3:2,3:24:224:3:2,3:64:224:7:2")


# Between the two sides: the other's idle threads stop spinning (kiln's pool
# after microseconds, OpenMP's after up to 200 ms) before the timing starts.
QUIET_S = 0.25


def bench_shape(kiln, torch, np, shape, args):
    C, K, HW, R, S, P = shape
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(C, K, R, S, P), torch.nn.ReLU()).eval()
    x = torch.randn(1, C, HW, HW)
    buf = io.BytesIO()
    torch.onnx.export(net, x, buf, input_names=["input"], output_names=["output"], opset_version=13)
    exe = kiln.compile(kiln.graph.from_onnx(buf.getvalue(), shapes={"input": tuple(x.shape)}), target=args.target)
    xn = x.numpy()
    with torch.no_grad():
        ref = net(x).numpy()
    (y,) = exe(xn)
    err = float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))
    OH = (HW + 2 * P - R) // S + 1
    flop = 2.0 * K * C * R * R * OH * OH
    conv_t, call_t, torch_t = [], [], []
    for _ in range(args.rounds):
        rows = exe.profile(xn, repeats=args.repeat)
        conv_t.append(sum(r["seconds"] for r in rows if "Conv" in r["name"] or "Winograd" in r["name"]))
        call_t.append(median_call(lambda: exe(xn), args.repeat))
        time.sleep(QUIET_S)
        with torch.no_grad():
            torch_t.append(median_call(lambda: net(x), args.repeat))
        time.sleep(QUIET_S)
    gf = lambda t: flop / t / 1e9  # noqa: E731
    name = f"{C}->{K} {HW}x{HW} {R}x{R}/s{S}" + ("" if P == R // 2 else f"/p{P}") + f" ->{OH}"
    print(f"{name:32s} {gf(min(conv_t)):8.1f} {gf(statistics.median(conv_t)):8.1f}   {gf(min(call_t)):8.1f} {gf(statistics.median(call_t)):8.1f}"
          f"   {gf(min(torch_t)):8.1f} {gf(statistics.median(torch_t)):8.1f}   {err:.1e}", flush=True)


def main(argv=None, prog="conv_channels_bench.py", doc=__doc__, default_shapes=DEFAULT_SHAPES):
    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--shapes", default=default_shapes, help="C:K:HW:R:S[:P] items (in, out channels, image side, kernel, stride, padding)")
    args = ap.parse_args(argv)
    if args.threads < 1 or args.rounds < 1 or args.repeat < 1:
        raise SystemExit("conv_channels_bench: --threads, --rounds and --repeat must be at least 1")
    os.environ["KILN_NUM_THREADS"] = str(args.threads)  # read when kiln's thread pool starts
    import numpy as np
    import torch
    import kiln
    torch.set_num_threads(args.threads)
    shapes = parse_conv_shapes(args.shapes, "conv_channels_bench", with_padding=True)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
    import blas_choice
    cpu, flags = blas_choice.cpu_info()
    print(f"# {cpu} ({blas_choice.vector_isa(flags)}); peer: PyTorch {torch.__version__} eager, NCHW, torch.set_num_threads({args.threads}), "
          f"warmed up, in kiln's process")
    print(f"target {args.target!r}, {args.threads} threads, {args.rounds} rounds of {args.repeat} runs; GFLOP/s of the true channels, min / median")
    print(f"{'conv':32s} {'kiln conv group':>17s}   {'kiln whole call':>17s}   {'torch eager':>17s}   rel.err")
    for shape in shapes:
        bench_shape(kiln, torch, np, shape, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
