"""Command-line helpers shared by the convolution benchmarks (conv_channels_bench, conv_grad_bench).

A shape is written C:K:HW:R:S -- input channels, output channels, image side,
kernel side, stride -- and, where the benchmark takes it, a sixth field for the
padding (default R // 2, "same" for odd kernels at stride 1).
"""
import statistics
import time


def parse_conv_shapes(text, prog, with_padding=False):
    """The shapes of a comma-separated --shapes value, as tuples (C, K, HW, R, S[, P])."""
    counts = (5, 6) if with_padding else (5,)
    form = "C:K:HW:R:S[:P] (five integers, a sixth for the padding)" if with_padding else "C:K:HW:R:S (five integers)"
    out = []
    for item in text.split(","):
        try:
            values = [int(v) for v in item.split(":")]
        except ValueError:
            values = []
        if len(values) not in counts:
            raise SystemExit(f"{prog}: shape {item!r} is not {form}")
        if with_padding and len(values) == 5:
            values.append(values[3] // 2)
        out.append(tuple(values))
    return out


def median_call(fn, repeat):
    """The median wall time of `repeat` calls of fn."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
