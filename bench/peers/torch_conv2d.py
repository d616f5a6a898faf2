"""Peer for bench/conv2d_bench: times PyTorch's CPU conv2d (fp32, NCHW).

Usage: torch_conv2d.py N C H W K KH KW stride pad threads repeats repeat_ms layout [x.bin w.bin y.bin]

layout "nchw" calls conv2d on contiguous NCHW / OIHW tensors, as most code
does; "channels_last" first converts both (outside the timing) to PyTorch's
channels_last memory format, for which oneDNN picks its blocked NHWC kernels
instead of the plain NCHW path.

With the three paths it reads the input (NCHW) and weights (OIHW) the bench
wrote as raw float32 and writes PyTorch's output there as raw float32, so the
bench checks kiln's result against PyTorch's element by element. Prints one
JSON line: the seconds per call of each repeat (a repeat lasts about
repeat_ms, as kiln's time_evaluator with min_repeat_ms does), the thread
count and whether oneDNN (mkldnn) is enabled.
"""
import json
import sys

import numpy as np
from peer_timing import time_repeats
import torch


def main():
    n, c, h, w, k, kh, kw, stride, pad, threads, repeats, repeat_ms = (int(v) for v in sys.argv[1:13])
    layout = sys.argv[13]
    paths = sys.argv[14:17]
    torch.set_num_threads(threads)
    if paths:
        x = torch.from_numpy(np.fromfile(paths[0], dtype=np.float32).reshape(n, c, h, w))
        wt = torch.from_numpy(np.fromfile(paths[1], dtype=np.float32).reshape(k, c, kh, kw))
    else:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, c, h, w, generator=g)
        wt = torch.randn(k, c, kh, kw, generator=g)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
        wt = wt.contiguous(memory_format=torch.channels_last)
    elif layout != "nchw":
        sys.exit(f"unknown layout {layout!r}: use nchw or channels_last")

    def conv():
        return torch.nn.functional.conv2d(x, wt, stride=stride, padding=pad)

    with torch.no_grad():
        y = conv()
        if paths:
            y.contiguous().numpy().tofile(paths[2])
        # Warm up for at least 30 calls and 0.5 s: here PyTorch's first 10-20
        # calls of a shape run up to 30x slower (fresh memory for its outputs
        # until the allocator settles), and timing them would flatter kiln.
        times = time_repeats(conv, repeats, repeat_ms * 1e-3, min_calls=30, min_seconds=0.5)
    print(json.dumps({"times": times, "layout": layout, "threads": torch.get_num_threads(), "mkldnn": torch.backends.mkldnn.is_available() and torch._C._get_mkldnn_enabled()}))


if __name__ == "__main__":
    main()
