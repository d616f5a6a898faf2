"""The CUDA backend without a GPU: schedules written with the ordinary
primitives are lowered for the GPU, their CUDA C is compiled by NVRTC for
sm_80 and sm_90 (skipped when NVRTC cannot be loaded), and they run in the
GPU simulator against numpy. A missing barrier is reported as a race, an
unbound loop by name, and calling a kernel without a driver says so."""
import numpy as np
import pytest

import kiln
from kiln import te

ARCHS = ["cuda -arch=sm_80", "cuda -arch=sm_90"]
NVRTC_OK, NVRTC_WHY = kiln.gpu.nvrtc_available()
rng = np.random.default_rng(0)


def nvrtc_compiles(s, args, name="main"):
    """Compiles the kernel for every architecture; skips when NVRTC is missing."""
    if not NVRTC_OK:
        pytest.skip(f"NVRTC cannot be loaded: {NVRTC_WHY}")
    for arch in ARCHS:
        mod = kiln.build(s, args, target=arch, name=name)
        assert mod.cubin[:4] == b"\x7fELF", arch
    return mod


def gemm_schedule(M, N, K, tile=16, thread_tile=2, kstep=8, dtype="float32"):
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    if dtype == "float32":
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    else:  # fp16/bf16 inputs, fp32 accumulation
        C = te.compute((M, N), lambda i, j: te.sum(te.cast(A[i, k], "float32") * te.cast(B[k, j], "float32"), axis=k), name="C")
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    AS = s.cache_read(A, "shared", [CL])
    BS = s.cache_read(B, "shared", [CL])
    i, j = s[C].op.axis
    by, yi = s[C].split(i, factor=tile)
    bx, xi = s[C].split(j, factor=tile)
    ty, yii = s[C].split(yi, factor=thread_tile)
    tx, xii = s[C].split(xi, factor=thread_tile)
    s[C].reorder(by, bx, ty, tx, yii, xii)
    for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[C].bind(ax, tag)
    s[CL].compute_at(s[C], bx)
    ci, cj = s[CL].op.axis
    (ck,) = s[CL].op.reduce_axis
    cty, cyi = s[CL].split(ci, factor=thread_tile)
    ctx, cxi = s[CL].split(cj, factor=thread_tile)
    ko, ki = s[CL].split(ck, factor=kstep)
    s[CL].reorder(ko, cty, ctx, ki, cyi, cxi)
    s[CL].unroll(cxi)
    s[CL].bind(cty, "threadIdx.y")
    s[CL].bind(ctx, "threadIdx.x")
    threads = tile // thread_tile
    for S in (AS, BS):
        s[S].compute_at(s[CL], ko)
        f = s[S].fuse(*s[S].op.axis)
        fo, fi = s[S].split(f, factor=threads * threads)
        fy, fx = s[S].split(fi, factor=threads)
        s[S].reorder(fy, fx, fo)
        s[S].bind(fy, "threadIdx.y")
        s[S].bind(fx, "threadIdx.x")
    return s, [A, B, C]


def softmax_schedule(R, Cn, threads=32):
    X = te.placeholder((R, Cn), name="X")
    k = te.reduce_axis((0, Cn), name="k")
    Mx = te.compute((R,), lambda i: te.max(X[i, k], axis=k), name="Mx")
    E = te.compute((R, Cn), lambda i, j: te.exp(X[i, j] - Mx[i]), name="E")
    k2 = te.reduce_axis((0, Cn), name="k2")
    S = te.compute((R,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Y = te.compute((R, Cn), lambda i, j: E[i, j] / S[i], name="Y")
    s = te.create_schedule(Y)
    i, j = s[Y].op.axis
    s[Y].bind(i, "blockIdx.x")
    _, ji = s[Y].split(j, factor=threads)
    s[Y].bind(ji, "threadIdx.x")
    for st in (Mx, E, S):
        s[st].compute_at(s[Y], i)
    _, eji = s[E].split(s[E].op.axis[1], factor=threads)
    s[E].bind(eji, "threadIdx.x")
    return s, [X, Y]


@pytest.mark.parametrize("M,N,K", [(64, 64, 64), (32, 48, 24)])
def test_tiled_gemm_simulates_and_compiles(M, N, K):
    s, args = gemm_schedule(M, N, K)
    mod = kiln.build(s, args, target="cuda -arch=sm_90")
    src = mod.get_source()
    assert src.count("__syncthreads();") == 2
    assert src.count("__shared__") == 2 and "#pragma unroll" in src
    assert "float C_local[4];" in src  # the block's accumulator tile, one thread's 2x2 part
    assert mod.launch["grid"] == (N // 16, M // 16, 1) and mod.launch["block"] == (8, 8, 1)
    a = rng.standard_normal((M, K), dtype="float32")
    b = rng.standard_normal((K, N), dtype="float32")
    c = np.full((M, N), np.nan, "float32")
    run = mod.simulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert run.blocks == (M // 16) * (N // 16) and run.barriers == run.blocks * 2 * (K // 8)
    nvrtc_compiles(s, args)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_gemm_accumulates_in_fp32(dtype):
    M = N = K = 32
    s, args = gemm_schedule(M, N, K, dtype=dtype)
    mod = kiln.gpu.build(s, args, "cuda -arch=sm_80", compile=False)
    ctype = "__half" if dtype == "float16" else "__nv_bfloat16"
    assert f"__shared__ __align__(16) {ctype} A_shared[" in mod.get_source()
    a = rng.standard_normal((M, K), dtype="float32")
    b = rng.standard_normal((K, N), dtype="float32")
    if dtype == "float16":
        a, b = a.astype("float16"), b.astype("float16")
        ref = a.astype("float32") @ b.astype("float32")
        c = np.zeros((M, N), "float32")
        mod.simulate(a, b, c)
        np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3)
    nvrtc_compiles(s, args)


def test_gemm_without_barriers_is_a_race():
    s, args = gemm_schedule(32, 32, 16)
    f = kiln.gpu.lower(s, args, insert_barriers=False)
    assert "sync_threads" not in str(f)
    assert str(kiln.gpu.lower(s, args)).count("sync_threads") == 2
    mod = kiln.gpu.build(s, args, "cuda -arch=sm_80", insert_barriers=False, compile=False)
    a, b = np.ones((32, 16), "float32"), np.ones((16, 32), "float32")
    with pytest.raises(kiln.KilnError, match=r"data race on shared buffer '[AB]\.shared'.*since the last barrier"):
        mod.simulate(a, b, np.zeros((32, 32), "float32"))


@pytest.mark.parametrize("n", [1000, 256, 7])
def test_elementwise_with_guard(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.tanh(A[i]) + te.erf(A[i]) * te.exp(A[i]), name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=128)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    mod = kiln.build(s, [A, B], target="cuda -arch=sm_90")
    src = mod.get_source()
    # The bounds guard only where the split does not divide (7 fits one block of 7 threads).
    assert ("< %d)" % n in src) == (n > 128 and n % 128 != 0)
    for fn in ("tanhf(", "erff(", "expf("):
        assert fn in src
    a = rng.standard_normal(n, dtype="float32")
    b = np.zeros(n, "float32")
    mod.simulate(a, b)
    import math
    want = np.array([math.tanh(x) + math.erf(x) * math.exp(x) for x in a.astype("float64")], "float32")
    np.testing.assert_allclose(b, want, rtol=1e-5, atol=1e-6)
    nvrtc_compiles(s, [A, B])


def test_softmax_rows():
    R, Cn = 5, 70
    s, args = softmax_schedule(R, Cn)
    mod = kiln.build(s, args, target="cuda -arch=sm_80")
    x = rng.standard_normal((R, Cn), dtype="float32") * 4
    y = np.zeros_like(x)
    run = mod.simulate(x, y)
    assert run.barriers == 3 * R  # each barrier runs once per block: none inside the loops
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    ir = str(mod.func)
    # After the max (thread 0) before exp reads it, after exp before the sum, after the sum before the division.
    assert ir.count("sync_threads") == 3, ir
    # Max and sum are serial loops done by thread 0.
    assert "if (threadIdx.x == 0)" in mod.get_source()
    nvrtc_compiles(s, args)


def test_softmax_without_barriers_is_a_race():
    s, args = softmax_schedule(3, 40)
    mod = kiln.gpu.build(s, args, "cuda -arch=sm_90", insert_barriers=False, compile=False)
    with pytest.raises(kiln.KilnError, match="data race on shared buffer 'Mx'"):
        mod.simulate(np.ones((3, 40), "float32"), np.zeros((3, 40), "float32"))


def test_reduction_bound_to_threads_reduces_across_them():
    # Every thread of the block updates the same output element: lowered to
    # per-thread partials and a warp shuffle reduction (test_gpu_shuffle.py),
    # no longer a race.
    A = te.placeholder((4, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    s[B].bind(B.op.axis[0], "blockIdx.x")
    s[B].bind(B.op.reduce_axis[0], "threadIdx.x")
    mod = kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)
    assert "__shfl_down_sync" in mod.get_source()
    a = rng.standard_normal((4, 32), dtype="float32")
    b = np.zeros(4, "float32")
    mod.simulate(a, b)
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5, atol=1e-5)


def test_unbound_loop_is_named():
    A = te.placeholder((16, 8), name="A")
    B = te.compute((16, 8), lambda i, j: A[i, j] * 2, name="B")
    s = te.create_schedule(B)
    s[B].bind(B.op.axis[1], "threadIdx.x")
    with pytest.raises(kiln.KilnError, match=r"loop 'i' .*not bound.*blockIdx\.x"):
        kiln.build(s, [A, B], target="cuda -arch=sm_90")


def test_shared_stage_inside_thread_loop_covers_the_block():
    # One copy per block (as in TVM): its region is relaxed over the thread
    # loop, so it holds the block's 32 elements; its unbound fetch loop is
    # block-level code that thread 0 runs, then a barrier, then the threads read.
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B)
    AS = s.cache_read(A, "shared", [B])
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    s[AS].compute_at(s[B], tx)
    mod = kiln.build(s, [A, B], target="cuda -arch=sm_90")
    src = mod.get_source()
    assert "float A_shared[32];" in src and "if (threadIdx.x == 0)" in src, src
    a = rng.standard_normal(64, dtype="float32")
    b = np.zeros(64, "float32")
    run = mod.simulate(a, b)
    np.testing.assert_array_equal(b, a + 1)
    assert run.barriers == 2
    nvrtc_compiles(s, [A, B])


def test_call_without_driver_raises_clear_error():
    ok, why = kiln.gpu.driver_available()
    if ok:
        pytest.skip("this machine has a CUDA driver and a GPU")
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    mod = kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)
    with pytest.raises(kiln.KilnError, match=r"no CUDA driver \(libcuda\.so\.1\) / no GPU on this machine"):
        mod(np.zeros(64, "float32"), np.zeros(64, "float32"))


@pytest.mark.parametrize("dtype,header", [("float16", "cuda_fp16.h"), ("bfloat16", "cuda_bf16.h"), ("int8", None), ("int32", None), ("int64", None)])
def test_types_compile(dtype, header):
    n = 256
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.placeholder((n,), name="B", dtype=dtype)
    C = te.compute((n,), lambda i: te.maximum(A[i] * B[i], A[i]) + B[i], name="C")
    s = te.create_schedule(C)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, "blockIdx.x")
    s[C].bind(tx, "threadIdx.x")
    mod = kiln.gpu.build(s, [A, B, C], "cuda -arch=sm_90", compile=False)
    if header:
        assert f"#include <{header}>" in mod.get_source()
    if dtype.startswith("int"):
        a = rng.integers(-5, 5, n).astype(dtype)
        b = rng.integers(-5, 5, n).astype(dtype)
        c = np.zeros(n, dtype)
        mod.simulate(a, b, c)
        np.testing.assert_array_equal(c, (np.maximum(a * b, a) + b).astype(dtype))
    nvrtc_compiles(s, [A, B, C])


def test_float4_copy_and_fast_math():
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i], name="B")
    s = te.create_schedule(B)
    bx, rest = s[B].split(B.op.axis[0], factor=256)
    tx, v = s[B].split(rest, factor=4)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    s[B].vectorize(v)
    mod = kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)
    assert "reinterpret_cast<float4*>" in mod.get_source()
    a = rng.standard_normal(n, dtype="float32")
    b = np.zeros(n, "float32")
    mod.simulate(a, b)
    np.testing.assert_array_equal(a, b)
    nvrtc_compiles(s, [A, B])

    # Arithmetic on the lanes: a float4 load per operand, the lanes one by one, a float4 store.
    Bias = te.placeholder((4,), name="Bias")
    D = te.placeholder((n,), name="D")
    E = te.compute((n,), lambda i: A[i] * 2 + D[i] + Bias[1], name="E")
    s = te.create_schedule(E)
    bx, rest = s[E].split(E.op.axis[0], factor=256)
    tx, v = s[E].split(rest, factor=4)
    s[E].bind(bx, "blockIdx.x")
    s[E].bind(tx, "threadIdx.x")
    s[E].vectorize(v)
    mod = kiln.gpu.build(s, [A, D, Bias, E], "cuda -arch=sm_90", compile=False)
    src = mod.get_source()
    assert src.count("*reinterpret_cast<const float4*>") == 2 and "out.w = " in src, src
    d = rng.standard_normal(n, dtype="float32")
    bias = rng.standard_normal(4, dtype="float32")
    e = np.zeros(n, "float32")
    mod.simulate(a, d, bias, e)
    np.testing.assert_allclose(e, a * 2 + d + bias[1], rtol=1e-6)
    nvrtc_compiles(s, [A, D, Bias, E])

    C = te.compute((n,), lambda i: te.exp(A[i]) + te.sigmoid(A[i]), name="C")
    s = te.create_schedule(C)
    bx, tx = s[C].split(C.op.axis[0], factor=256)
    s[C].bind(bx, "blockIdx.x")
    s[C].bind(tx, "threadIdx.x")
    fast = kiln.build(s, [A, C], target="cuda -arch=sm_90 -fast-math") if NVRTC_OK else kiln.gpu.build(s, [A, C], "cuda -arch=sm_90 -fast-math", compile=False)
    assert "__expf(" in fast.get_source()


def test_nvrtc_error_shows_log_and_source():
    if not NVRTC_OK:
        pytest.skip(f"NVRTC cannot be loaded: {NVRTC_WHY}")
    bad = 'extern "C" __global__ void k(float* a) {\n  a[0] = undefined_thing;\n}\n'
    with pytest.raises(kiln.KilnError, match=r"(?s)NVRTC failed to compile kernel 'k'.*undefined_thing.*--- CUDA source ---.*   2  "):
        kiln._kiln.cuda.compile(bad, "k", "cuda -arch=sm_90")
    ptx = kiln._kiln.cuda.compile('extern "C" __global__ void k(float* a) { a[0] = 1.f; }', "k", "cuda -arch=sm_90", ptx=True)
    assert b".entry k" in ptx


def test_local_stage_shared_between_threads_is_reported():
    # A.local is filled by thread 0 (its loop is not bound) and read by every
    # thread: on the GPU the others would read their own, empty copies.
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B)
    AL = s.cache_read(A, "local", [B])
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    s[AL].compute_at(s[B], bx)
    mod = kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)
    with pytest.raises(kiln.KilnError, match=r"local buffer 'A\.local' element \d+ is used by thread .* each thread has its own copy"):
        mod.simulate(np.ones(64, "float32"), np.zeros(64, "float32"))
    # Bound to the threads the way B reads it, each thread keeps its own element: fine.
    s[AL].bind(s[AL].op.axis[0], "threadIdx.x")
    mod = kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)
    a = rng.standard_normal(64, dtype="float32")
    b = np.zeros(64, "float32")
    mod.simulate(a, b)
    np.testing.assert_array_equal(b, a * 2)
    assert "float A_local[1];" in mod.get_source()


def test_nest_binding_fewer_threads_runs_on_thread_zero_of_the_rest():
    # The block is 8x4 threads (from B); the copy into shared memory binds
    # only threadIdx.x, so threads with threadIdx.y > 0 skip it.
    A = te.placeholder((4, 8), name="A")
    B = te.compute((4, 8), lambda i, j: A[i, j] + A[i, 7 - j], name="B")
    s = te.create_schedule(B)
    AS = s.cache_read(A, "shared", [B])
    i, j = s[B].op.axis
    bx, _ = s[B].split(i, nparts=1)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(s[B].leaf_iter_vars[1], "threadIdx.y")
    s[B].bind(j, "threadIdx.x")
    s[AS].compute_at(s[B], bx)
    s[AS].bind(s[AS].op.axis[1], "threadIdx.x")
    mod = kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)
    assert mod.launch["block"] == (8, 4, 1)
    assert "if (threadIdx.y == 0) A_shared[" in mod.get_source()
    a = rng.standard_normal((4, 8), dtype="float32")
    b = np.zeros((4, 8), "float32")
    mod.simulate(a, b)
    np.testing.assert_allclose(b, a + a[:, ::-1])
    nvrtc_compiles(s, [A, B])


def test_row_sum_across_threads_through_shared_memory():
    # rfactor: 32 threads of a block each sum a strided part of the row into
    # shared memory, then thread 0 adds the 32 partial sums.
    R, Cn = 4, 100
    A = te.placeholder((R, Cn), name="A")
    k = te.reduce_axis((0, Cn), name="k")
    B = te.compute((R,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    _, ki = s[B].split(B.op.reduce_axis[0], factor=32)
    BF = s.rfactor(B, ki)
    s[B].bind(s[B].op.axis[0], "blockIdx.x")
    s[BF].compute_at(s[B], s[B].op.axis[0])
    s[BF].bind(s[BF].op.axis[0], "threadIdx.x")
    mod = kiln.build(s, [A, B], target="cuda -arch=sm_90")
    assert str(mod.func).count("sync_threads") == 1
    a = rng.standard_normal((R, Cn), dtype="float32")
    b = np.zeros(R, "float32")
    assert mod.simulate(a, b).barriers == R
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5, atol=1e-5)
    nvrtc_compiles(s, [A, B])
    racy = kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", insert_barriers=False, compile=False)
    with pytest.raises(kiln.KilnError, match=r"data race on shared buffer 'B\.rf'"):
        racy.simulate(a, b)


def test_target_object_and_ptx():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    if not NVRTC_OK:
        pytest.skip(f"NVRTC cannot be loaded: {NVRTC_WHY}")
    mod = kiln.build(s, [A, B], target=kiln.Target("cuda -arch=sm_80"), name="add_one")
    assert isinstance(mod, kiln.gpu.CudaModule)
    assert "add_one(" in mod.get_source()
    assert ".entry add_one" in mod.get_ptx()


@pytest.mark.parametrize("weights_in_shared", [False, True])
def test_conv2d_one_output_per_thread(weights_in_shared):
    torch = pytest.importorskip("torch")
    N, CI, H, W, CO = 1, 3, 10, 9, 8
    X = te.placeholder((N, CI, H, W), name="X")
    Wt = te.placeholder((CO, CI, 3, 3), name="W")
    C, P = kiln.ops.conv2d_nchw(X, Wt, stride=1, pad=1)
    s = te.create_schedule(C)
    s[P].compute_inline()
    n, co, h, w = s[C].op.axis
    f = s[C].fuse(n, co)
    s[C].bind(f, "blockIdx.x")
    s[C].bind(h, "threadIdx.y")
    s[C].bind(w, "threadIdx.x")
    if weights_in_shared:
        # The block's 3x3x3 filter, fetched by the first 9 threads of row 0 in 3 steps.
        WS = s.cache_read(Wt, "shared", [C])
        s[WS].compute_at(s[C], f)
        fw = s[WS].fuse(*s[WS].op.axis)
        _, fi = s[WS].split(fw, factor=9)
        s[WS].bind(fi, "threadIdx.x")
    mod = kiln.build(s, [X, Wt, C], target="cuda -arch=sm_90")
    assert str(mod.func).count("sync_threads") == (1 if weights_in_shared else 0)
    x = rng.standard_normal((N, CI, H, W), dtype="float32")
    wt = rng.standard_normal((CO, CI, 3, 3), dtype="float32")
    c = np.zeros((N, CO, H, W), "float32")
    mod.simulate(x, wt, c)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), padding=1).numpy()
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)
    nvrtc_compiles(s, [X, Wt, C])


def test_without_nvrtc_compiling_says_so_and_the_rest_works():
    # A fresh process: NVRTC is looked for once per process.
    import os
    import subprocess
    import sys
    code = """
import numpy as np, kiln
from kiln import te
A = te.placeholder((64,), name="A")
B = te.compute((64,), lambda i: A[i] + 1, name="B")
s = te.create_schedule(B)
bx, tx = s[B].split(B.op.axis[0], factor=32)
s[B].bind(bx, "blockIdx.x"); s[B].bind(tx, "threadIdx.x")
assert kiln.gpu.nvrtc_available()[0] is False
try:
    kiln.build(s, [A, B], target="cuda -arch=sm_90")
    raise SystemExit("no error")
except kiln.KilnError as e:
    print(e)
mod = kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)
a = np.arange(64, dtype="float32"); b = np.zeros(64, "float32")
mod.simulate(a, b)
assert (b == a + 1).all() and "main_kernel" in mod.get_source()
"""
    env = dict(os.environ, KILN_NVRTC_LIBRARY="/nonexistent/libnvrtc.so")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "NVRTC (libnvrtc.so) was not found; tried /nonexistent/libnvrtc.so" in out.stdout


def test_launch_extents_must_be_constants():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    with pytest.raises(kiln.KilnError, match=r"bound to blockIdx\.x has extent .*not a constant.*constants for now"):
        kiln.build(s, [A, B], target="cuda -arch=sm_90")


def test_shared_memory_over_48k_is_rejected():
    A = te.placeholder((4, 16384), name="A")
    B = te.compute((4, 16384), lambda i, j: A[i, 16383 - j], name="B")
    s = te.create_schedule(B)
    AS = s.cache_read(A, "shared", [B])
    i, j = s[B].op.axis
    s[B].bind(i, "blockIdx.x")
    jo, ji = s[B].split(j, factor=256)
    s[B].bind(ji, "threadIdx.x")
    s[AS].compute_at(s[B], i)
    _, aj = s[AS].split(s[AS].op.axis[1], factor=256)
    s[AS].bind(aj, "threadIdx.x")
    with pytest.raises(kiln.KilnError, match=r"65536 bytes of shared memory per block exceed the 49152 bytes"):
        kiln.build(s, [A, B], target="cuda -arch=sm_90")


def test_bfloat16_pair_dot_products():
    # pack_bf16x2 / dot_bf16x2 (the CPU's vdpbf16ps operands) in CUDA C: simulated against numpy's
    # rounding to bfloat16, and compiled by NVRTC.
    n = 300
    A = [te.placeholder((n,), name=name) for name in "abcd"]
    P = te.compute((n,), lambda i: te.pack_bf16x2(A[0][i], A[1][i]), name="P")
    Q = te.compute((n,), lambda i: te.pack_bf16x2(A[2][i], A[3][i]), name="Q")
    D = te.compute((n,), lambda i: te.dot_bf16x2(P[i], Q[i]), name="D")
    s = te.create_schedule(D)
    s[P].compute_inline()
    s[Q].compute_inline()
    bx, tx = s[D].split(D.op.axis[0], factor=128)
    s[D].bind(bx, "blockIdx.x")
    s[D].bind(tx, "threadIdx.x")
    mod = kiln.build(s, A + [D], target="cuda -arch=sm_90")
    assert "__float2bfloat16_rn" in mod.get_source()
    vals = [rng.standard_normal(n).astype("float32") for _ in range(4)]
    out = np.zeros(n, "float32")
    mod.simulate(*vals, out)

    def bf16(x):
        u = x.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32).astype(np.float64)
    want = bf16(vals[0]) * bf16(vals[2]) + bf16(vals[1]) * bf16(vals[3])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)
    nvrtc_compiles(s, A + [D])
