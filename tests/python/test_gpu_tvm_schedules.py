"""TVM's GPU schedules, written as a TVM user writes them, built for
sm_90 and run in the GPU simulator (which checks races and barriers)
against numpy.

The canonical GEMM: the output's tiles bound to blockIdx and threadIdx, a
local accumulator (cache_write(C, "local")) computed at threadIdx.x, the
shared tiles of A and B (cache_read(.., "shared")) computed at the
reduction's outer loop, inside the thread loops, and fetched cooperatively
(their loops bound to threadIdx again), local copies at the inner loop. A
shared stage is one copy per block: its region is relaxed over the thread
indices and it becomes block-level code, with barriers around its writes.
Also TVM's integration test_gemm (virtual threads) and its "How to optimize
convolution on GPU" tutorial.
"""
import numpy as np
import pytest

import kiln as tvm
from kiln import te

NVRTC_OK, NVRTC_WHY = tvm.gpu.nvrtc_available()
rng = np.random.default_rng(0)


def gemm_operands(M, N, K):
    a = rng.standard_normal((M, K), dtype="float32")
    b = rng.standard_normal((K, N), dtype="float32")
    return a, b, (a.astype("float64") @ b.astype("float64")).astype("float32")


def canonical_gemm(M, N, K, block=64, thread_tile=4, kstep=8, local=True):
    """Block tile block x block, thread tile thread_tile^2, A and B tiles of kstep in shared memory."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    AA = s.cache_read(A, "shared", [CL])
    BB = s.cache_read(B, "shared", [CL])
    if local:
        AL = s.cache_read(AA, "local", [CL])
        BL = s.cache_read(BB, "local", [CL])
    num_thread = block // thread_tile
    block_x, block_y = te.thread_axis("blockIdx.x"), te.thread_axis("blockIdx.y")
    thread_x = te.thread_axis((0, num_thread), "threadIdx.x")
    thread_y = te.thread_axis((0, num_thread), "threadIdx.y")

    by, yi = s[C].split(C.op.axis[0], factor=block)
    bx, xi = s[C].split(C.op.axis[1], factor=block)
    ty, yi = s[C].split(yi, nparts=num_thread)
    tx, xi = s[C].split(xi, nparts=num_thread)
    s[C].reorder(by, bx, ty, tx, yi, xi)
    s[C].bind(by, block_y)
    s[C].bind(bx, block_x)
    s[C].bind(ty, thread_y)
    s[C].bind(tx, thread_x)

    s[CL].compute_at(s[C], tx)
    yo, xo = CL.op.axis
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=kstep)
    s[CL].reorder(ko, ki, yo, xo)
    s[AA].compute_at(s[CL], ko)
    s[BB].compute_at(s[CL], ko)
    if local:
        s[AL].compute_at(s[CL], ki)
        s[BL].compute_at(s[CL], ki)
    # Cooperative fetch: every thread of the block copies its share of the tile.
    for S in (AA, BB):
        fused = s[S].fuse(*s[S].op.axis)
        ty, fused = s[S].split(fused, nparts=num_thread)
        tx, fused = s[S].split(fused, nparts=num_thread)
        s[S].bind(ty, thread_y)
        s[S].bind(tx, thread_x)
    return s, [A, B, C]


def tvm_test_gemm(n, vthread=True):
    """TVM's integration test_gemm schedule (C = B^T A), unchanged but for
    double_buffer, which kiln does not have; vthread=False leaves the
    virtual thread loops unbound (serial), as TVM would run them too."""
    m, l = n, n
    A = te.placeholder((l, n), name="A")
    B = te.placeholder((l, m), name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((m, n), lambda ii, jj: te.sum(A[k, jj] * B[k, ii], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    AL = s.cache_read(AA, "local", [C])
    BL = s.cache_read(BB, "local", [C])
    CC = s.cache_write(C, "local")

    scale = 8
    num_thread = 8
    block_factor = scale * num_thread
    block_x = te.thread_axis("blockIdx.x")
    thread_x = te.thread_axis((0, num_thread), "threadIdx.x")
    block_y = te.thread_axis("blockIdx.y")
    thread_y = te.thread_axis((0, num_thread), "threadIdx.y")
    thread_xz = te.thread_axis((0, 2), "vthread", name="vx")
    thread_yz = te.thread_axis((0, 2), "vthread", name="vy")

    by, yi = s[C].split(C.op.axis[0], factor=block_factor)
    bx, xi = s[C].split(C.op.axis[1], factor=block_factor)
    s[C].bind(by, block_y)
    s[C].bind(bx, block_x)
    s[C].reorder(by, bx, yi, xi)

    tyz, yi = s[C].split(yi, nparts=2)
    ty, yi = s[C].split(yi, nparts=num_thread)
    txz, xi = s[C].split(xi, nparts=2)
    tx, xi = s[C].split(xi, nparts=num_thread)
    if vthread:
        s[C].bind(tyz, thread_yz)
        s[C].bind(txz, thread_xz)
    s[C].bind(ty, thread_y)
    s[C].bind(tx, thread_x)
    s[C].reorder(tyz, txz, ty, tx, yi, xi)
    s[CC].compute_at(s[C], tx)

    yo, xo = CC.op.axis
    ko, ki = s[CC].split(k, factor=8)
    kt, ki = s[CC].split(ki, factor=1)
    s[CC].reorder(ko, kt, ki, yo, xo)
    s[AA].compute_at(s[CC], ko)
    s[BB].compute_at(s[CC], ko)
    s[CC].unroll(kt)
    s[AL].compute_at(s[CC], kt)
    s[BL].compute_at(s[CC], kt)
    # Schedule for A's shared memory load
    ty, xi = s[AA].split(s[AA].op.axis[0], nparts=num_thread)
    _, xi = s[AA].split(s[AA].op.axis[1], factor=num_thread * 4)
    tx, xi = s[AA].split(xi, nparts=num_thread)
    s[AA].bind(ty, thread_y)
    s[AA].bind(tx, thread_x)
    s[AA].vectorize(xi)
    # Schedule for B' shared memory load
    ty, xi = s[BB].split(s[BB].op.axis[0], nparts=num_thread)
    _, xi = s[BB].split(s[BB].op.axis[1], factor=num_thread * 4)
    tx, xi = s[BB].split(xi, nparts=num_thread)
    s[BB].bind(ty, thread_y)
    s[BB].bind(tx, thread_x)
    s[BB].vectorize(xi)
    return s, [A, B, C]


def tvm_conv2d_tutorial(batch, in_channel, out_channel, in_size, kernel, pad, stride):
    """TVM's "How to optimize convolution on GPU" (HWCN layout, shared and
    local caches, virtual threads), unchanged but for the sizes."""
    A = te.placeholder((in_size, in_size, in_channel, batch), name="A")
    W = te.placeholder((kernel, kernel, in_channel, out_channel), name="W")
    out_size = (in_size - kernel + 2 * pad) // stride + 1
    # Pad input
    Apad = te.compute(
        (in_size + 2 * pad, in_size + 2 * pad, in_channel, batch),
        lambda yy, xx, cc, nn: tvm.tir.if_then_else(
            tvm.tir.all(yy >= pad, yy - pad < in_size, xx >= pad, xx - pad < in_size),
            A[yy - pad, xx - pad, cc, nn],
            tvm.tir.const(0.0, "float32"),
        ),
        name="Apad",
    )
    rc = te.reduce_axis((0, in_channel), name="rc")
    ry = te.reduce_axis((0, kernel), name="ry")
    rx = te.reduce_axis((0, kernel), name="rx")
    B = te.compute(
        (out_size, out_size, out_channel, batch),
        lambda yy, xx, ff, nn: te.sum(Apad[yy * stride + ry, xx * stride + rx, rc, nn] * W[ry, rx, rc, ff], axis=[ry, rx, rc]),
        name="B",
    )
    s = te.create_schedule(B.op)
    s[Apad].compute_inline()  # compute Apad inline
    AA = s.cache_read(Apad, "shared", [B])
    WW = s.cache_read(W, "shared", [B])
    AL = s.cache_read(AA, "local", [B])
    WL = s.cache_read(WW, "local", [B])
    BL = s.cache_write(B, "local")

    tile = 8
    num_thread = 8
    block_factor = tile * num_thread
    step = 8
    vthread = 2
    block_x = te.thread_axis("blockIdx.x")
    block_y = te.thread_axis("blockIdx.y")
    block_z = te.thread_axis("blockIdx.z")
    thread_x = te.thread_axis((0, num_thread), "threadIdx.x")
    thread_y = te.thread_axis((0, num_thread), "threadIdx.y")
    thread_xz = te.thread_axis((0, vthread), "vthread", name="vx")
    thread_yz = te.thread_axis((0, vthread), "vthread", name="vy")

    hi, wi, fi, ni = s[B].op.axis
    bz = s[B].fuse(hi, wi)
    by, fi = s[B].split(fi, factor=block_factor)
    bx, ni = s[B].split(ni, factor=block_factor)
    s[B].bind(bz, block_z)
    s[B].bind(by, block_y)
    s[B].bind(bx, block_x)
    tyz, fi = s[B].split(fi, nparts=vthread)  # virtual thread split
    txz, ni = s[B].split(ni, nparts=vthread)  # virtual thread split
    ty, fi = s[B].split(fi, nparts=num_thread)
    tx, ni = s[B].split(ni, nparts=num_thread)
    s[B].reorder(bz, by, bx, tyz, txz, ty, tx, fi, ni)
    s[B].bind(tyz, thread_yz)
    s[B].bind(txz, thread_xz)
    s[B].bind(ty, thread_y)
    s[B].bind(tx, thread_x)

    s[BL].compute_at(s[B], tx)
    yi, xi, fi, ni = s[BL].op.axis
    ry, rx, rc = s[BL].op.reduce_axis
    rco, rci = s[BL].split(rc, factor=step)
    s[BL].reorder(rco, ry, rx, rci, fi, ni)
    s[AA].compute_at(s[BL], rx)
    s[WW].compute_at(s[BL], rx)
    s[AL].compute_at(s[BL], rci)
    s[WL].compute_at(s[BL], rci)

    # Schedule for A's shared memory load
    yi, xi, ci, ni = s[AA].op.axis
    ty, ci = s[AA].split(ci, nparts=num_thread)
    tx, ni = s[AA].split(ni, nparts=num_thread)
    _, ni = s[AA].split(ni, factor=4)
    s[AA].reorder(ty, tx, yi, xi, ci, ni)
    s[AA].bind(ty, thread_y)
    s[AA].bind(tx, thread_x)
    s[AA].vectorize(ni)  # vectorize memory load
    # Schedule for W's shared memory load
    yi, xi, ci, fi = s[WW].op.axis
    ty, ci = s[WW].split(ci, nparts=num_thread)
    tx, fi = s[WW].split(fi, nparts=num_thread)
    _, fi = s[WW].split(fi, factor=4)
    s[WW].reorder(ty, tx, yi, xi, ci, fi)
    s[WW].bind(ty, thread_y)
    s[WW].bind(tx, thread_x)
    s[WW].vectorize(fi)  # vectorize memory load
    return s, [A, W, B]


def compiles_for_sm90(s, args):
    if not NVRTC_OK:
        pytest.skip(f"NVRTC cannot be loaded: {NVRTC_WHY}")
    mod = tvm.build(s, args, target="cuda -arch=sm_90")
    assert mod.cubin[:4] == b"\x7fELF"


def test_canonical_gemm_shared_and_local():
    M = N = K = 128
    s, args = canonical_gemm(M, N, K)
    mod = tvm.gpu.build(s, args, "cuda -arch=sm_90", compile=False)
    src = mod.get_source()
    # One 64x8 tile of A and 8x64 of B per block, the 4x4 accumulator and 4-element copies per thread.
    assert src.count("__shared__") == 2 and "float A_shared[512];" in src and "float B_shared[512];" in src, src
    assert "float C_local[16];" in src and "float A_shared_local[4];" in src, src
    assert mod.launch["grid"] == (2, 2, 1) and mod.launch["block"] == (16, 16, 1)
    a, b, want = gemm_operands(M, N, K)
    c = np.full((M, N), np.nan, "float32")
    run = mod.simulate(a, b, c)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    # Per k step: one barrier before the fetch (the last step's reads) and one after it.
    assert run.blocks == 4 and run.barriers == run.blocks * 2 * (K // 8)
    compiles_for_sm90(s, args)


def test_canonical_gemm_ragged_shapes():
    # Tiles at the edge are cut to the matrix; the shared tiles and the
    # per-thread copies keep the sizes of whole ones (not the matrix's extent:
    # 1000 rows of A's tile at 8 columns would pass the 48 KiB of shared memory).
    s, args = canonical_gemm(1000, 1000, 1000)
    assert tvm.gpu.build(s, args, "cuda -arch=sm_90", compile=False).launch["shared_bytes"] == 2 * 64 * 8 * 4
    M, N, K = 100, 72, 40
    s, args = canonical_gemm(M, N, K)
    mod = tvm.gpu.build(s, args, "cuda -arch=sm_90", compile=False)
    src = mod.get_source()
    assert "float A_shared[512];" in src and "float B_shared_local[4];" in src and "float C_local[16];" in src, src
    a, b, want = gemm_operands(M, N, K)
    c = np.full((M, N), np.nan, "float32")
    mod.simulate(a, b, c)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    compiles_for_sm90(s, args)


def test_canonical_gemm_barriers_are_needed():
    s, args = canonical_gemm(64, 64, 32)
    mod = tvm.gpu.build(s, args, "cuda -arch=sm_90", insert_barriers=False, compile=False)
    a, b, _ = gemm_operands(64, 64, 32)
    with pytest.raises(tvm.KilnError, match=r"data race on shared buffer '[AB]\.shared'.*since the last barrier"):
        mod.simulate(a, b, np.zeros((64, 64), "float32"))


def test_canonical_gemm_shared_only():
    # No local caches: the accumulator is the output itself, the shared tiles computed at ko inside the thread loops.
    M, N, K = 64, 96, 48
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    by, yi = s[C].split(C.op.axis[0], factor=32)
    bx, xi = s[C].split(C.op.axis[1], factor=32)
    ty, yi = s[C].split(yi, nparts=8)
    tx, xi = s[C].split(xi, nparts=8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=8)
    s[C].reorder(by, bx, ty, tx, ko, ki, yi, xi)
    for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[C].bind(ax, te.thread_axis(tag))
    for S in (AA, BB):
        s[S].compute_at(s[C], ko)
        fused = s[S].fuse(*s[S].op.axis)
        fo, fi = s[S].split(fused, factor=64)
        fy, fx = s[S].split(fi, factor=8)
        s[S].bind(fy, "threadIdx.y")
        s[S].bind(fx, "threadIdx.x")
    mod = tvm.gpu.build(s, [A, B, C], "cuda -arch=sm_90", compile=False)
    src = mod.get_source()
    assert "float A_shared[256];" in src and "float B_shared[256];" in src and "_local" not in src, src
    a, b, want = gemm_operands(M, N, K)
    c = np.full((M, N), np.nan, "float32")
    run = mod.simulate(a, b, c)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    # The fetch loop fills the tile piece by piece: no barrier between the pieces.
    assert run.blocks == 6 and run.barriers == run.blocks * 2 * (K // 8)
    compiles_for_sm90(s, [A, B, C])


@pytest.mark.parametrize("vthread", [True, False])
def test_tvm_test_gemm_with_virtual_threads(vthread):
    n = 128
    s, args = tvm_test_gemm(n, vthread)
    mod = tvm.gpu.build(s, args, "cuda -arch=sm_90", compile=False)
    src = mod.get_source()
    assert mod.launch["block"] == (8, 8, 1) and "reinterpret_cast<const float4*>(A" in src, src
    if vthread:
        # The virtual threads share the block's tiles and run inside each thread (unrolled): 2x2 thread tiles of 4x4.
        assert "float A_shared[512];" in src and "float C_local[64];" in src, src
    else:
        # Unbound, they are serial loops around the thread loops, each with half the tile.
        assert "float A_shared[256];" in src and "float C_local[16];" in src, src
    a = rng.standard_normal((n, n), dtype="float32")
    b = rng.standard_normal((n, n), dtype="float32")
    c = np.full((n, n), np.nan, "float32")
    run = mod.simulate(a, b, c)
    np.testing.assert_allclose(c, b.T @ a, rtol=1e-4, atol=1e-4)
    steps = (n // 8) * (1 if vthread else 4)
    assert run.barriers == run.blocks * 2 * steps
    compiles_for_sm90(s, args)


def test_tvm_conv2d_tutorial():
    # Small sizes for the simulator (the tutorial's are batch 256, 256 -> 512 channels, 14x14).
    batch, in_channel, out_channel, in_size, kernel, pad = 64, 8, 64, 2, 3, 1
    s, args = tvm_conv2d_tutorial(batch, in_channel, out_channel, in_size, kernel, pad, 1)
    mod = tvm.gpu.build(s, args, "cuda -arch=sm_90", compile=False)
    # Per (ry, rx) step a 8-channel x 64-image tile of the input and a 8 x 64 tile of the weights.
    assert mod.launch == {"grid": (1, 1, 4), "block": (8, 8, 1), "shared_bytes": 2 * 8 * 64 * 4}
    a = rng.standard_normal((in_size, in_size, in_channel, batch), dtype="float32")
    w = rng.standard_normal((kernel, kernel, in_channel, out_channel), dtype="float32")
    b = np.full((in_size, in_size, out_channel, batch), np.nan, "float32")
    run = mod.simulate(a, w, b)
    ap = np.pad(a.astype("float64"), ((pad, pad), (pad, pad), (0, 0), (0, 0)))
    want = sum(np.einsum("yxcn,cf->yxfn", ap[i:i + in_size, j:j + in_size], w[i, j]) for i in range(kernel) for j in range(kernel))
    np.testing.assert_allclose(b, want, rtol=1e-4, atol=1e-4)
    assert run.barriers == run.blocks * 2 * kernel * kernel
    compiles_for_sm90(s, args)


def test_shared_stage_outside_the_block_loops_is_refused():
    # Computed outside blockIdx, one copy would serve several blocks, which do not share memory.
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B)
    AS = s.cache_read(A, "shared", [B])
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    outer, bx = s[B].split(bx, nparts=1)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    s[AS].compute_at(s[B], outer)
    with pytest.raises(tvm.KilnError, match=r"shared buffer 'A\.shared' is allocated outside the blockIdx loops; compute it at a loop inside the block nest"):
        tvm.gpu.lower(s, [A, B])


def test_shared_stage_in_a_loop_whose_extent_depends_on_the_thread_is_refused():
    # P is computed per thread; at the ragged end (60 = 7*8 + 4) its loop runs
    # fewer times on the last threads, so a shared stage inside it would put
    # barriers where not every thread of the block arrives.
    A = te.placeholder((60,), name="A")
    P = te.compute((60,), lambda i: A[i] * 2, name="P")
    B = te.compute((60,), lambda i: P[i] + 1, name="B")
    s = te.create_schedule(B)
    bx, xi = s[B].split(B.op.axis[0], factor=32)
    tx, xi = s[B].split(xi, factor=4)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    s[P].compute_at(s[B], tx)
    AS = s.cache_read(A, "shared", [P])
    s[AS].compute_at(s[P], s[P].op.axis[0])
    why = r"shared stage is computed inside loop 'i', whose bounds depend on the thread loops 'i\.inner\.outer' \(threadIdx\.x\)"
    with pytest.raises(tvm.KilnError, match=why):
        tvm.gpu.lower(s, [A, B])


def test_thread_axis():
    tx = te.thread_axis((0, 8), "threadIdx.x")
    assert tx.thread_tag == "threadIdx.x" and tx.dom == (0, 8)
    assert te.thread_axis("blockIdx.y").thread_tag == "blockIdx.y"
    assert te.thread_axis((0, 2), "vthread", name="vx").var.name == "vx"
    with pytest.raises(tvm.KilnError, match="needs a tag"):
        te.thread_axis((0, 8))
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B)
    with pytest.raises(tvm.KilnError, match="unknown thread tag 'threadIdx.w'"):
        s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.w"))
    with pytest.raises(tvm.KilnError, match=r"the thread must be a tag such as \"threadIdx.x\" or a te.thread_axis"):
        s[B].bind(B.op.axis[0], 3)
