"""Peer for the fused dense + bias + GELU workload: numpy (OpenBLAS) or PyTorch.

Usage: dense_gelu.py M N K threads repeats [numpy|torch]

Computes Y = gelu(A @ B + bias) with A [M, K], B [K, N], bias [N] in float32,
GELU in its erf form (as kiln's ops::gelu): numpy does the matmul into a
preallocated output and the elementwise steps in place (scipy's erf when
available); PyTorch runs addmm then gelu. Prints one JSON line with the
seconds per call of each repeat. The caller sets OPENBLAS_NUM_THREADS.
"""
import json
import sys

import numpy as np
from peer_timing import time_repeats


def numpy_impl(m, n, k):
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy is a Debian package here
        erf = np.vectorize(__import__("math").erf, otypes=[np.float32])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    y = np.empty((m, n), dtype=np.float32)
    t = np.empty((m, n), dtype=np.float32)

    def run():
        np.matmul(a, b, out=y)
        np.add(y, bias, out=y)
        np.multiply(y, np.float32(0.70710678), out=t)
        erf(t, out=t)
        np.add(t, np.float32(1), out=t)
        np.multiply(y, t, out=y)
        np.multiply(y, np.float32(0.5), out=y)
    return run


def torch_impl(m, n, k, threads):
    import torch
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    bias = torch.randn(n, generator=g)

    def run():
        with torch.no_grad():
            return torch.nn.functional.gelu(torch.addmm(bias, a, b))
    return run


def main():
    m, n, k, threads, repeats = (int(v) for v in sys.argv[1:6])
    impl = sys.argv[6] if len(sys.argv) > 6 else "numpy"
    run = torch_impl(m, n, k, threads) if impl == "torch" else numpy_impl(m, n, k)
    times = time_repeats(run, repeats, min_calls=2)
    print(json.dumps({"times": times, "impl": impl}))


if __name__ == "__main__":
    main()
