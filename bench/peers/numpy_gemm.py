"""Peer for bench/gemm_bench: times numpy (OpenBLAS) fp32 matmul.

Usage: numpy_gemm.py M N K repeats. Prints one JSON line with the timings
in seconds of each repeat and the BLAS library numpy uses. The caller sets
OPENBLAS_NUM_THREADS and unsets OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE.
"""
import json
import sys

import numpy as np
from peer_timing import time_repeats


def main():
    m, n, k, repeats = (int(x) for x in sys.argv[1:5])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.empty((m, n), dtype=np.float32)
    times = time_repeats(lambda: np.matmul(a, b, out=c), repeats, min_calls=2)
    info = "unknown"
    try:
        from threadpoolctl import threadpool_info
        info = ";".join(f"{d.get('internal_api')}:{d.get('architecture')}:{d.get('num_threads')}" for d in threadpool_info())
    except ImportError:
        pass
    print(json.dumps({"times": times, "blas": info}))


if __name__ == "__main__":
    main()
