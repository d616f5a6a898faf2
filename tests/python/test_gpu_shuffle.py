"""Reductions across the threads of a block (pass::lower_thread_allreduce):
a reduce loop bound to threadIdx.x becomes per-thread partials and a warp
shuffle tree (through a small shared array when the block has more than one
warp). The simulator runs the tree in the order the CUDA code does, so its
result is checked bit for bit against a numpy emulation of that order, and
against numpy's own reduction; NVRTC compiles every kernel for sm_80/sm_90."""
import numpy as np
import pytest

import kiln
from kiln import te
from test_gpu_cuda import nvrtc_compiles

rng = np.random.default_rng(1)

REDUCERS = {
    "sum": (te.sum, np.add, 0.0, lambda a: a.sum(1)),
    "max": (te.max, np.maximum, -np.inf, lambda a: a.max(1)),
    "min": (te.min, np.minimum, np.inf, lambda a: a.min(1)),
    "prod": (te.prod, np.multiply, 1.0, lambda a: a.prod(1)),
}


def tree_order(partials, op, identity):
    """The collective's order (kiln/pass/gpu.h): within each warp lane l takes
    lane l + o for o = P/2 .. 1, then the same over the warps' lane 0."""
    n = len(partials)
    warps = (n + 31) // 32
    dtype = partials.dtype

    def tree(lanes, count):
        o = 1 << max(count - 1, 0).bit_length() >> 1
        while o >= 1:
            lanes[:o] = op(lanes[:o], lanes[o:2 * o])
            o //= 2

    v = np.full(warps * 32, identity, dtype)
    v[:n] = partials
    for w in range(warps):
        tree(v[w * 32:(w + 1) * 32], min(n, 32))
    if warps == 1:
        return v[0]
    first = np.full(32, identity, dtype)
    first[:warps] = v[::32]
    tree(first, warps)
    return first[0]


def row_reduce(R, C, reducer, threads=None, dtype="float32"):
    A = te.placeholder((R, C), name="A", dtype=dtype)
    k = te.reduce_axis((0, C), name="k")
    B = te.compute((R,), lambda i: REDUCERS[reducer][0](A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    s[B].bind(B.op.axis[0], "blockIdx.x")
    if threads is None:
        s[B].bind(B.op.reduce_axis[0], "threadIdx.x")
    else:
        _, ki = s[B].split(B.op.reduce_axis[0], factor=threads)
        s[B].bind(ki, "threadIdx.x")
    return s, [A, B]


@pytest.mark.parametrize("reducer", ["sum", "max"])
@pytest.mark.parametrize("C", [32, 64, 128, 100, 7])
def test_row_reduce_one_column_per_thread(reducer, C):
    R = 3
    s, args = row_reduce(R, C, reducer)
    mod = kiln.gpu.build(s, args, "cuda -arch=sm_90", compile=False)
    src = mod.get_source()
    warps = (C + 31) // 32
    assert "__shfl_down_sync(0xffffffffu" in src
    assert mod.launch["block"] == (warps * 32, 1, 1)
    # One barrier, inside the collective, and only when the warps must meet.
    assert src.count("__syncthreads();") == (1 if warps > 1 else 0), src
    assert "thread_allreduce" in str(mod.func)
    a = rng.standard_normal((R, C), dtype="float32")
    b = np.full(R, np.nan, "float32")
    run = mod.simulate(a, b)
    assert run.barriers == (R if warps > 1 else 0)
    _, op, identity, ref = REDUCERS[reducer]
    np.testing.assert_allclose(b, ref(a), rtol=1e-5, atol=1e-5)
    for r in range(R):  # the very bits of the tree order
        assert b[r] == op(np.float32(identity), tree_order(a[r], op, np.float32(identity))), r
    nvrtc_compiles(s, args)


@pytest.mark.parametrize("reducer", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("C,threads", [(1000, 128), (300, 64), (90, 32), (40, 16)])
def test_row_reduce_serial_partials_then_shuffles(reducer, C, threads):
    # Each thread first reduces a strided part of the row in a register (the
    # outer reduce loop stays serial), then the threads reduce together.
    R = 4
    s, args = row_reduce(R, C, reducer, threads=threads)
    mod = kiln.gpu.build(s, args, "cuda -arch=sm_80", compile=False)
    a = rng.standard_normal((R, C), dtype="float32")
    if reducer == "prod":
        a = (1 + a / 64).astype("float32")
    b = np.zeros(R, "float32")
    mod.simulate(a, b)
    _, op, identity, ref = REDUCERS[reducer]
    np.testing.assert_allclose(b, ref(a), rtol=1e-5, atol=1e-5)
    # Thread t's partial: its columns t, t + threads, ... in order, from the identity.
    for r in range(R):
        partials = np.full(threads, identity, "float32")
        for ko in range((C + threads - 1) // threads):
            cols = np.arange(ko * threads, min((ko + 1) * threads, C))
            partials[cols - ko * threads] = op(partials[cols - ko * threads], a[r, cols])
        assert b[r] == op(np.float32(identity), tree_order(partials, op, np.float32(identity)))
    # The partial is one register per thread; the collective runs once per row, after the loop.
    src = mod.get_source()
    assert "float B_red[1];" in src, src
    assert src.count("__shfl_down_sync") == (5 if threads >= 32 else 4) + (2 if threads == 128 else 1 if threads == 64 else 0)
    nvrtc_compiles(s, args)


@pytest.mark.parametrize("reducer", ["sum", "max"])
@pytest.mark.parametrize("dtype", ["float64", "int32", "int64", "float16", "bfloat16"])
def test_other_types(dtype, reducer):
    R, C = 2, 96
    s, args = row_reduce(R, C, reducer, dtype=dtype)
    mod = kiln.gpu.build(s, args, "cuda -arch=sm_80", compile=False)
    assert "__shfl_down_sync" in mod.get_source()
    if dtype in ("float64", "int32", "int64"):
        a = rng.integers(-50, 50, (R, C)).astype(dtype)
        b = np.zeros(R, dtype)
        mod.simulate(a, b)
        np.testing.assert_array_equal(b, REDUCERS[reducer][3](a))
    nvrtc_compiles(s, args)


def test_rfactor_axis_bound_to_threads():
    # TVM's form: rfactor, bind the final stage's reduce axis (the rfactor
    # axis) to threadIdx.x, and compute the rfactor stage at it.
    R, C = 5, 200
    A = te.placeholder((R, C), name="A")
    k = te.reduce_axis((0, C), name="k")
    B = te.compute((R,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    _, ki = s[B].split(B.op.reduce_axis[0], factor=64)
    BF = s.rfactor(B, ki)
    s[B].bind(s[B].op.axis[0], "blockIdx.x")
    tx = s[B].op.reduce_axis[0]
    s[B].bind(tx, "threadIdx.x")
    s[BF].compute_at(s[B], tx)
    mod = kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)
    assert mod.launch["block"] == (64, 1, 1)
    a = rng.standard_normal((R, C), dtype="float32")
    b = np.zeros(R, "float32")
    mod.simulate(a, b)
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5, atol=1e-5)
    assert "__shfl_down_sync" in mod.get_source()
    nvrtc_compiles(s, [A, B])


def softmax_shuffle(R, C, threads, red_threads=None):
    red_threads = red_threads or threads
    X = te.placeholder((R, C), name="X")
    k = te.reduce_axis((0, C), name="k")
    Mx = te.compute((R,), lambda i: te.max(X[i, k], axis=k), name="Mx")
    E = te.compute((R, C), lambda i, j: te.exp(X[i, j] - Mx[i]), name="E")
    k2 = te.reduce_axis((0, C), name="k2")
    S = te.compute((R,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Y = te.compute((R, C), lambda i, j: E[i, j] / S[i], name="Y")
    s = te.create_schedule(Y)
    i, j = s[Y].op.axis
    s[Y].bind(i, "blockIdx.x")
    _, ji = s[Y].split(j, factor=threads)
    s[Y].bind(ji, "threadIdx.x")
    for st in (Mx, E, S):
        s[st].compute_at(s[Y], i)
    _, eji = s[E].split(s[E].op.axis[1], factor=threads)
    s[E].bind(eji, "threadIdx.x")
    for st in (Mx, S):
        _, ki = s[st].split(s[st].op.reduce_axis[0], factor=red_threads)
        s[st].bind(ki, "threadIdx.x")
    return s, [X, Y]


@pytest.mark.parametrize("C,threads,red_threads", [(70, 32, 32), (500, 128, 128), (256, 256, 256), (500, 256, 64), (300, 64, 96)])
def test_softmax_rows_with_shuffles(C, threads, red_threads):
    # The reductions may use fewer (or more) threads than the elementwise stages.
    R = 6
    s, args = softmax_shuffle(R, C, threads, red_threads)
    mod = kiln.gpu.build(s, args, "cuda -arch=sm_90", compile=False)
    assert mod.launch["block"] == ((max(threads, red_threads) + 31) // 32 * 32, 1, 1)
    src = mod.get_source()
    warps = (red_threads + 31) // 32
    assert src.count("__shfl_down_sync") == 2 * (5 + (warps - 1).bit_length())
    assert "if (threadIdx.x == 0)" in src  # thread 0 stores each reduction's result
    x = rng.standard_normal((R, C), dtype="float32") * 4
    y = np.zeros_like(x)
    run = mod.simulate(x, y)
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    # The three barriers of the serial version, plus one inside each multi-warp collective.
    assert run.barriers == R * (3 + (2 if red_threads > 32 else 0))
    nvrtc_compiles(s, args)


def test_layer_norm_rows_with_shuffles():
    R, C, eps = 4, 384, 1e-5
    X = te.placeholder((R, C), name="X")
    k = te.reduce_axis((0, C), name="k")
    S1 = te.compute((R,), lambda i: te.sum(X[i, k], axis=k), name="S1")
    k2 = te.reduce_axis((0, C), name="k2")
    S2 = te.compute((R,), lambda i: te.sum(X[i, k2] * X[i, k2], axis=k2), name="S2")
    Y = te.compute((R, C), lambda i, j: (X[i, j] - S1[i] / C) * te.rsqrt(S2[i] / C - (S1[i] / C) * (S1[i] / C) + eps), name="Y")
    s = te.create_schedule(Y)
    i, j = s[Y].op.axis
    s[Y].bind(i, "blockIdx.x")
    _, ji = s[Y].split(j, factor=128)
    s[Y].bind(ji, "threadIdx.x")
    for st in (S1, S2):
        s[st].compute_at(s[Y], i)
        _, ki = s[st].split(s[st].op.reduce_axis[0], factor=128)
        s[st].bind(ki, "threadIdx.x")
    mod = kiln.gpu.build(s, [X, Y], "cuda -arch=sm_90", compile=False)
    assert mod.get_source().count("__shared__") == 4  # S1, S2 and the two collectives' warp arrays
    x = rng.standard_normal((R, C), dtype="float32") + 3
    y = np.zeros_like(x)
    mod.simulate(x, y)
    x64 = x.astype("float64")
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + eps)
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-3)
    nvrtc_compiles(s, [X, Y])


def test_collective_in_a_block_level_loop_waits_for_the_last_one():
    # Two rows per block, one after the other: the second collective must not
    # overwrite the warps' array while the first warp still reads it.
    R, C = 8, 96
    A = te.placeholder((R, C), name="A")
    k = te.reduce_axis((0, C), name="k")
    B = te.compute((R,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    bo, _ = s[B].split(B.op.axis[0], factor=2)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(B.op.reduce_axis[0], "threadIdx.x")
    mod = kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)
    assert str(mod.func).count("sync_threads") == 1
    a = rng.standard_normal((R, C), dtype="float32")
    b = np.zeros(R, "float32")
    run = mod.simulate(a, b)
    assert run.barriers == R * 2
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5, atol=1e-5)
    nvrtc_compiles(s, [A, B])


def test_reduce_axis_bound_to_threadIdx_y_is_rejected():
    A = te.placeholder((4, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    s[B].bind(B.op.axis[0], "blockIdx.x")
    s[B].bind(B.op.reduce_axis[0], "threadIdx.y")
    with pytest.raises(kiln.KilnError, match=r"every thread of loop 'k' \(bound to threadIdx\.y\) updates the same element of 'B'.*over threadIdx\.x only: bind the reduce loop to threadIdx\.x"):
        kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)


def test_reduction_in_a_block_with_rows_of_threads_is_rejected():
    A = te.placeholder((8, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(io, "blockIdx.x")
    s[B].bind(ii, "threadIdx.y")
    s[B].bind(B.op.reduce_axis[0], "threadIdx.x")
    with pytest.raises(kiln.KilnError, match=r"updates the same element of 'B' in a nest that binds other loops to threads too.*bind the data-parallel loops to blockIdx"):
        kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)


def test_int8_reduction_across_threads_is_rejected():
    A = te.placeholder((2, 64), name="A", dtype="int8")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((2,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    s[B].bind(B.op.axis[0], "blockIdx.x")
    s[B].bind(B.op.reduce_axis[0], "threadIdx.x")
    with pytest.raises(kiln.KilnError, match=r"in int8, a type warp shuffles do not move.*te\.cast the operand"):
        kiln.gpu.build(s, [A, B], "cuda -arch=sm_90", compile=False)
