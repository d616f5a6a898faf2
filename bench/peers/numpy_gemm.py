"""Peer for bench/gemm_bench: times numpy (OpenBLAS) fp32 matmul.

Usage: numpy_gemm.py M N K repeats. Prints one JSON line with the timings
in seconds of each repeat and the BLAS library numpy uses. The caller sets
OPENBLAS_NUM_THREADS and unsets OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE.
"""
import json
import sys
import time

import numpy as np


def main():
    m, n, k, repeats = (int(x) for x in sys.argv[1:5])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.empty((m, n), dtype=np.float32)
    np.matmul(a, b, out=c)
    # Enough calls per repeat to last ~50 ms, as kiln's time_evaluator does.
    t0 = time.perf_counter()
    np.matmul(a, b, out=c)
    one = max(time.perf_counter() - t0, 1e-7)
    number = max(1, int(0.05 / one))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            np.matmul(a, b, out=c)
        times.append((time.perf_counter() - t0) / number)
    info = "unknown"
    try:
        from threadpoolctl import threadpool_info
        info = ";".join(f"{d.get('internal_api')}:{d.get('architecture')}:{d.get('num_threads')}" for d in threadpool_info())
    except ImportError:
        pass
    print(json.dumps({"times": times, "blas": info}))


if __name__ == "__main__":
    main()
