"""Reverse-mode differentiation (kiln.graph.gradients): every operator's
gradient against central finite differences (float64 where the op takes it),
and whole models against PyTorch's autograd."""
import numpy as np
import pytest
import torch

import kiln
from kiln import graph as kg
from kiln._ffi import _kiln

RNG = np.random.default_rng(0)


def _graph(op, inputs, attrs, const_inputs):
    """loss = sum(op(inputs) * R) with R random, so each output element weighs differently."""
    b = kg.Builder()
    vals = []
    for i, a in enumerate(inputs):
        if a is None:
            vals.append(None)
        elif i in const_inputs or not np.issubdtype(a.dtype, np.floating):
            vals.append(b.constant(f"c{i}", a))
        else:
            vals.append(b.input(f"x{i}", a.shape, str(a.dtype)))
    ys = b.op(op, *vals, outputs=True, **attrs)
    loss = None
    for k, y in enumerate(ys):
        r = RNG.standard_normal(y.shape).astype(y.dtype)
        term = b.op("ReduceSum", b.op("Mul", y, b.constant(f"r{k}", r)), keepdims=0)
        loss = term if loss is None else b.op("Add", loss, term)
    return b.build(loss), [v for i, v in enumerate(vals) if v is not None and not v.is_constant]


def check_grad(op, inputs, rtol=1e-5, atol=1e-7, eps=1e-6, **attrs):
    """Compares kiln's gradient of every float graph input with central differences."""
    const_inputs = set(_kiln.graph.op_const_inputs(op))
    graph, wrt = _graph(op, inputs, attrs, const_inputs)
    feed = [a for i, a in enumerate(inputs) if a is not None and i not in const_inputs and np.issubdtype(a.dtype, np.floating)]
    grads = kiln.compile(kg.gradient_graph(graph, wrt))(*feed)[1:]
    forward = kiln.compile(graph)
    for k, (a, g) in enumerate(zip(feed, grads)):
        num = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            saved = a[idx]
            a[idx] = saved + eps
            hi = forward(*feed)[0]
            a[idx] = saved - eps
            lo = forward(*feed)[0]
            a[idx] = saved
            num[idx] = (hi - lo) / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=rtol, atol=atol, err_msg=f"{op} input {k}")


def rand(*shape, lo=None):
    a = RNG.standard_normal(shape)
    if lo is not None:
        a = lo + np.abs(a)
    return a


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((3, 1, 4), (2, 4)), ((), (2, 3)), ((4,), (3, 1))])
def test_binary_broadcast(op, shapes):
    check_grad(op, [rand(*shapes[0]), rand(*shapes[1], lo=0.5 if op == "Div" else None)])


@pytest.mark.parametrize("op,lo", [("Neg", None), ("Exp", None), ("Log", 0.5), ("Sqrt", 0.5), ("Erf", None), ("Reciprocal", 0.5),
                                   ("Relu", None), ("Sigmoid", None), ("Tanh", None), ("Softplus", None), ("Identity", None)])
def test_unary(op, lo):
    x = rand(3, 4, lo=lo)
    if op == "Relu":
        x[np.abs(x) < 1e-3] = 0.5  # away from the kink
    check_grad(op, [x])


@pytest.mark.parametrize("op,attrs", [("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.7})])
def test_unary_attrs(op, attrs):
    x = rand(2, 5)
    x[np.abs(x) < 1e-3] = 0.5
    check_grad(op, [x], **attrs)


def test_clip():
    x = np.linspace(-2, 2, 12).reshape(3, 4) + 0.013
    check_grad("Clip", [x, np.array(-1.0), np.array(1.0)])


def test_pow():
    check_grad("Pow", [rand(2, 3, lo=0.5), np.array(3.0)])
    check_grad("Pow", [rand(2, 3, lo=0.5), rand(3)])


@pytest.mark.parametrize("a,b", [((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((4,), (4, 5)), ((2, 3, 4), (4,)), ((2, 1, 3, 4), (3, 4, 2)), ((4,), (4,)),
                                 ((2, 3, 4), (1, 4, 5)), ((2, 2, 3, 4), (4, 2))])
def test_matmul(a, b):
    check_grad("MatMul", [rand(*a), rand(*b)])


def test_matmul_weight_gradient_reads_the_activation_transposed_without_a_copy():
    """A weight shared by a batch ([2, 3, 4] x [4, 5]): its gradient is one Gemm with transA, no Transpose kernel
    copying the activation first (check_grad's test_matmul checks the values)."""
    b = kg.Builder()
    x, w = b.input("x", (2, 3, 4)), b.input("w", (4, 5))
    text = str(kg.gradient_graph(b.build(b.op("ReduceSum", b.op("MatMul", x, w), keepdims=0)), [w]))
    assert "Transpose" not in text and "transA=1" in text, text


@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm(ta, tb):
    a = rand(4, 3) if ta else rand(3, 4)
    b = rand(5, 4) if tb else rand(4, 5)
    check_grad("Gemm", [a, b, rand(5)], transA=ta, transB=tb, alpha=0.7, beta=1.3)


@pytest.mark.parametrize("x,w,attrs", [
    ((2, 3, 6, 5), (4, 3, 3, 3), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((1, 4, 7, 7), (4, 2, 3, 2), {"group": 2, "dilations": [2, 1], "pads": [1, 1, 1, 1]}),
    ((1, 3, 5, 5), (3, 1, 3, 3), {"group": 3, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 2, 9), (3, 2, 3), {"strides": [3], "pads": [2, 1]}),
    ((1, 2, 4, 5), (3, 2, 1, 2), {"pads": [1, 2, 1, 0], "strides": [2, 1]}),  # pads as wide as the window: the direct form
])
def test_conv(x, w, attrs):
    check_grad("Conv", [rand(*x), rand(*w), rand(w[0])], **attrs)


def test_conv_float32():
    # float32 with a loose tolerance: the path models train in.
    check_grad("Conv", [rand(2, 3, 6, 6).astype("float32"), rand(4, 3, 3, 3).astype("float32")], rtol=2e-2, atol=2e-2, eps=1e-2, pads=[1, 1, 1, 1])


@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                                   {"kernel_shape": [2, 3], "strides": [2, 1], "ceil_mode": 1},
                                   {"kernel_shape": [2, 2], "dilations": [2, 2]}])
def test_max_pool(attrs):
    x = RNG.permutation(2 * 3 * 7 * 6).reshape(2, 3, 7, 6) * 0.1  # distinct values: no ties
    check_grad("MaxPool", [x.astype("float64")], **attrs)


def test_max_pool_ties_go_to_the_first():
    x = np.zeros((1, 1, 4, 4), "float32")
    b = kg.Builder()
    xi = b.input("x", x.shape)
    loss = b.op("ReduceSum", b.op("MaxPool", xi, kernel_shape=[2, 2], strides=[2, 2]), keepdims=0)
    (g,) = kiln.compile(kg.gradient_graph(b.build(loss), [xi]))(x)[1:]
    xt = torch.zeros(1, 1, 4, 4, requires_grad=True)
    torch.nn.functional.max_pool2d(xt, 2, 2).sum().backward()
    np.testing.assert_array_equal(g, xt.grad.numpy())


@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                                   {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 2], "count_include_pad": 1},
                                   {"kernel_shape": [2, 3], "ceil_mode": 1, "strides": [2, 2]}])
def test_avg_pool(attrs):
    check_grad("AveragePool", [rand(2, 2, 6, 5)], **attrs)


def test_global_avg_pool():
    check_grad("GlobalAveragePool", [rand(2, 3, 4, 5)])


@pytest.mark.parametrize("axis", [1, -1])
def test_softmax(axis):
    check_grad("Softmax", [rand(2, 3, 4)], axis=axis)


@pytest.mark.parametrize("axis,scale", [(-1, (5,)), (1, (4, 5)), (1, (1, 5))])
def test_layer_norm(axis, scale):
    check_grad("LayerNormalization", [rand(2, 4, 5), rand(*scale), rand(*scale)], axis=axis, rtol=1e-4)


def test_shapes():
    check_grad("Reshape", [rand(2, 3, 4), np.array([4, -1], "int64")])
    check_grad("Flatten", [rand(2, 3, 4)], axis=2)
    check_grad("Transpose", [rand(2, 3, 4)], perm=[2, 0, 1])
    check_grad("Squeeze", [rand(2, 1, 4), np.array([1], "int64")])
    check_grad("Unsqueeze", [rand(2, 4), np.array([0, -1], "int64")])
    check_grad("Expand", [rand(3, 1), np.array([2, 3, 4], "int64")])


def test_slice():
    i64 = lambda *v: np.array(v, "int64")
    check_grad("Slice", [rand(5, 6), i64(1, -1), i64(4, 0), i64(0, 1), i64(1, -2)])
    check_grad("Slice", [rand(4, 7), i64(0), i64(7), i64(1), i64(3)])


def test_concat():
    check_grad("Concat", [rand(2, 3), rand(2, 1), rand(2, 2)], axis=-1)


@pytest.mark.parametrize("axis", [0, 1])
def test_gather(axis):
    idx = np.array([[0, 2, -1], [2, 2, 1]], "int64")
    check_grad("Gather", [rand(4, 3), idx], axis=axis)


def test_split_pad_where_cast_extrema():
    check_grad("Split", [rand(2, 7), np.array([3, 4], "int64")], axis=1, num_outputs=2)
    check_grad("Pad", [rand(2, 3), np.array([1, 0, 2, 1], "int64")])
    check_grad("Where", [RNG.random((3, 1)) > 0.5, rand(3, 4), rand(4)])
    check_grad("Cast", [rand(2, 3)], to=11)
    check_grad("Max", [rand(3, 4), rand(4)])
    check_grad("Min", [rand(3, 4), rand(3, 1)])
    check_grad("Abs", [rand(3, 4)])


def test_split_with_an_unused_piece():
    b = kg.Builder()
    x = b.input("x", (2, 6))
    first, _ = b.op("Split", x, b.constant("s", np.array([2, 4], "int64")), axis=1, outputs=2)
    loss = b.op("ReduceSum", b.op("Mul", first, first), keepdims=0)
    xv = RNG.standard_normal((2, 6)).astype("float32")
    (g,) = kiln.compile(kg.gradient_graph(b.build(loss), [x]))(xv)[1:]
    np.testing.assert_allclose(g, np.concatenate([2 * xv[:, :2], np.zeros((2, 4))], axis=1), rtol=1e-6)


def test_dropout_masks():
    x = np.ones((100, 100), "float32")
    seed = lambda s: np.array(s, "int64")
    (a,) = kg.run_op("kiln.Dropout", [x, seed(3)], ratio=0.3)
    (b,) = kg.run_op("kiln.Dropout", [x, seed(3)], ratio=0.3)
    (c,) = kg.run_op("kiln.Dropout", [x, seed(4)], ratio=0.3)
    assert abs((a == 0).mean() - 0.3) < 0.02
    np.testing.assert_allclose(np.unique(a), [0, 1 / 0.7], rtol=1e-6)
    np.testing.assert_array_equal(a, b)  # the same seed, the same mask
    assert abs(((a == 0) & (c == 0)).mean() - 0.09) < 0.02  # another seed, an independent mask
    assert abs(((a[:, :-1] == 0) & (a[:, 1:] == 0)).mean() - 0.09) < 0.02  # neighbours independent
    bld = kg.Builder()
    xi, si = bld.input("x", x.shape), bld.input("s", (), "int64")
    np.testing.assert_array_equal(kiln.compile(bld.build(bld.op("kiln.Dropout", xi, si, ratio=0.3)))(x, seed(3))[0], a)
    check_grad("kiln.Dropout", [rand(3, 5), seed(11)], ratio=0.4)
    with pytest.raises(kiln.KilnError, match=r"ratio 1.0+ must be in \[0, 1\)"):
        kg.run_op("kiln.Dropout", [x, seed(1)], ratio=1.0)


def test_reductions():
    check_grad("ReduceSum", [rand(2, 3, 4), np.array([0, -1], "int64")], keepdims=0)
    check_grad("ReduceSum", [rand(2, 3)])
    check_grad("ReduceMean", [rand(2, 3, 4)], axes=[1], keepdims=1)
    check_grad("ReduceMean", [rand(2, 3, 4)], keepdims=0)


def test_an_op_without_a_gradient_is_named():
    b = kg.Builder()
    x = b.input("x", (2, 3))
    loss = b.op("ReduceSum", b.op("Floor", x, name="round_down"), keepdims=0)
    with pytest.raises(kiln.KilnError, match="Floor node 'round_down'.*no gradient"):
        kg.gradient_graph(b.build(loss), [x])


def test_unused_input_has_zero_gradient_and_shared_values_accumulate():
    b = kg.Builder()
    x, u = b.input("x", (3,)), b.input("u", (2,))
    y = b.op("Mul", x, x)  # x reaches the loss twice
    loss = b.op("ReduceSum", b.op("Add", y, x), keepdims=0)
    assert kg.gradients(loss, [u]) == [None]
    out = kiln.compile(kg.gradient_graph(b.build(loss), [x, u]))(np.array([1, 2, 3], "float32"), np.ones(2, "float32"))
    np.testing.assert_allclose(out[1], [3, 5, 7])
    np.testing.assert_array_equal(out[2], [0, 0])


# ---- losses


@pytest.mark.parametrize("label_dtype", ["int64", "int32"])
def test_softmax_cross_entropy(label_dtype):
    x, y = rand(5, 4) * 3, np.array([0, 3, 1, 3, 2], label_dtype)
    (loss,) = kg.run_op("kiln.SoftmaxCrossEntropy", [x, y])
    ref = torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(y.astype("int64")))
    np.testing.assert_allclose(loss, ref.item(), rtol=1e-10)
    assert loss.shape == ()
    check_grad("kiln.SoftmaxCrossEntropy", [x, y])


def test_mean_squared_error():
    a, t = rand(3, 4), rand(3, 4)
    (loss,) = kg.run_op("kiln.MeanSquaredError", [a, t])
    np.testing.assert_allclose(loss, np.mean((a - t) ** 2), rtol=1e-12)
    check_grad("kiln.MeanSquaredError", [a, t])


@pytest.mark.parametrize("shape", [(8, 128, 768), (786432,), (1, 786432), (4, 3)])
def test_mean_squared_error_float32_sum_stays_accurate(shape):
    # One float32 accumulator over 786k squares drifts by ~4e-4; the two-level sum stays near rounding (the 1-D shape has no
    # axis to split: it documents that limit with a looser bound).
    a = RNG.standard_normal(shape).astype("float32") + 1.0
    t = RNG.standard_normal(shape).astype("float32")
    (loss,) = kg.run_op("kiln.MeanSquaredError", [a, t])
    ref = np.mean((a.astype(np.float64) - t) ** 2)
    np.testing.assert_allclose(loss, ref, rtol=1e-3 if len(shape) == 1 or shape[0] == 1 else 5e-6)


def test_losses_name_mismatched_shapes():
    with pytest.raises(kiln.KilnError, match=r"prediction float64\[3, 4\] and the target float64\[4\] must have one shape"):
        kg.run_op("kiln.MeanSquaredError", [rand(3, 4), rand(4)])
    with pytest.raises(kiln.KilnError, match=r"labels int64\[3\] must be \[5\]"):
        kg.run_op("kiln.SoftmaxCrossEntropy", [rand(5, 4), np.zeros(3, "int64")])
    with pytest.raises(kiln.KilnError, match="labels float64.*class indices"):
        kg.run_op("kiln.SoftmaxCrossEntropy", [rand(5, 4), rand(5)])


# ---- executor fixes training graphs needed


def test_groups_with_one_key_but_other_argument_orders_get_their_own_kernels():
    # Div(x, y) and Div(c, y) (c a constant) lower to one DAG, but take their arguments as (x, y) and (y, c).
    b = kg.Builder()
    x, y = b.input("x", (2, 3)), b.input("y", (2, 3))
    c = np.full((2, 3), 3.0, "float32")
    g = b.build(b.op("Div", x, y), b.op("Div", b.constant("c", c), y))
    xv, yv = np.full((2, 3), 2.0, "float32"), np.full((2, 3), 4.0, "float32")
    a, d = kiln.compile(g)(xv, yv)
    np.testing.assert_allclose(a, 0.5)
    np.testing.assert_allclose(d, 0.75)


def test_fused_group_with_inputs_from_nodes_of_one_name():
    b = kg.Builder()
    x = b.input("x", (4,))
    p, q = b.op("Exp", x), b.op("Exp", b.op("Neg", x))  # two nodes named "Exp"
    a = b.op("Add", b.op("ReduceSum", p, keepdims=1), b.op("ReduceSum", q, keepdims=1))
    (out,) = kiln.compile(b.build(b.op("Mul", a, b.op("Add", p, q))))(np.ones(4, "float32"))
    e = np.exp(1) + np.exp(-1)
    np.testing.assert_allclose(out, 4 * e * e * np.ones(4), rtol=1e-6)


# ---- whole models against PyTorch's autograd


def model_grads_match_torch(module, x, rtol=1e-4, atol=1e-5):
    """kiln's gradients of sum(module(x) * r) for every lifted parameter against torch's."""
    graph, names, values, *_ = kg.lift_parameters(kg.from_torch(module, x))
    r = RNG.standard_normal(graph.output_types[0][0]).astype("float32")
    out = graph.output_values[0]
    loss = kg.make_op("ReduceSum", [kg.make_op("Mul", [out, kg.make_constant("r", r)])[0]], keepdims=0)[0]
    params = graph.input_values[1:]
    grads = kiln.compile(kg.make_graph(graph.input_values, [loss] + [g for g in kg.gradients(loss, params)]))(x, *values)
    module.zero_grad()
    ref = (module(torch.tensor(x)) * torch.tensor(r)).sum()
    ref.backward()
    np.testing.assert_allclose(grads[0], ref.item(), rtol=1e-5)
    torch_grads = {n: p.grad.numpy() for n, p in module.named_parameters()}
    checked = 0
    for name, g in zip(names, grads[1:]):
        if name in torch_grads:
            np.testing.assert_allclose(g, torch_grads[name], rtol=rtol, atol=atol, err_msg=name)
            checked += 1
    assert checked == len(torch_grads)


def test_mlp_gradients_match_torch():
    torch.manual_seed(4)
    m = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Sigmoid(), torch.nn.Linear(10, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))
    model_grads_match_torch(m, RNG.standard_normal((5, 6)).astype("float32"))


def test_cnn_gradients_match_torch():
    torch.manual_seed(5)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1, stride=2), torch.nn.ReLU(), torch.nn.Conv2d(6, 6, 3, padding=1, groups=6),
                            torch.nn.Tanh(), torch.nn.Conv2d(6, 4, 1, groups=2), torch.nn.MaxPool2d(3, stride=2, padding=1),
                            torch.nn.AvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4 * 2 * 2, 5))
    model_grads_match_torch(m, RNG.standard_normal((2, 3, 15, 15)).astype("float32"))
