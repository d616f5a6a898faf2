"""Tensor cores without a GPU: a matmul of float16 or bfloat16 tiles marked
``tensor_core`` becomes warp matrix operations (mma_fill, mma_sync,
mma_store); the GPU simulator runs them with the mma semantics (16x16x16
tiles, float32 sums) against PyTorch's float32 matmul of the same inputs,
NVRTC compiles the WMMA code for sm_80 and sm_90, and schedules the warps
cannot run say why."""
import numpy as np
import pytest
import torch

import kiln
from kiln import te

NVRTC_OK, NVRTC_WHY = kiln.gpu.nvrtc_available()


def matmul(M, N, K, dtype, b_transposed=False, out_dtype="float32"):
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((N, K) if b_transposed else (K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    b = (lambda j: B[j, k]) if b_transposed else (lambda j: B[k, j])
    C = te.compute((M, N), lambda i, j: te.sum(te.cast(A[i, k], out_dtype) * te.cast(b(j), out_dtype), axis=k), name="C")
    return A, B, C


def inputs(M, N, K, dtype, b_transposed=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(getattr(torch, dtype))
    b = torch.randn(*((N, K) if b_transposed else (K, N)), generator=g).to(getattr(torch, dtype))
    ref = a.float() @ (b.float().T if b_transposed else b.float())
    return a, b, ref.numpy()


def simulate(mod, a, b, M, N):
    c = np.full((M, N), np.nan, np.float32)
    stats = mod.simulate(kiln.nd.from_dlpack(a), kiln.nd.from_dlpack(b), c)
    return c, stats


def compiles_for_sm80_and_sm90(s, args):
    if not NVRTC_OK:
        pytest.skip(f"NVRTC cannot be loaded: {NVRTC_WHY}")
    for arch in ("cuda -arch=sm_80", "cuda -arch=sm_90"):
        assert kiln.gpu.build(s, args, target=arch).cubin[:4] == b"\x7fELF", arch


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape,block,warp", [((64, 64, 32), (32, 32), (16, 16)), ((128, 64, 96), (64, 64), (32, 32)), ((64, 128, 64), (64, 128), (32, 64))])
def test_tensor_core_gemm_follows_the_float32_matmul(dtype, shape, block, warp):
    M, N, K = shape
    A, B, C = matmul(M, N, K, dtype)
    s = kiln.gpu.tensor_core_schedule(C, block=block, warp=warp, k_step=32)
    mod = kiln.gpu.build(s, [A, B, C], target="cuda -arch=sm_90", compile=False)
    src = mod.get_source()
    frags = (warp[0] // 16) * (warp[1] // 16)
    # Each warp holds its tile in its own fragments, numbered densely.
    assert f"fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> C_local[{frags}];" in src
    ctype = "__half" if dtype == "float16" else "__nv_bfloat16"
    assert f"fragment<nvcuda::wmma::matrix_a, 16, 16, 16, {ctype}, nvcuda::wmma::row_major>" in src
    assert src.count("nvcuda::wmma::mma_sync(") == 1 and "store_matrix_sync" in src and "fill_fragment" in src
    # Rows of the staged tiles are padded to 8 past a multiple of 32 (bank spread), and copied 16 bytes at a time.
    assert ", 40);" in src and "uint4" in src
    warps = (block[0] // warp[0]) * (block[1] // warp[1])
    assert mod.launch["block"] == (32, warps, 1) and mod.launch["grid"] == (N // block[1], M // block[0], 1)
    a, b, ref = inputs(M, N, K, dtype)
    c, stats = simulate(mod, a, b, M, N)
    assert stats.blocks == (M // block[0]) * (N // block[1])
    # float32 sums of exact products, in another order than PyTorch's.
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    compiles_for_sm80_and_sm90(s, [A, B, C])


def test_transposed_operand_loads_column_major():
    M, N, K = 64, 64, 64
    A, B, C = matmul(M, N, K, "float16", b_transposed=True)
    s = kiln.gpu.tensor_core_schedule(C, block=(64, 64), warp=(32, 32), k_step=32)
    mod = kiln.gpu.build(s, [A, B, C], target="cuda -arch=sm_90", compile=False)
    assert "matrix_b, 16, 16, 16, __half, nvcuda::wmma::col_major" in mod.get_source()
    a, b, ref = inputs(M, N, K, "float16", b_transposed=True)
    c, _ = simulate(mod, a, b, M, N)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


def test_the_lowered_kernel_shows_the_warp_operations_and_the_trace_the_primitive():
    A, B, C = matmul(64, 64, 32, "float16")
    s = kiln.gpu.tensor_core_schedule(C, block=(64, 64), warp=(32, 32), k_step=32)
    text = str(kiln.gpu.lower(s, [A, B, C]))
    for call in ("mma_fill(C.local[", "mma_sync(C.local[", "mma_store(C.local["):
        assert text.count(call) == 1, call
    assert "pragma_tensor_core" not in text
    assert ".tensor_core(" in s.trace().to_python()


def test_a_missing_barrier_before_the_warp_loads_is_a_race():
    A, B, C = matmul(64, 64, 32, "float16")
    s = kiln.gpu.tensor_core_schedule(C, block=(64, 64), warp=(32, 32), k_step=32)
    mod = kiln.gpu.build(s, [A, B, C], target="cuda -arch=sm_90", insert_barriers=False, compile=False)
    a, b, _ = inputs(64, 64, 32, "float16")
    with pytest.raises(kiln.KilnError, match=r"data race on shared buffer '[AB]\.shared'.*sync_threads\(\) between them is missing"):
        simulate(mod, a, b, 64, 64)


def lowering_error(s, args, target="cuda -arch=sm_90"):
    with pytest.raises(kiln.KilnError) as e:
        kiln.gpu.build(s, args, target=target, compile=False)
    return str(e.value)


def plain_schedule(C, mark, warp_x=False, split=16):
    """A one-block-row schedule written out, with hooks for each mistake."""
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    by, yi = s[C].split(i, factor=32)
    wy, yy = s[C].split(yi, factor=16)
    xo, xx = s[C].split(j, factor=16)
    s[C].reorder(by, wy, xo, yy, xx)
    s[C].bind(by, "blockIdx.x")
    s[C].bind(wy, "threadIdx.y")
    s[CL].compute_at(s[C], by)
    ci, cj = s[CL].op.axis
    (ck,) = s[CL].op.reduce_axis
    cwy, cii = s[CL].split(ci, factor=16)
    cxo, cjj = s[CL].split(cj, factor=split)
    ko, kk = s[CL].split(ck, factor=16)
    s[CL].reorder(cwy, cxo, ko, cii, cjj, kk)
    s[CL].bind(cwy, "threadIdx.y")
    if warp_x:
        s[CL].bind(cxo, "threadIdx.x")
    s[CL].tensor_core({"tile": cii, "outer": ko}[mark])
    return s


def test_marks_that_are_no_tile_are_named():
    A, B, C = matmul(32, 32, 32, "float16")
    msg = lowering_error(plain_schedule(C, "outer"), [A, B, C])
    assert "tensor_core at loop 'k.outer' must head three perfectly nested loops" in msg
    msg = lowering_error(plain_schedule(C, "tile", split=8), [A, B, C])
    assert "16 iterations" in msg and "split the axes by 16" in msg
    A, B, C = matmul(32, 32, 32, "float32")
    msg = lowering_error(plain_schedule(C, "tile"), [A, B, C])
    assert "tensor cores multiply float16 or bfloat16" in msg


def test_an_accumulator_in_global_memory_is_refused():
    A, B, C = matmul(32, 32, 32, "float16")
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    bx, ii = s[C].split(i, factor=16)
    jo, jj = s[C].split(j, factor=16)
    ko, kk = s[C].split(k, factor=16)
    s[C].reorder(bx, jo, ko, ii, jj, kk)
    s[C].bind(bx, "blockIdx.x")
    s[C].bind(jo, "threadIdx.y")
    s[C].tensor_core(ii)
    msg = lowering_error(s, [A, B, C])
    assert "'C' (scope global) cannot hold fragments" in msg and 'cache_write(C, "local")' in msg


def test_warp_operations_in_a_nest_bound_to_lanes_are_refused():
    A, B, C = matmul(32, 32, 32, "float16")
    msg = lowering_error(plain_schedule(C, "tile", warp_x=True), [A, B, C])
    assert "binds threadIdx.x" in msg and "bind the warps to threadIdx.y" in msg


def test_a_block_without_32_lanes_is_refused():
    A, B, C = matmul(32, 32, 32, "float16")
    # No stage binds threadIdx.x: the block has 1 thread in x, not a warp's 32 lanes.
    msg = lowering_error(plain_schedule(C, "tile"), [A, B, C])
    assert "threadIdx.x must be its 32 lanes; the block has 1 threads in x" in msg


def test_a_write_back_that_is_no_whole_tile_is_refused():
    A, B, C = matmul(64, 64, 32, "float16")
    s = kiln.gpu.tensor_core_schedule(C, block=(64, 64), warp=(32, 32), k_step=32)
    # Split the write-back's 16-wide columns once more: its nests are no 16x16 tiles.
    s[C].split(s[C].leaf_iter_vars[-1], factor=8)
    msg = lowering_error(s, [A, B, C])
    assert "'C.local' holds tensor-core fragments, but it is read at" in msg and "their own 16x16 loop nests" in msg


def test_unaligned_shared_rows_are_refused():
    A, B, C = matmul(64, 64, 32, "float16")
    s = kiln.gpu.tensor_core_schedule(C, block=(64, 64), warp=(32, 32), k_step=32, pad=4)
    msg = lowering_error(s, [A, B, C])
    assert "32-byte aligned tiles with rows a multiple of 8 elements apart" in msg and "rows 36 apart" in msg


def test_bfloat16_tensor_cores_need_sm80():
    A, B, C = matmul(64, 64, 32, "bfloat16")
    s = kiln.gpu.tensor_core_schedule(C, block=(64, 64), warp=(32, 32), k_step=32)
    msg = lowering_error(s, [A, B, C], target="cuda -arch=sm_75")
    assert "tensor cores multiply bfloat16 from sm_80 on" in msg


def test_schedule_helper_names_a_tile_that_does_not_divide():
    A, B, C = matmul(96, 64, 32, "float16")
    with pytest.raises(kiln.KilnError, match=r"M=96 by block\[0\]=64 does not divide"):
        kiln.gpu.tensor_core_schedule(C, block=(64, 64), warp=(32, 32))


# ---- the GPU rules' tensor-core sketch


def batch_matmul(Bn, M, N, K, dtype):
    A = te.placeholder((Bn, M, K), name="A", dtype=dtype)
    B = te.placeholder((Bn, K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((Bn, M, N), lambda b, i, j: te.sum(te.cast(A[b, i, k], "float32") * te.cast(B[b, k, j], "float32"), axis=k), name="C")
    return A, B, C


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_default_gpu_schedule_of_a_half_matmul_takes_tensor_cores(dtype):
    M, N, K = 128, 96, 80
    A, B, C = matmul(M, N, K, dtype)
    s = kiln.gpu.default_schedule([A, B, C], "cuda -arch=sm_90")
    assert ".tensor_core(" in s.trace().to_python()
    mod = kiln.gpu.build(s, [A, B, C], target="cuda -arch=sm_90", compile=False)
    assert "nvcuda::wmma::mma_sync(" in mod.get_source()
    a, b, ref = inputs(M, N, K, dtype, seed=3)
    c, _ = simulate(mod, a, b, M, N)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    compiles_for_sm80_and_sm90(s, [A, B, C])


def test_a_batch_matmul_puts_the_batch_on_blockidx_z():
    Bn, M, N, K = 3, 32, 48, 32
    A, B, C = batch_matmul(Bn, M, N, K, "float16")
    s = kiln.gpu.default_schedule([A, B, C], "cuda -arch=sm_90")
    mod = kiln.gpu.build(s, [A, B, C], target="cuda -arch=sm_90", compile=False)
    assert "mma_sync" in mod.get_source() and mod.launch["grid"][2] == Bn
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(Bn, M, K, generator=g).half(), torch.randn(Bn, K, N, generator=g).half()
    c = np.full((Bn, M, N), np.nan, np.float32)
    mod.simulate(kiln.nd.from_dlpack(a), kiln.nd.from_dlpack(b), c)
    np.testing.assert_allclose(c, torch.bmm(a.float(), b.float()).numpy(), rtol=1e-5, atol=1e-4)


def test_shapes_off_the_16_grid_and_float32_stay_on_the_simt_cores():
    for M, N, K, dtype in [(40, 48, 32, "float16"), (32, 32, 32, "float32")]:
        A, B, C = matmul(M, N, K, dtype)
        s = kiln.gpu.default_schedule([A, B, C], "cuda -arch=sm_90")
        assert ".tensor_core(" not in s.trace().to_python(), (M, N, K, dtype)


def test_a_simulated_session_searches_tensor_core_tiles(tmp_path):
    M, N, K = 64, 64, 64
    A, B, C = matmul(M, N, K, "float16")
    db = str(tmp_path / "tc.db")
    r = kiln.tune([A, B, C], target="cuda -arch=sm_90", trials=12, batch_size=6, db=db, gpu_simulate=True, timeout=20, progress=False)
    assert r.trials_measured == 12 and r.errors == 0
    with kiln.tuning_db.open(db) as d:
        (w,) = d.workloads()
        recs = d.records(w.key)
        traces = [str(x.trace) for x in recs]
        best = d.best(w.key, recs[0].target, 1)[0]
    # Most draws come from the first sketch (tensor cores); several distinct tilings of it were tried.
    tc = {t for t in traces if "tensor_core" in t}
    assert len(tc) >= 3, traces
    s = kiln._ffi._kiln.Schedule.from_trace(kiln.tuner.make_task([A, B, C], "cuda -arch=sm_90").outputs, best.trace)
    mod = kiln.gpu.build(s, [A, B, C], target="cuda -arch=sm_90", compile=False)
    a, b, ref = inputs(M, N, K, "float16", seed=5)
    c, _ = simulate(mod, a, b, M, N)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
