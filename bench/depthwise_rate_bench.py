#!/usr/bin/python3
"""Depthwise convolutions' rate against the machine's memory bandwidth.

  bench/depthwise_rate_bench.py [--threads 1] [--rounds 7] [--repeat 10] [--target llvm]
                                [--shapes C:HW:K:S[:relu6|silu],...] [--triad-kib 256,1024,...] [--build DIR]

A depthwise conv does 2 K^2 flops per output element and moves about 8
bytes per element (its input read, its output written), so it runs at the
bandwidth of the cache level its input and output sit in, not at the FMA
rate. This bench gives that bandwidth and the rate of each depthwise conv
of MobileNetV2 (3x3, ReLU6) and EfficientNet-B0 (3x3 and 5x5, SiLU) beside it:

- triad: a[i] = b[i] + 1.5 * c[i] over float32 arrays of a footprint
  (the three arrays together) from 256 KiB to 64 MiB, compiled by kiln for
  the target (its default schedule: vectorized and parallel over T
  threads), the group's time by exe.profile; GB/s count 12 bytes an element
  (STREAM's convention: the write's read-for-ownership is not counted).
- each conv: Conv2d(C, C, K, stride S, groups C) + bias + activation on a
  1 x C x HW x HW input through kiln.compile (blocked layout, default
  schedules); its group's time alone (exe.profile: the input already
  blocked, as between a model's convolutions). GB/s count the bytes that
  must move once: input, output, weights and bias. "of triad" divides that
  by the triad's rate at the footprint of input + output (the level it
  works from); the rest of a depthwise group's time is what a faster
  schedule could still win, and what fusing it with the 1x1 conv before or
  after it (so its input or output never leaves the cache) could save.

Times are min and median over --rounds rounds (each the median of --repeat
profiled runs); on a loaded machine give both.
"""
import argparse
import io
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (C, HW, K, S, activation): MobileNetV2's depthwise layers, then EfficientNet-B0's.
DEFAULT_SHAPES = ("32:112:3:1:relu6,96:112:3:2:relu6,144:56:3:1:relu6,144:56:3:2:relu6,192:28:3:1:relu6,192:28:3:2:relu6,"
                  "384:14:3:1:relu6,576:14:3:1:relu6,576:14:3:2:relu6,960:7:3:1:relu6,"
                  "32:112:3:1:silu,96:112:3:2:silu,144:56:5:2:silu,240:28:5:1:silu,240:28:3:2:silu,480:14:3:1:silu,480:14:5:1:silu,"
                  "672:14:5:1:silu,672:14:5:2:silu,1152:7:5:1:silu,1152:7:3:1:silu")
DEFAULT_TRIAD_KIB = "256,512,1024,2048,4096,8192,16384,65536"


def parse_shapes(text):
    out = []
    for item in text.split(","):
        f = item.split(":")
        try:
            C, HW, K, S = (int(v) for v in f[:4])
            act = f[4] if len(f) > 4 else "relu6"
            if len(f) not in (4, 5) or act not in ("relu6", "silu") or min(C, HW, K, S) < 1:
                raise ValueError
        except ValueError:
            raise SystemExit(f"depthwise_rate_bench: shape {item!r} is not C:HW:K:S[:relu6|silu] (positive integers)")
        out.append((C, HW, K, S, act))
    return out


def import_kiln(build):
    try:
        import kiln
    except ImportError:
        sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(build, "python")]
        import kiln
    return kiln


def group_times(exe, x, rounds, repeat, pick):
    """Per round, the median over `repeat` profiled runs of the groups whose name `pick` accepts (summed)."""
    out = []
    for _ in range(rounds):
        runs = [sum(r["seconds"] for r in exe.profile(*x, repeats=1) if pick(r["name"])) for _ in range(repeat)]
        out.append(statistics.median(runs))
    return out


def triad(kiln, np, onnx, kib, args):
    """(GB/s best, GB/s median) of a[i] = b[i] + 1.5 c[i] with three arrays of kib KiB together."""
    from onnx import TensorProto, helper
    n = max(1024, kib * 1024 // 12 // 1024 * 1024)
    shape = [n // 1024, 1024]
    g = helper.make_graph([helper.make_node("Mul", ["c", "s"], ["cs"]), helper.make_node("Add", ["b", "cs"], ["a"])], "triad",
                          [helper.make_tensor_value_info(v, TensorProto.FLOAT, shape) for v in ("b", "c")],
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, shape)],
                          [helper.make_tensor("s", TensorProto.FLOAT, [], [1.5])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    exe = kiln.compile(kiln.graph.from_onnx(model.SerializeToString()), target=args.target, quiet=True)
    b, c = np.ones(shape, "float32"), np.full(shape, 2.0, "float32")
    (a,) = exe(b, c)
    if not np.allclose(a, 4.0):
        raise SystemExit("depthwise_rate_bench: kiln's triad computed a wrong result")
    t = group_times(exe, (b, c), args.rounds, args.repeat, lambda name: "layout" not in name.lower())
    return 12.0 * n / min(t) / 1e9, 12.0 * n / statistics.median(t) / 1e9, 12 * n


def bandwidth_at(levels, footprint):
    """The triad's best GB/s at the smallest measured footprint that holds `footprint` bytes (the largest otherwise)."""
    for size, best, _ in levels:
        if size >= footprint:
            return best
    return levels[-1][1]


def depthwise(kiln, np, torch, shape, args, levels):
    C, HW, K, S, act = shape
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(C, C, K, S, K // 2, groups=C), torch.nn.ReLU6() if act == "relu6" else torch.nn.SiLU()).eval()
    x = torch.randn(1, C, HW, HW)
    buf = io.BytesIO()
    torch.onnx.export(net, x, buf, input_names=["input"], output_names=["output"], opset_version=13)
    exe = kiln.compile(kiln.graph.from_onnx(buf.getvalue(), shapes={"input": tuple(x.shape)}), target=args.target, quiet=True)
    xn = x.numpy()
    with torch.no_grad():
        ref = net(x).numpy()
    (y,) = exe(xn)
    err = float(np.max(np.abs(y - ref)) / max(1e-30, float(np.max(np.abs(ref)))))
    t = group_times(exe, (xn,), args.rounds, args.repeat, lambda name: "Depthwise" in name)
    OH = (HW + 2 * (K // 2) - K) // S + 1
    moved = 4 * (C * HW * HW + C * OH * OH + C * K * K + C)
    flop = 2.0 * C * OH * OH * K * K
    best, med = min(t), statistics.median(t)
    triad_gbs = bandwidth_at(levels, 4 * (C * HW * HW + C * OH * OH))
    name = f"{C}@{HW}x{HW} {K}x{K}/s{S} {act}"
    print(f"{name:28s} {best * 1e6:8.1f} {med * 1e6:8.1f}   {moved / best / 1e9:6.1f} {moved / med / 1e9:6.1f}   {moved / 2**20:6.2f}"
          f"   {triad_gbs:6.1f}  {moved / best / 1e9 / triad_gbs:5.2f}   {flop / best / 1e9:6.1f}   {err:.1e}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="C:HW:K:S[:relu6|silu] items (channels, image side, kernel, stride, activation)")
    ap.add_argument("--triad-kib", default=DEFAULT_TRIAD_KIB, help="footprints of the triad's three arrays together, KiB")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args(argv)
    if args.threads < 1 or args.rounds < 1 or args.repeat < 1:
        raise SystemExit("depthwise_rate_bench: --threads, --rounds and --repeat must be at least 1")
    shapes = parse_shapes(args.shapes)
    try:
        sizes = sorted(int(v) for v in args.triad_kib.split(","))
    except ValueError:
        raise SystemExit(f"depthwise_rate_bench: --triad-kib {args.triad_kib!r} is not a list of integers")
    os.environ["KILN_NUM_THREADS"] = str(args.threads)  # read when kiln's thread pool starts
    if "-num-cores" not in args.target:
        args.target += f" -num-cores={args.threads}"
    import numpy as np
    import onnx
    import torch
    kiln = import_kiln(args.build)
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(HERE, "peers"))
    import blas_choice
    cpu, flags = blas_choice.cpu_info()
    print(f"# {cpu} ({blas_choice.vector_isa(flags)}); target {args.target!r}, {args.threads} thread(s); "
          f"{args.rounds} rounds of the median of {args.repeat} profiled runs; min / median")
    levels = []
    print(f"{'triad footprint':28s} {'GB/s':>17s}")
    for kib in sizes:
        best, med, size = triad(kiln, np, onnx, kib, args)
        levels.append((size, best, med))
        print(f"{kib:>10d} KiB{'':14s} {best:8.1f} {med:8.1f}", flush=True)
    print(f"{'depthwise conv':28s} {'us (min, med)':>17s}   {'GB/s moved':>13s}   {'MiB':>6s}   {'triad':>6s}  {'of it':>5s}   {'GFLOP/s':>7s}   rel.err")
    for shape in shapes:
        depthwise(kiln, np, torch, shape, args, levels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
