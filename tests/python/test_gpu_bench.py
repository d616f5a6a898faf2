"""bench/gpu_bench.py, the GPU benchmark table of scripts/gpu_check.sh: on a
machine without a GPU it says why and exits 2 (gpu_check.sh tells "no GPU"
from a failure by that code); CudaModule.time says the same in Python."""
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln import te

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HAS_GPU, WHY = kiln.gpu.driver_available()


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU: gpu_check.sh runs the table")
def test_gpu_bench_without_a_gpu_exits_2_and_says_why():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "python"), os.path.join(ROOT, "build", "python")]))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_bench.py"), "--rounds", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no GPU here" in r.stderr and WHY in r.stderr


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_timing_a_kernel_without_a_gpu_says_so():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = kiln.gpu.default_schedule([A, B], "cuda -arch=sm_90")
    mod = kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)
    with pytest.raises(kiln.KilnError, match="no CUDA driver"):
        mod.time(np.ones(64, "float32"), np.zeros(64, "float32"))
