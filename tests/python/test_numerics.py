"""Operators built with kiln.te from Python, each under a couple of schedules,
compiled for the host and checked against numpy."""
import numpy as np
import pytest

import kiln
from kiln import te
from kiln_helpers import conv2d_ref, depthwise_ref, pool_ref, rand, run

TOL = dict(rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- matmul

def matmul_decl(n, m, k):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def sched_matmul_default(A, B, C):
    return te.create_schedule(C)


def sched_matmul_tiled(A, B, C):
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 16)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s


def sched_matmul_cached(A, B, C):
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    f = s[C].fuse(io, jo)
    s[C].parallel(f)
    s[CL].compute_at(s[C], f)
    ci, cj = s[CL].op.axis
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=4)
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ki)
    s[CL].vectorize(cj)
    return s


@pytest.mark.parametrize("sched", [sched_matmul_default, sched_matmul_tiled, sched_matmul_cached])
@pytest.mark.parametrize("shape", [(64, 64, 64), (37, 45, 29)])  # ragged sizes exercise split guards
def test_matmul(rng, sched, shape):
    n, m, k = shape
    A, B, C = matmul_decl(n, m, k)
    a, b = rand(rng, n, k), rand(rng, k, m)
    np.testing.assert_allclose(run(sched(A, B, C), [A, B, C], [a, b]), a @ b, **TOL)


def test_matmul_from_op_library(rng):
    A = te.placeholder((32, 48), name="A")
    B = te.placeholder((48, 16), name="B")
    C = kiln.ops.matmul(A, B)
    a, b = rand(rng, 32, 48), rand(rng, 48, 16)
    np.testing.assert_allclose(run(sched_matmul_tiled(A, B, C), [A, B, C], [a, b]), a @ b, **TOL)


def test_matmul_int32_and_float64(rng):
    for dtype in ["int32", "float64"]:
        A = te.placeholder((16, 8), dtype, name="A")
        B = te.placeholder((8, 12), dtype, name="B")
        r = te.reduce_axis((0, 8), name="k")
        C = te.compute((16, 12), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
        a = rng.integers(-5, 5, (16, 8)).astype(dtype)
        b = rng.integers(-5, 5, (8, 12)).astype(dtype)
        out = run(te.create_schedule(C), [A, B, C], [a, b])
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out, a @ b)


# ---------------------------------------------------------------- batched matmul

@pytest.mark.parametrize("schedule", ["default", "parallel"])
def test_batch_matmul(rng, schedule):
    bs, n, m, k = 3, 16, 24, 20
    A = te.placeholder((bs, n, k), name="A")
    B = te.placeholder((bs, k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((bs, n, m), lambda b, i, j: te.sum(A[b, i, r] * B[b, r, j], axis=r), name="C")
    s = te.create_schedule(C)
    if schedule == "parallel":
        b_, i, j = C.op.axis
        f = s[C].fuse(b_, i)
        s[C].parallel(f)
        jo, ji = s[C].split(j, factor=8)
        s[C].reorder(f, jo, C.op.reduce_axis[0], ji)
        s[C].vectorize(ji)
    a, b = rand(rng, bs, n, k), rand(rng, bs, k, m)
    np.testing.assert_allclose(run(s, [A, B, C], [a, b]), a @ b, **TOL)


# ---------------------------------------------------------------- convolutions

def conv2d_decl(n, c, h, w, o, kh, kw, stride, pad, dilation):
    X = te.placeholder((n, c, h, w), name="X")
    W = te.placeholder((o, c, kh, kw), name="W")
    P = te.compute((n, c, h + 2 * pad, w + 2 * pad),
                   lambda b, ch, y, x: te.if_then_else(
                       te.all(y >= pad, y < h + pad, x >= pad, x < w + pad), X[b, ch, y - pad, x - pad], 0.0),
                   name="pad")
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    Y = te.compute((n, o, oh, ow),
                   lambda b, f, y, x: te.sum(P[b, rc, y * stride + ry * dilation, x * stride + rx * dilation] * W[f, rc, ry, rx],
                                             axis=[rc, ry, rx]),
                   name="conv")
    return X, W, P, Y


@pytest.mark.parametrize("stride,pad,dilation", [(1, 1, 1), (2, 1, 1), (1, 2, 2), (2, 0, 1)])
@pytest.mark.parametrize("schedule", ["default", "inline_tiled"])
def test_conv2d(rng, stride, pad, dilation, schedule):
    X, W, P, Y = conv2d_decl(1, 3, 12, 11, 4, 3, 3, stride, pad, dilation)
    s = te.create_schedule(Y)
    if schedule == "inline_tiled":
        s[P].compute_inline()
        b, f, y, x = Y.op.axis
        xo, xi = s[Y].split(x, factor=4)
        s[Y].reorder(b, f, y, xo, *Y.op.reduce_axis, xi)
        s[Y].vectorize(xi)
        s[Y].parallel(f)
    x, w = rand(rng, 1, 3, 12, 11), rand(rng, 4, 3, 3, 3)
    np.testing.assert_allclose(run(s, [X, W, Y], [x, w]), conv2d_ref(x, w, stride, pad, dilation), **TOL)


def test_conv2d_from_op_library(rng):
    X = te.placeholder((1, 2, 9, 9), name="X")
    W = te.placeholder((3, 2, 3, 3), name="W")
    Y, padded = kiln.ops.conv2d_nchw(X, W, stride=2, pad=1, dilation=1)
    s = te.create_schedule(Y)
    if padded is not None:
        s[padded].compute_inline()
    x, w = rand(rng, 1, 2, 9, 9), rand(rng, 3, 2, 3, 3)
    np.testing.assert_allclose(run(s, [X, W, Y], [x, w]), conv2d_ref(x, w, 2, 1, 1), **TOL)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_nchwc_from_op_library(rng, stride):
    # Blocked layouts: the reference runs on the NCHW / OIHW views of the same data.
    c, k, cb, kb = 8, 12, kiln.ops.channel_block(8, 4), kiln.ops.channel_block(12, 8)
    assert (cb, kb) == (4, 6)
    # The defaults: one vector of inputs, two of outputs (the host's lanes); divisors when those do not divide.
    lanes = kiln.Target("llvm").natural_lanes("float32")
    assert kiln.ops.nchwc_blocks(64, 256) == (lanes, 2 * lanes)
    assert kiln.ops.nchwc_blocks(3, 24) == (3, kiln.ops.channel_block(24, 2 * lanes))
    X = te.placeholder((1, c // cb, 9, 9, cb), name="X")
    W = te.placeholder((k // kb, c // cb, 3, 3, cb, kb), name="W")
    Y, padded = kiln.ops.conv2d_nchwc(X, W, stride=stride, pad=1)
    s = te.create_schedule(Y)
    s[padded].compute_inline()
    s[Y].vectorize(s[Y].op.axis[4])
    x, w = rand(rng, 1, c, 9, 9), rand(rng, k, c, 3, 3)
    x_blocked = x.reshape(1, c // cb, cb, 9, 9).transpose(0, 1, 3, 4, 2).copy()
    w_blocked = w.reshape(k // kb, kb, c // cb, cb, 3, 3).transpose(0, 2, 4, 5, 3, 1).copy()
    want = conv2d_ref(x, w, stride, 1, 1)
    oh = want.shape[2]
    want_blocked = want.reshape(1, k // kb, kb, oh, oh).transpose(0, 1, 3, 4, 2)
    np.testing.assert_allclose(run(s, [X, W, Y], [x_blocked, w_blocked]), want_blocked, **TOL)
    with pytest.raises(kiln.KilnError, match="blocks of 4 channels but the weights expect"):
        kiln.ops.conv2d_nchwc(X, te.placeholder((2, 2, 3, 3, 2, 6), name="W2"))


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 1)])
@pytest.mark.parametrize("schedule", ["default", "inline_vectorized"])
def test_depthwise_conv2d(rng, stride, pad, schedule):
    n, c, h, w, kh = 2, 5, 10, 10, 3
    X = te.placeholder((n, c, h, w), name="X")
    Wt = te.placeholder((c, 1, kh, kh), name="W")
    P = te.compute((n, c, h + 2 * pad, w + 2 * pad),
                   lambda b, ch, y, x: te.if_then_else(
                       te.all(y >= pad, y < h + pad, x >= pad, x < w + pad), X[b, ch, y - pad, x - pad], 0.0),
                   name="pad")
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kh) // stride + 1
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kh), name="rx")
    Y = te.compute((n, c, oh, ow), lambda b, ch, y, x: te.sum(P[b, ch, y * stride + ry, x * stride + rx] * Wt[ch, 0, ry, rx], axis=[ry, rx]),
                   name="dw")
    s = te.create_schedule(Y)
    if schedule == "inline_vectorized":
        s[P].compute_inline()
        b, ch, y, x = Y.op.axis
        s[Y].reorder(b, ch, y, ry, rx, x)
        s[Y].vectorize(x)
        s[Y].parallel(s[Y].fuse(b, ch))
    x, wt = rand(rng, n, c, h, w), rand(rng, c, 1, kh, kh)
    np.testing.assert_allclose(run(s, [X, Wt, Y], [x, wt]), depthwise_ref(x, wt, stride, pad), **TOL)


# ---------------------------------------------------------------- pooling

@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("schedule", ["default", "parallel"])
def test_pool2d(rng, kind, schedule):
    n, c, h, w, ker, stride = 2, 3, 12, 12, 3, 2
    X = te.placeholder((n, c, h, w), name="X")
    oh, ow = (h - ker) // stride + 1, (w - ker) // stride + 1
    ry = te.reduce_axis((0, ker), name="ry")
    rx = te.reduce_axis((0, ker), name="rx")
    if kind == "max":
        Y = te.compute((n, c, oh, ow), lambda b, ch, y, x: te.max(X[b, ch, y * stride + ry, x * stride + rx], axis=[ry, rx]), name="pool")
    else:
        S = te.compute((n, c, oh, ow), lambda b, ch, y, x: te.sum(X[b, ch, y * stride + ry, x * stride + rx], axis=[ry, rx]), name="psum")
        Y = te.compute((n, c, oh, ow), lambda b, ch, y, x: S[b, ch, y, x] / float(ker * ker), name="pool")
    s = te.create_schedule(Y)
    if schedule == "parallel":
        b, ch, y, x = Y.op.axis
        s[Y].parallel(s[Y].fuse(b, ch))
        if kind == "avg":
            s[S].compute_at(s[Y], y)
    x = rand(rng, n, c, h, w)
    np.testing.assert_allclose(run(s, [X, Y], [x]), pool_ref(x, ker, stride, kind), **TOL)


def test_max_pool_with_padding_from_op_library(rng):
    X = te.placeholder((1, 2, 7, 7), name="X")
    Y = kiln.ops.max_pool2d(X, kernel=3, stride=2, pad=1)
    x = rand(rng, 1, 2, 7, 7)
    np.testing.assert_allclose(run(te.create_schedule(Y), [X, Y], [x]), pool_ref(x, 3, 2, "max", pad=1), **TOL)


# ---------------------------------------------------------------- softmax and layer norm

def softmax_decl(n, m):
    X = te.placeholder((n, m), name="X")
    k1 = te.reduce_axis((0, m), name="k1")
    mx = te.compute((n,), lambda i: te.max(X[i, k1], axis=k1), name="max")
    e = te.compute((n, m), lambda i, j: te.exp(X[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, m), name="k2")
    sm = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="sum")
    Y = te.compute((n, m), lambda i, j: e[i, j] / sm[i], name="softmax")
    return X, mx, e, sm, Y


@pytest.mark.parametrize("schedule", ["default", "fused_rows"])
def test_softmax(rng, schedule):
    n, m = 8, 37
    X, mx, e, sm, Y = softmax_decl(n, m)
    s = te.create_schedule(Y)
    if schedule == "fused_rows":
        i, j = Y.op.axis
        s[Y].parallel(i)
        for stage in (mx, e, sm):
            s[stage].compute_at(s[Y], i)
    x = rand(rng, n, m) * 4
    ref = np.exp(x - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(run(s, [X, Y], [x]), ref, **TOL)


def test_softmax_from_op_library(rng):
    X = te.placeholder((4, 16), name="X")
    Y = kiln.ops.softmax(X)
    x = rand(rng, 4, 16)
    ref = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    np.testing.assert_allclose(run(te.create_schedule(Y), [X, Y], [x]), ref, **TOL)


@pytest.mark.parametrize("schedule", ["default", "parallel_vectorized"])
def test_layer_norm(rng, schedule):
    n, m, eps = 6, 32, 1e-5
    X = te.placeholder((n, m), name="X")
    G = te.placeholder((m,), name="gamma")
    Bt = te.placeholder((m,), name="beta")
    k1 = te.reduce_axis((0, m), name="k1")
    mean = te.compute((n,), lambda i: te.sum(X[i, k1] / m, axis=k1), name="mean")
    k2 = te.reduce_axis((0, m), name="k2")
    var = te.compute((n,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]) / m, axis=k2), name="var")
    Y = te.compute((n, m), lambda i, j: (X[i, j] - mean[i]) * te.rsqrt(var[i] + eps) * G[j] + Bt[j], name="ln")
    s = te.create_schedule(Y)
    if schedule == "parallel_vectorized":
        i, j = Y.op.axis
        s[Y].parallel(i)
        s[Y].vectorize(j)
    x, g, bt = rand(rng, n, m), rand(rng, m), rand(rng, m)
    mu = x.mean(1, keepdims=True)
    ref = (x - mu) / np.sqrt(x.var(1, keepdims=True) + eps) * g + bt
    np.testing.assert_allclose(run(s, [X, G, Bt, Y], [x, g, bt]), ref, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- transpose and elementwise

@pytest.mark.parametrize("schedule", ["default", "tiled"])
def test_transpose(rng, schedule):
    X = te.placeholder((33, 20), name="X")
    Y = te.compute((20, 33), lambda i, j: X[j, i], name="T")
    s = te.create_schedule(Y)
    if schedule == "tiled":
        io, jo, ii, ji = s[Y].tile(Y.op.axis[0], Y.op.axis[1], 8, 8)
        s[Y].unroll(ii)
        s[Y].parallel(io)
    x = rand(rng, 33, 20)
    np.testing.assert_array_equal(run(s, [X, Y], [x]), x.T)


@pytest.mark.parametrize("schedule", ["separate", "inlined_vectorized"])
def test_elementwise_chain(rng, schedule):
    n, m = 17, 40
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((m,), name="B")
    t1 = te.compute((n, m), lambda i, j: A[i, j] + B[j], name="bias")
    t2 = te.compute((n, m), lambda i, j: te.maximum(t1[i, j], 0.0), name="relu")
    t3 = te.compute((n, m), lambda i, j: te.sigmoid(t2[i, j]) * 2.0 - te.tanh(t1[i, j]) + te.exp(-te.abs(A[i, j])), name="mix")
    Y = te.compute((n, m), lambda i, j: te.select(A[i, j] > 0.5, t3[i, j], t3[i, j] / 3.0), name="out")
    s = te.create_schedule(Y)
    if schedule == "inlined_vectorized":
        for t in (t1, t2, t3):
            s[t].compute_inline()
        jo, ji = s[Y].split(Y.op.axis[1], factor=8)
        s[Y].vectorize(ji)
        s[Y].parallel(Y.op.axis[0])
    a, b = rand(rng, n, m), rand(rng, m)
    r1 = a + b
    r3 = 1 / (1 + np.exp(-np.maximum(r1, 0))) * 2 - np.tanh(r1) + np.exp(-np.abs(a))
    ref = np.where(a > 0.5, r3, r3 / 3)
    np.testing.assert_allclose(run(s, [A, B, Y], [a, b]), ref, rtol=1e-5, atol=1e-5)


def test_integer_floordiv_floormod_match_python(rng):
    n = 16
    A = te.placeholder((n,), "int32", name="A")
    Q = te.compute((n,), lambda i: A[i] // 3 + A[i] % 5 * 100, name="Q")
    a = rng.integers(-50, 50, n).astype("int32")
    np.testing.assert_array_equal(run(te.create_schedule(Q), [A, Q], [a]), a // 3 + a % 5 * 100)


# lower.h: "scalar shape variables follow as int32 parameters"; until lowering
# adds them, build reports the free variable (a KilnError, not a crash).
def test_symbolic_shape_with_scalar_argument(rng):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B)
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(xi)
    mod = kiln.build(s, [A, B])
    for size in (5, 64):
        a = rand(rng, size)
        b = np.zeros(size, "float32")
        mod(a, b, size)
        np.testing.assert_allclose(b, a * 2 + 1, **TOL)


@pytest.mark.parametrize("schedule", ["rfactor", "rfactor_vectorized"])
def test_rfactor_reduction(rng, schedule):
    n, m = 4, 256
    X = te.placeholder((n, m), name="X")
    k = te.reduce_axis((0, m), name="k")
    Y = te.compute((n,), lambda i: te.sum(X[i, k], axis=k), name="Y")
    s = te.create_schedule(Y)
    ko, ki = s[Y].split(k, factor=8)
    YF = s.rfactor(Y, ki, factor_axis=1)
    assert YF.shape == (n, 8)
    if schedule == "rfactor_vectorized":
        # the partial sums are independent lanes: reduce over ko with ki vectorized
        i, kv = s[YF].op.axis
        s[YF].reorder(i, *s[YF].op.reduce_axis, kv)
        s[YF].vectorize(kv)
        s[Y].parallel(Y.op.axis[0])  # Y.op.axis still names Y's loop after rfactor
    x = rand(rng, n, m)
    np.testing.assert_allclose(run(s, [X, Y], [x]), x.sum(1), rtol=1e-5, atol=1e-5)
