"""The graph compiler's neural-network operators (Conv, Gemm, MatMul, pooling,
reductions, Softmax, LayerNormalization) against PyTorch and numpy: one op at
a time through kiln.graph.run_op (plain kernels), and small fused graphs
through kiln.compile (default schedules)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln.graph import Builder, run_op

RTOL = ATOL = 1e-4


def close(got, want, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(got, np.asarray(want, dtype=np.float32), rtol=rtol, atol=atol)


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def compile_run(op, feeds, epilogue=None, layout=True, **attrs):
    """`op` on `feeds`, (kind, array) pairs in input order with kind "in" (a graph input) or "const",
    optionally followed by `epilogue(builder, y)`; compiled with default schedules and fusion.
    Returns (output, executor)."""
    b = Builder()
    vals, feed = [], []
    for i, (kind, a) in enumerate(feeds):
        if a is None:
            vals.append(None)
        elif kind == "in":
            vals.append(b.input(f"x{i}", a.shape, str(a.dtype)))
            feed.append(a)
        else:
            vals.append(b.constant(f"c{i}", a))
    y = b.op(op, *vals, **attrs)
    if epilogue:
        y = epilogue(b, y)
    exe = kiln.compile(b.build(y), layout=layout)
    return exe(*feed)[0], exe


# ---------------------------------------------------------------- Conv

def torch_conv(x, w, bias, strides, pads, dilations, group):
    """ONNX pads [begin..., end...] applied with F.pad (any asymmetry), then PyTorch's conv."""
    r = x.ndim - 2
    spec = []
    for j in reversed(range(r)):
        spec += [pads[j], pads[j + r]]
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[r]
    return conv(F.pad(t(x), spec), t(w), None if bias is None else t(bias), stride=strides, dilation=dilations, groups=group).numpy()


def same_pads(size, kernel, stride, dilation, upper):
    """ONNX's SAME padding of one dim: out = ceil(size / stride), the odd pad at the end (UPPER) or start (LOWER)."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - size)
    small = total // 2
    return (small, total - small) if upper else (total - small, small)


CONV_CASES = [
    # (x shape, w shape, attrs)
    ((2, 4, 9, 9), (6, 4, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 4, 8, 7), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),                           # groups
    ((1, 6, 9, 9), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),                           # depthwise
    ((1, 4, 9, 9), (8, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1], strides=[2, 2])),           # depthwise x2 multiplier, stride 2
    ((1, 3, 11, 10), (5, 3, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),               # dilation 2
    ((1, 3, 11, 10), (5, 3, 3, 2), dict(strides=[2, 2], pads=[0, 1, 2, 0])),                 # stride 2, asymmetric pads
    ((2, 3, 10, 9), (4, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ((2, 3, 10, 9), (4, 3, 4, 4), dict(auto_pad="SAME_LOWER", strides=[1, 2])),
    ((1, 3, 9, 8), (4, 3, 3, 3), dict(auto_pad="VALID", strides=[2, 1])),
    ((2, 8, 5, 6), (4, 8, 1, 1), dict()),                                                     # 1x1
    ((1, 8, 7, 7), (4, 8, 1, 1), dict(strides=[2, 2])),                                        # 1x1 stride 2
    ((1, 6, 7, 7), (6, 2, 3, 1), dict(group=3, pads=[1, 0, 1, 0], kernel_shape=[3, 1])),
    ((1, 4, 7, 7), (4, 4, 7, 7), dict()),                                                     # kernel as large as the input
    ((2, 4, 13), (4, 2, 3), dict(group=2, pads=[2, 1], strides=[2], dilations=[2])),          # 1-D
    ((1, 2, 5, 6, 5), (3, 2, 3, 2, 3), dict(pads=[1, 0, 1, 1, 1, 0])),                        # 3-D
    # 16+ output channels (a multiple of 8) and group 1: computed with the output channel innermost
    ((2, 5, 9, 8), (16, 5, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 3, 11, 10), (24, 3, 3, 2), dict(strides=[2, 2], pads=[0, 1, 2, 0], dilations=[2, 1])),
    ((1, 1, 9, 9), (16, 1, 5, 5), dict(auto_pad="SAME_LOWER", strides=[2, 2])),               # one input channel
    ((2, 8, 5, 6), (32, 8, 1, 1), dict()),                                                    # 1x1
    ((1, 4, 6, 6), (16, 4, 6, 6), dict()),                                                    # 1x1 output
    ((2, 4, 13), (16, 4, 3), dict(pads=[2, 1], strides=[2], dilations=[2])),                  # 1-D
    ((1, 2, 5, 6, 5), (16, 2, 3, 2, 3), dict(pads=[1, 0, 1, 1, 1, 0])),                       # 3-D
]


def resolved(x_shape, w_shape, attrs):
    """strides, pads, dilations, group as the reference wants them (SAME and VALID resolved here)."""
    r = len(x_shape) - 2
    strides = attrs.get("strides", [1] * r)
    dil = attrs.get("dilations", [1] * r)
    pads = list(attrs.get("pads", [0] * 2 * r))
    mode = attrs.get("auto_pad", "NOTSET")
    if mode.startswith("SAME"):
        pr = [same_pads(x_shape[j + 2], w_shape[j + 2], strides[j], dil[j], mode == "SAME_UPPER") for j in range(r)]
        pads = [p[0] for p in pr] + [p[1] for p in pr]
    elif mode == "VALID":
        pads = [0] * 2 * r
    return strides, pads, dil, attrs.get("group", 1)


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv_run_op(rng, x_shape, w_shape, attrs, with_bias):
    x, w = rand(rng, *x_shape), rand(rng, *w_shape)
    b = rand(rng, w_shape[0]) if with_bias else None
    (y,) = run_op("Conv", [x, w, b] if with_bias else [x, w], **attrs)
    strides, pads, dil, group = resolved(x_shape, w_shape, attrs)
    close(y, torch_conv(x, w, b, strides, pads, dil, group))


def test_conv_same_upper_matches_torch_same(rng):
    # An independent check of the SAME rule: PyTorch's padding="same" (stride 1) puts the odd pad at the end.
    x, w = rand(rng, 1, 3, 8, 9), rand(rng, 4, 3, 4, 3)
    (y,) = run_op("Conv", [x, w], auto_pad="SAME_UPPER")
    close(y, F.conv2d(t(x), t(w), padding="same").numpy())


@pytest.mark.parametrize("x_shape,w_shape,attrs", [CONV_CASES[i] for i in (0, 1, 2, 5, 6, 9, 13, 15, 16, 17, 18, 20)])
def test_conv_bias_relu_compiled(rng, x_shape, w_shape, attrs):
    """Conv + bias + Relu: one fused kernel with the default schedule (NCHW), and the same in NCHWc."""
    x, w, b = rand(rng, *x_shape), rand(rng, *w_shape), rand(rng, w_shape[0])
    strides, pads, dil, group = resolved(x_shape, w_shape, attrs)
    expected = np.maximum(torch_conv(x, w, b, strides, pads, dil, group), 0)
    y, exe = compile_run("Conv", [("in", x), ("const", w), ("const", b)], lambda bd, v: bd.op("Relu", v), layout=False, **attrs)
    close(y, expected)
    assert exe.num_kernels == 1
    # Blocked layout: the conv group plus layout changes at the graph's NCHW boundary (when the conv is blocked).
    y, exe = compile_run("Conv", [("in", x), ("const", w), ("const", b)], lambda bd, v: bd.op("Relu", v), **attrs)
    close(y, expected)
    assert exe.num_kernels in (1, 3)


@pytest.mark.parametrize("k,group", [(4, 2), (16, 1)])
def test_conv_with_input_weights_compiled(rng, k, group):
    # Weights fed at run time (not constants) work the same.
    x, w, b = rand(rng, 1, 4, 6, 6), rand(rng, k, 4 // group, 3, 3), rand(rng, k)
    y, _ = compile_run("Conv", [("in", x), ("in", w), ("in", b)], group=group, pads=[0, 1, 1, 0])
    close(y, torch_conv(x, w, b, [1, 1], [0, 1, 1, 0], [1, 1], group))


# ---------------------------------------------------------------- Gemm and MatMul

@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("c_shape", [None, (5,), (3, 5), (1, 5), (3, 1), (1,)])
def test_gemm_run_op(rng, trans_a, trans_b, c_shape):
    M, K, N = 3, 4, 5
    a = rand(rng, *((K, M) if trans_a else (M, K)))
    b = rand(rng, *((N, K) if trans_b else (K, N)))
    c = None if c_shape is None else rand(rng, *c_shape)
    alpha, beta = 0.5, -1.5
    (y,) = run_op("Gemm", [a, b] + ([c] if c is not None else []), alpha=alpha, beta=beta, transA=trans_a, transB=trans_b)
    ref = alpha * (a.T if trans_a else a) @ (b.T if trans_b else b)
    if c is not None:
        ref = ref + beta * c
    close(y, ref)


def test_gemm_defaults_and_compiled(rng):
    # Defaults alpha = beta = 1; a Linear layer (transB) with its bias and a Relu, fused.
    a, w, c = rand(rng, 4, 6), rand(rng, 8, 6), rand(rng, 8)
    (y,) = run_op("Gemm", [a, w, c], transB=1)
    close(y, a @ w.T + c)
    y2, exe = compile_run("Gemm", [("in", a), ("const", w), ("const", c)], lambda bd, v: bd.op("Relu", v), transB=1, alpha=2.0)
    close(y2, np.maximum(2 * a @ w.T + c, 0))
    assert exe.num_kernels == 1


MATMUL_CASES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4, 5), (2, 3, 5, 4)),     # [b, h, s, d] x [b, h, d, s]
    ((2, 3, 4), (4, 5)),              # [b, s, k] x [k, n]
    ((4,), (4, 5)),                   # 1-D A
    ((3, 4), (4,)),                   # 1-D B
    ((4,), (4,)),                     # dot product: a scalar
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 3)),
    ((2, 1, 3, 4), (5, 4, 2)),        # broadcast batch dims
    ((1, 3, 4), (2, 4, 5)),
]


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_CASES)
def test_matmul_run_op(rng, a_shape, b_shape):
    a, b = rand(rng, *a_shape), rand(rng, *b_shape)
    (y,) = run_op("MatMul", [a, b])
    want = np.matmul(a, b)
    assert y.shape == want.shape
    close(y, want)


@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 8), (8, 16)), ((2, 3, 4, 5), (2, 3, 5, 4)), ((5, 8), (8,))])
def test_matmul_add_compiled(rng, a_shape, b_shape):
    """MatMul with constant B and a bias Add: one fused kernel."""
    a, b = rand(rng, *a_shape), rand(rng, *b_shape)
    want = np.matmul(a, b)
    bias = rand(rng, want.shape[-1]) if want.ndim else rand(rng, 1)
    b_ = Builder()
    x = b_.input("a", a.shape)
    y = b_.op("Add", b_.op("MatMul", x, b_.constant("b", b)), b_.constant("bias", bias))
    exe = kiln.compile(b_.build(y))
    close(exe(a)[0], want + bias)
    assert exe.num_kernels == 1


# ---------------------------------------------------------------- pooling

def torch_pool(kind, x, kernel, strides, pads, dil=None, ceil=False, include_pad=False):
    """PyTorch's pools; asymmetric pads through F.pad (-inf for max; for average, sums over the
    padded input divided by the counts of a padded ones array)."""
    r = x.ndim - 2
    sym = pads[:r] == pads[r:]
    spec = []
    for j in reversed(range(r)):
        spec += [pads[j], pads[j + r]]
    if kind == "max":
        fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[r]
        if ceil:  # PyTorch's ceil rule; it pads symmetrically only
            assert sym
            return fn(t(x), kernel, strides, pads[:r], dilation=dil or 1, ceil_mode=True).numpy()
        return fn(F.pad(t(x), spec, value=-np.inf), kernel, strides, 0, dilation=dil or 1).numpy()
    fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[r]
    if sym:
        return fn(t(x), kernel, strides, pads[:r], ceil_mode=ceil, count_include_pad=include_pad).numpy()
    assert not ceil and r >= 2  # divisor_override: 2-D and 3-D only
    s = fn(F.pad(t(x), spec), kernel, strides, divisor_override=1)
    ones = torch.ones((1, 1) + x.shape[2:])
    n = fn(torch.ones((1, 1) + tuple(F.pad(ones, spec).shape[2:])) if include_pad else F.pad(ones, spec), kernel, strides, divisor_override=1)
    return (s / n).numpy()


POOL_CASES = [
    # (x shape, kernel, strides, pads, ceil_mode, dilations)
    ((1, 3, 9, 9), [3, 3], [2, 2], [1, 1, 1, 1], 0, None),
    ((2, 2, 8, 8), [2, 2], [2, 2], [0, 0, 0, 0], 0, None),
    ((1, 2, 10, 9), [3, 3], [2, 2], [1, 1, 1, 1], 1, None),      # ceil_mode: the last window overhangs
    ((1, 2, 6, 6), [3, 3], [2, 2], [1, 1, 1, 1], 1, None),       # ceil_mode: a window starting in the padding is dropped
    ((1, 2, 7, 8), [2, 3], [1, 2], [0, 1, 1, 0], 0, None),       # asymmetric pads
    ((1, 2, 7, 7), [3, 1], [1, 1], [0, 0, 0, 0], 0, None),       # a 1-wide window dim
    ((2, 3, 11), [3], [2], [1, 1], 1, None),                      # 1-D
]


@pytest.mark.parametrize("x_shape,kernel,strides,pads,ceil,dil", POOL_CASES)
def test_max_pool(rng, x_shape, kernel, strides, pads, ceil, dil):
    x = rand(rng, *x_shape)
    (y,) = run_op("MaxPool", [x], kernel_shape=kernel, strides=strides, pads=pads, ceil_mode=ceil)
    close(y, torch_pool("max", x, kernel, strides, pads, ceil=bool(ceil)))


def test_max_pool_dilation_and_same(rng):
    x = rand(rng, 1, 2, 10, 9)
    (y,) = run_op("MaxPool", [x], kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 1, 2, 1])
    close(y, torch_pool("max", x, [3, 3], [1, 1], [2, 1, 2, 1], dil=[2, 2]))
    (y,) = run_op("MaxPool", [x], kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")
    ph, pw = same_pads(10, 3, 2, 1, True), same_pads(9, 2, 2, 1, True)
    want = torch_pool("max", x, [3, 2], [2, 2], [ph[0], pw[0], ph[1], pw[1]])
    assert y.shape == (1, 2, 5, 5)
    close(y, want)
    xi = rng.integers(-100, 100, size=(1, 2, 5, 6)).astype(np.int32)
    (y,) = run_op("MaxPool", [xi], kernel_shape=[2, 2], pads=[1, 1, 1, 1])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, torch_pool("max", xi.astype(np.float32), [2, 2], [1, 1], [1, 1, 1, 1]).astype(np.int32))


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("x_shape,kernel,strides,pads,ceil,dil", POOL_CASES)
def test_average_pool(rng, x_shape, kernel, strides, pads, ceil, dil, include_pad):
    x = rand(rng, *x_shape)
    if len(kernel) == 1 and pads[0] != pads[1]:
        pytest.skip("no 1-D asymmetric reference")
    (y,) = run_op("AveragePool", [x], kernel_shape=kernel, strides=strides, pads=pads, ceil_mode=ceil, count_include_pad=include_pad)
    close(y, torch_pool("avg", x, kernel, strides, pads, ceil=bool(ceil), include_pad=bool(include_pad)))


def test_average_pool_default_excludes_pad(rng):
    # ONNX's count_include_pad defaults to 0 (PyTorch's to True): a corner averages 4 elements, not 9.
    x = np.ones((1, 1, 4, 4), np.float32)
    (y,) = run_op("AveragePool", [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    close(y, np.ones((1, 1, 4, 4)))


def test_global_pools(rng):
    x = rand(rng, 2, 3, 5, 7)
    (y,) = run_op("GlobalAveragePool", [x])
    close(y, x.mean(axis=(2, 3), keepdims=True))
    (y,) = run_op("GlobalMaxPool", [x])
    close(y, x.max(axis=(2, 3), keepdims=True))
    x1 = rand(rng, 2, 3, 6)
    close(run_op("GlobalAveragePool", [x1])[0], x1.mean(axis=2, keepdims=True))


def test_pools_compiled(rng):
    """Conv -> Relu -> MaxPool (ceil_mode) -> GlobalAveragePool with default schedules."""
    x, w = rand(rng, 1, 3, 12, 12), rand(rng, 8, 3, 3, 3)
    b = Builder()
    v = b.input("x", x.shape)
    v = b.op("Relu", b.op("Conv", v, b.constant("w", w), pads=[1, 1, 1, 1]))
    v = b.op("MaxPool", v, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    p = b.op("AveragePool", v, kernel_shape=[2, 2], pads=[1, 1, 0, 0])
    g = b.op("GlobalAveragePool", v)
    exe = kiln.compile(b.build(p, g))
    got_p, got_g = exe(x)
    ref = F.max_pool2d(F.relu(F.conv2d(t(x), t(w), padding=1)), 3, 2, 1, ceil_mode=True).numpy()
    close(got_g, ref.mean(axis=(2, 3), keepdims=True))
    close(got_p, torch_pool("avg", ref, [2, 2], [1, 1], [1, 1, 0, 0]))


# ---------------------------------------------------------------- reductions

REDUCE_REF = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max, "ReduceMin": np.min}


@pytest.mark.parametrize("op", list(REDUCE_REF))
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([1], 0), ([-1, 0], 1), ([0, 2], 0), (None, 1), (None, 0), ([-2], 0)])
def test_reduce(rng, op, axes, keepdims):
    x = rand(rng, 3, 4, 5)
    if op == "ReduceSum":
        inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
        (y,) = run_op(op, inputs, keepdims=keepdims)
    else:
        (y,) = run_op(op, [x], keepdims=keepdims, **({} if axes is None else {"axes": axes}))
    want = REDUCE_REF[op](x, axis=None if axes is None else tuple(axes), keepdims=bool(keepdims))
    assert y.shape == np.shape(want)
    close(y, want)


def test_reduce_sum_noop_and_ints(rng):
    x = rand(rng, 2, 3)
    (y,) = run_op("ReduceSum", [x, np.zeros(0, np.int64)], noop_with_empty_axes=1)
    close(y, x)
    (y,) = run_op("ReduceSum", [x, np.zeros(0, np.int64)])
    close(y, x.sum(keepdims=True))
    xi = rng.integers(-50, 50, size=(3, 4)).astype(np.int64)
    (y,) = run_op("ReduceSum", [xi, np.array([0], np.int32)], keepdims=0)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, xi.sum(axis=0))
    (y,) = run_op("ReduceMax", [xi], axes=[1])
    np.testing.assert_array_equal(y, xi.max(axis=1, keepdims=True))


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax(rng, axis):
    x = rand(rng, 3, 4, 6) * 30 + 100  # large values: only a max-subtracting softmax stays finite
    (y,) = run_op("Softmax", [x], axis=axis)
    assert np.isfinite(y).all()
    close(y, torch.softmax(t(x), dim=axis).numpy(), rtol=1e-4, atol=1e-6)


def test_softmax_default_axis_and_1d(rng):
    x = rand(rng, 2, 7)
    close(run_op("Softmax", [x])[0], torch.softmax(t(x), -1).numpy())
    x1 = rand(rng, 5)
    close(run_op("Softmax", [x1])[0], torch.softmax(t(x1), 0).numpy())


@pytest.mark.parametrize("axis,scale_shape,with_bias", [(-1, (8,), True), (-1, (8,), False), (1, (4, 8), True), (-2, (1, 8), True), (2, (8,), True)])
def test_layer_norm(rng, axis, scale_shape, with_bias):
    x = rand(rng, 2, 3, 4, 8) * 3 + 1
    norm = x.shape[axis:]
    scale = rand(rng, *scale_shape)
    bias = rand(rng, *scale_shape) if with_bias else None
    (y,) = run_op("LayerNormalization", [x, scale] + ([bias] if with_bias else []), axis=axis, epsilon=1e-3)
    s_full = np.broadcast_to(scale, norm)
    b_full = None if bias is None else np.broadcast_to(bias, norm)
    want = F.layer_norm(t(x), tuple(norm), t(s_full.copy()), None if b_full is None else t(b_full.copy()), eps=1e-3).numpy()
    close(y, want)


def test_matmul_softmax_layernorm_compiled(rng):
    """Attention-like: MatMul -> Softmax -> MatMul -> Add -> LayerNormalization with default schedules."""
    q, k, v = rand(rng, 2, 6, 8), rand(rng, 2, 8, 6), rand(rng, 2, 6, 8)
    gamma, beta = rand(rng, 8), rand(rng, 8)
    b = Builder()
    qi = b.input("q", q.shape)
    s = b.op("Softmax", b.op("MatMul", qi, b.constant("k", k)), axis=-1)
    o = b.op("Add", b.op("MatMul", s, b.constant("v", v)), qi)
    y = b.op("LayerNormalization", o, b.constant("g", gamma), b.constant("b", beta))
    r = b.op("ReduceMean", y, axes=[-1], keepdims=0)
    exe = kiln.compile(b.build(y, r))
    got_y, got_r = exe(q)
    ref = torch.softmax(t(q) @ t(k), -1) @ t(v) + t(q)
    ref = F.layer_norm(ref, (8,), t(gamma), t(beta)).numpy()
    close(got_y, ref)
    close(got_r, ref.mean(-1))


# ---------------------------------------------------------------- errors

def make(op, shapes, **attrs):
    b = Builder()
    return b.op(op, *[b.input(f"x{i}", s) for i, s in enumerate(shapes)], name="n", **attrs)


def test_conv_errors():
    with pytest.raises(kiln.KilnError, match=r"Conv node 'n'.*has 3 channels.*expects 4"):
        make("Conv", [(1, 3, 8, 8), (2, 4, 3, 3)])
    with pytest.raises(kiln.KilnError, match=r"group 3 does not divide the 4 input channels"):
        make("Conv", [(1, 4, 8, 8), (6, 2, 3, 3)], group=3)
    with pytest.raises(kiln.KilnError, match=r"group 2 does not divide the 3 output channels"):
        make("Conv", [(1, 4, 8, 8), (3, 2, 3, 3)], group=2)
    with pytest.raises(kiln.KilnError, match=r"group 0 must be positive"):
        make("Conv", [(1, 4, 8, 8), (3, 2, 3, 3)], group=0)
    with pytest.raises(kiln.KilnError, match=r"kernel \(5 wide.*larger than the input \(4 plus pads 0 \+ 0\)"):
        make("Conv", [(1, 2, 4, 8), (3, 2, 5, 3)])
    with pytest.raises(kiln.KilnError, match=r"kernel_shape \[3, 3\] does not match W"):
        make("Conv", [(1, 2, 8, 8), (3, 2, 5, 5)], kernel_shape=[3, 3])
    with pytest.raises(kiln.KilnError, match=r"pads \[1, 1\] has 2 values but the input has 2 spatial dims, so it needs 4"):
        make("Conv", [(1, 2, 8, 8), (3, 2, 3, 3)], pads=[1, 1])
    with pytest.raises(kiln.KilnError, match=r"bias B float32\[4\] must be \[3\]"):
        make("Conv", [(1, 2, 8, 8), (3, 2, 3, 3), (4,)])
    with pytest.raises(kiln.KilnError, match=r"auto_pad 'SAME'"):
        make("Conv", [(1, 2, 8, 8), (3, 2, 3, 3)], auto_pad="SAME")


def test_matmul_gemm_errors():
    with pytest.raises(kiln.KilnError, match=r"MatMul node 'n'.*last dimension is 4 but B's second-to-last dimension is 5"):
        make("MatMul", [(3, 4), (5, 6)])
    with pytest.raises(kiln.KilnError, match=r"batch dimensions .* do not broadcast"):
        make("MatMul", [(2, 3, 4), (3, 4, 5)])
    with pytest.raises(kiln.KilnError, match=r"Gemm node 'n'.*A\^T is 4x3 but B is 4x5"):
        make("Gemm", [(3, 4), (4, 5)], transA=1)
    with pytest.raises(kiln.KilnError, match=r"C float32\[4\] does not broadcast to the output \[3, 5\]"):
        make("Gemm", [(3, 4), (4, 5), (4,)])


def test_pool_and_reduce_errors():
    with pytest.raises(kiln.KilnError, match=r"MaxPool node 'n'.*kernel \(5 wide.*larger than the input"):
        make("MaxPool", [(1, 2, 4, 4)], kernel_shape=[5, 5])
    with pytest.raises(kiln.KilnError, match=r"lacks the required attribute 'kernel_shape'"):
        make("AveragePool", [(1, 2, 4, 4)])
    with pytest.raises(kiln.KilnError, match=r"kernel_shape has 1 dims but X"):
        make("MaxPool", [(1, 2, 4, 4)], kernel_shape=[2])
    with pytest.raises(kiln.KilnError, match=r"must be smaller than the window"):
        make("AveragePool", [(1, 2, 4, 4)], kernel_shape=[2, 2], pads=[2, 0, 0, 0])
    with pytest.raises(kiln.KilnError, match=r"ReduceMean node 'n'.*axis 3 is out of range for rank 3"):
        make("ReduceMean", [(2, 3, 4)], axes=[3])
    with pytest.raises(kiln.KilnError, match=r"name axis 1 twice"):
        make("ReduceMax", [(2, 3, 4)], axes=[1, -2])
    with pytest.raises(kiln.KilnError, match=r"input 1 \(axes\) must be a constant"):
        make("ReduceSum", [(2, 3, 4), (1,)])
    with pytest.raises(kiln.KilnError, match=r"Softmax node 'n'.*axis 2 is out of range"):
        make("Softmax", [(2, 3)], axis=2)
    with pytest.raises(kiln.KilnError, match=r"Scale float32\[4\] does not broadcast to the normalised shape \[3\]"):
        make("LayerNormalization", [(2, 3), (4,)])
