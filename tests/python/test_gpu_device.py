"""The CUDA backend on a real GPU (skipped without a CUDA driver and a GPU; scripts/gpu_check.sh
runs these on a GPU machine): kernels run on the device and agree with numpy and with the GPU
simulator, and NCCL sums over one rank."""
import numpy as np
import pytest

import kiln
from kiln import te

OK, WHY = kiln.gpu.driver_available()
pytestmark = pytest.mark.skipif(not OK, reason=f"no GPU: {WHY}")

from test_gpu_cuda import gemm_schedule, softmax_schedule  # noqa: E402  (the schedules the simulator tests use)

rng = np.random.default_rng(0)


@pytest.mark.parametrize("M,N,K", [(256, 256, 256), (96, 160, 72)])
def test_tiled_gemm_on_the_gpu(M, N, K):
    s, args = gemm_schedule(M, N, K)
    mod = kiln.build(s, args, target="cuda -arch=sm_90")
    a, b = rng.standard_normal((M, K)).astype("float32"), rng.standard_normal((K, N)).astype("float32")
    c = np.zeros((M, N), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_fp16_gemm_on_the_gpu_matches_the_simulator():
    # (bfloat16 has no numpy dtype to pass in; its kernels are checked by NVRTC in test_gpu_cuda.py.)
    s, args = gemm_schedule(64, 64, 64, dtype="float16")
    mod = kiln.build(s, args, target="cuda -arch=sm_90")
    a, b = rng.standard_normal((2, 64, 64)).astype("float16")
    on_gpu, simulated = np.zeros((64, 64), "float32"), np.zeros((64, 64), "float32")
    mod(a, b, on_gpu)
    mod.simulate(a, b, simulated)
    np.testing.assert_allclose(on_gpu, simulated, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tensor_core_gemm_on_the_gpu_follows_the_simulator(dtype):
    import torch
    from test_gpu_tensor_core import inputs, matmul
    M, N, K = 256, 128, 192
    A, B, C = matmul(M, N, K, dtype)
    mod = kiln.build(kiln.gpu.tensor_core_schedule(C, block=(128, 64), warp=(64, 32), k_step=32), [A, B, C], target="cuda -arch=sm_90")
    a, b, ref = inputs(M, N, K, dtype)
    on_gpu, simulated = np.zeros((M, N), "float32"), np.zeros((M, N), "float32")
    mod(kiln.nd.from_dlpack(a), kiln.nd.from_dlpack(b), on_gpu)
    mod.simulate(kiln.nd.from_dlpack(a), kiln.nd.from_dlpack(b), simulated)
    np.testing.assert_allclose(simulated, ref, rtol=1e-5, atol=1e-4)
    # The tensor cores sum 16 products in their own order and precision.
    np.testing.assert_allclose(on_gpu, ref, rtol=1e-3, atol=1e-3)


def test_softmax_rows_on_the_gpu():
    s, args = softmax_schedule(64, 200)
    mod = kiln.build(s, args, target="cuda -arch=sm_90")
    x = rng.standard_normal((64, 200)).astype("float32")
    y = np.zeros_like(x)
    mod(x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_elementwise_bitwise_equal_to_the_simulator():
    A = te.placeholder((1000,), name="A")
    B = te.compute((1000,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=128)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    mod = kiln.build(s, [A, B], target="cuda -arch=sm_90")
    a = rng.standard_normal(1000).astype("float32")
    g, c = np.zeros_like(a), np.zeros_like(a)
    mod(a, g)
    mod.simulate(a, c)
    assert np.array_equal(g, c)


@pytest.mark.parametrize("reducer,C,threads", [("sum", 1000, 128), ("sum", 100, None), ("max", 300, 64), ("sum", 32, None)])
def test_shuffle_row_reduction_bitwise_equal_to_the_simulator(reducer, C, threads):
    # The simulator runs the collective in the CUDA code's tree order, so the bits agree.
    from test_gpu_shuffle import row_reduce
    s, args = row_reduce(64, C, reducer, threads=threads)
    mod = kiln.build(s, args, target="cuda -arch=sm_90")
    a = rng.standard_normal((64, C)).astype("float32")
    g, c = np.zeros(64, "float32"), np.zeros(64, "float32")
    mod(a, g)
    mod.simulate(a, c)
    assert np.array_equal(g, c)


def test_softmax_rows_with_shuffles_on_the_gpu():
    from test_gpu_shuffle import softmax_shuffle
    s, args = softmax_shuffle(64, 500, 128)
    mod = kiln.build(s, args, target="cuda -arch=sm_90")
    x = rng.standard_normal((64, 500)).astype("float32")
    y, sim = np.zeros_like(x), np.zeros_like(x)
    mod(x, y)
    mod.simulate(x, sim)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, sim, rtol=1e-6, atol=1e-7)  # expf may differ from the CPU's exp in the last bit


@pytest.mark.skipif(not hasattr(kiln, "dist"), reason="kiln was built without the distribution pass")
def test_nccl_all_reduce_over_one_rank():
    x = rng.standard_normal(1024).astype("float32")
    np.testing.assert_array_equal(kiln.dist.nccl_all_reduce(x), x)
