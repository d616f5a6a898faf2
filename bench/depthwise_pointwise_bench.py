#!/usr/bin/python3
"""MobileNetV2's inverted residual blocks with the depthwise conv fused into the
1x1 projection after it (fuse_depthwise_pointwise) against the two unfused.

  bench/depthwise_pointwise_bench.py [--target llvm] [--rounds 9] [--repeat 20] [--build DIR]

Each block (torchvision's InvertedResidual, random weights) is compiled twice
in one process, KILN_FUSE_DWPW=1 (fused at every size) and =0, and profiled
round by round, interleaved (exe.profile, --repeat runs a round): the time of
the fused group against the sum of the depthwise group and the 1x1 conv's
group. Ratio: min over min, and the median of per-round ratios (below 1 the
fused group is faster). The default compile fuses where the depthwise input
or output holds 1 MiB or more (the "default" column). Run with
KILN_NUM_THREADS=T for T threads; on a loaded machine give min and median.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# (in, out, stride, expand, side): MobileNetV2's blocks at 224 x 224, one of each shape.
BLOCKS = [(32, 16, 1, 1, 112), (16, 24, 2, 6, 112), (24, 24, 1, 6, 56), (24, 32, 2, 6, 56), (32, 32, 1, 6, 28), (32, 64, 2, 6, 28),
          (64, 64, 1, 6, 14), (96, 96, 1, 6, 14), (96, 160, 2, 6, 14), (160, 160, 1, 6, 7), (160, 320, 1, 6, 7)]


def _pair_time(rows):
    """Seconds of the depthwise group and the projection's group (or the fused group)."""
    return sum(r["seconds"] for r in rows if "Depthwise" in r["name"] or ("ConvNCHWc+Add" in r["name"] and "Clip" not in r["name"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
    import numpy as np
    import torch
    from torchvision.models.mobilenetv2 import InvertedResidual
    from kiln_helpers import compile_torch

    print(f"target {args.target}, threads {os.environ.get('KILN_NUM_THREADS', 'all')}, load {open('/proc/loadavg').read().split()[:3]}")
    print(f"{'block':<24} {'dw out KB':>9} {'fused min/med ms':>17} {'unfused min/med ms':>19} {'ratio min':>9} {'ratio med':>9} default")
    for cin, cout, s, t, side in BLOCKS:
        torch.manual_seed(0)
        net = InvertedResidual(cin, cout, s, t).eval()
        x = torch.randn(1, cin, side, side)
        exes = {}
        for flag in ("1", "0"):
            os.environ["KILN_FUSE_DWPW"] = flag
            exes[flag] = compile_torch(net, x, args.target)
        os.environ.pop("KILN_FUSE_DWPW")
        default = compile_torch(net, x, args.target)
        fused_default = any("Depthwise" in g["ops"] and "+kiln.ConvNCHWc" in g["ops"] for g in default.groups())
        times = {f: [] for f in exes}
        for _ in range(args.rounds):
            for f, e in exes.items():
                times[f].append(_pair_time(e.profile(x.numpy(), repeats=args.repeat)) * 1e3)
        f, u = np.array(times["1"]), np.array(times["0"])
        hidden, out_side = cin * t, side // s
        print(f"{cin}->{cout} s{s} x{t} {side}x{side}".ljust(24) + f" {hidden * out_side * out_side * 4 / 1024:9.0f} {f.min():8.3f}/{np.median(f):.3f} "
              f"{u.min():10.3f}/{np.median(u):.3f} {f.min() / u.min():9.2f} {np.median(f / u):9.2f} {'fused' if fused_default else 'apart'}", flush=True)


if __name__ == "__main__":
    main()
