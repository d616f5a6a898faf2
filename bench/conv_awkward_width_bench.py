#!/usr/bin/python3
"""Convolutions whose output side has no good divisor for the register tile, beside their neighbours that have one, through kiln and PyTorch.

  bench/conv_awkward_width_bench.py [--threads 2] [--rounds 7] [--repeat 20] [--target llvm] [--shapes C:K:HW:R:S[:P],...]

The rows and columns are conv_channels_bench.py's (kiln's conv group, kiln's
whole call, PyTorch eager; GFLOP/s min / median over the rounds). Shapes:
SqueezeNet 1.0's stem, 3 -> 96 7x7 stride 2 unpadded (109 x 109 out, 109 is
prime) beside the same conv padded by 3 (112 x 112); its Fire modules'
expand 3x3 convs at 55, 27 and 13 beside 56, 28 and 14 (Winograd in kiln)
and their 1x1 squeeze/expand convs at 55, 27 and 13 beside 56, 28, 14.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conv_channels_bench  # noqa: E402

DEFAULT_SHAPES = ("3:96:224:7:2:0,3:96:224:7:2:3,"
                  "16:64:55:3:1,16:64:56:3:1,32:128:27:3:1,32:128:28:3:1,64:256:13:3:1,64:256:14:3:1,"
                  "16:64:55:1:1,16:64:56:1:1,256:32:27:1:1,256:32:28:1:1,64:256:13:1:1,64:256:14:1:1")

if __name__ == "__main__":
    sys.exit(conv_channels_bench.main(prog="conv_awkward_width_bench.py", doc=__doc__, default_shapes=DEFAULT_SHAPES))
