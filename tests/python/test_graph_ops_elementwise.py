"""The elementwise / broadcast operator family of the graph compiler
(graph/src/ops/elementwise.cpp, activation.cpp, logical.cpp, batch_norm.cpp)
against numpy / torch: one op at a time with plain kernels (run_op), and small
Builder graphs through kiln.compile so the fused path with default schedules
is covered too."""
import math

import numpy as np
import pytest
import torch

import kiln
from kiln import KilnError
from kiln import graph as G
from kiln._ffi import _kiln

RNG = np.random.default_rng(7)


def rand(shape, dtype="float32", lo=-3.0, hi=3.0):
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def rand_int(shape, dtype="int32", lo=-20, hi=20):
    return RNG.integers(lo, hi, size=shape).astype(dtype)


def build(op, inputs, const=(), outputs=1, **attrs):
    """A one-op graph: inputs listed in `const` (by index) are constants, None is absent; returns (graph, feed)."""
    b = G.Builder()
    vals, feed = [], []
    for i, a in enumerate(inputs):
        if a is None:
            vals.append(None)
        elif i in const:
            vals.append(G.make_constant(f"c{i}", np.asarray(a)))  # Builder.constant makes 0-d arrays 1-d
        else:
            a = np.asarray(a)
            vals.append(b.input(f"x{i}", a.shape, str(a.dtype)))
            feed.append(a)
    return b.build(b.op(op, *vals, **attrs)), feed


def run(op, inputs, **attrs):
    """run_op, except that 0-d inputs go through an equivalent Builder graph (run_op turns shape () into (1,))."""
    if any(a is not None and np.ndim(a) == 0 for a in inputs):
        const = set(_kiln.graph.op_const_inputs(op))
        g, feed = build(op, inputs, const=const, **attrs)
        return kiln.compile(g, plain=True, fuse=False)(*feed)
    return G.run_op(op, inputs, **attrs)


def fused(op, inputs, const=(), **attrs):
    """The op through kiln.compile with fusion and default schedules."""
    g, feed = build(op, inputs, const=const, **attrs)
    return kiln.compile(g)(*feed)


def check(got, want, dtype=None, rtol=1e-5, atol=1e-6):
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == (np.dtype(dtype) if dtype else want.dtype), (got.dtype, want.dtype)
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# ---------------------------------------------------------------- unary

def _erf(x):
    return torch.erf(torch.from_numpy(x)).numpy()


UNARY = {
    # op: (reference, input transform, attrs)
    "Sqrt": (np.sqrt, np.abs, {}),
    "Exp": (np.exp, None, {}),
    "Log": (np.log, lambda x: np.abs(x) + 0.1, {}),
    "Erf": (_erf, None, {}),
    "Tanh": (np.tanh, None, {}),
    "Sigmoid": (lambda x: 1 / (1 + np.exp(-x)), None, {}),
    "Neg": (np.negative, None, {}),
    "Relu": (lambda x: np.maximum(x, 0), None, {}),
    "Abs": (np.abs, None, {}),
    "Reciprocal": (np.reciprocal, lambda x: np.where(np.abs(x) < 0.1, 0.5, x).astype(x.dtype), {}),
    "Floor": (np.floor, None, {}),
    "Ceil": (np.ceil, None, {}),
    "LeakyRelu": (lambda x: np.where(x < 0, 0.01 * x, x), None, {}),
    "HardSigmoid": (lambda x: np.clip(0.2 * x + 0.5, 0, 1), None, {}),
    "HardSwish": (lambda x: x * np.clip(x / 6 + 0.5, 0, 1), None, {}),
    "Elu": (lambda x: np.where(x < 0, np.expm1(x), x), None, {}),
    "Softplus": (lambda x: np.logaddexp(0, x), lambda x: x * 40, {}),
    "Identity": (lambda x: x, None, {}),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_float32(op):
    ref, prep, attrs = UNARY[op]
    x = rand((2, 3, 5))
    if prep:
        x = prep(x)
    (y,) = run(op, [x], **attrs)
    check(y, ref(x.astype("float64")).astype("float32"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Exp", "Erf", "Sigmoid", "Tanh", "Sqrt", "Neg", "HardSwish"])
def test_unary_float64(op):
    ref, prep, _ = UNARY[op]
    x = rand((3, 4), "float64")
    if prep:
        x = prep(x)
    (y,) = run(op, [x])
    check(y, ref(x), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op,ref", [("Neg", np.negative), ("Abs", np.abs), ("Relu", lambda x: np.maximum(x, 0)), ("Identity", lambda x: x)])
def test_unary_int(op, ref, dtype):
    x = rand_int((4, 5), dtype)
    (y,) = run(op, [x])
    check(y, ref(x))


def test_activation_attrs():
    x = rand((3, 7))
    check(run("LeakyRelu", [x], alpha=0.3)[0], np.where(x < 0, 0.3 * x, x))
    check(run("HardSigmoid", [x], alpha=0.5, beta=0.25)[0], np.clip(0.5 * x + 0.25, 0, 1))
    check(run("Elu", [x], alpha=2.0)[0], np.where(x < 0, 2.0 * np.expm1(x.astype("float64")), x).astype("float32"), rtol=1e-5)


def test_prelu():
    x = rand((2, 3, 4, 5))
    for slope_shape in [(3, 1, 1), (5,), (1,), (2, 3, 4, 5)]:
        s = rand(slope_shape, lo=0, hi=1)
        check(run("PRelu", [x, s])[0], np.where(x < 0, x * s, x))
    with pytest.raises(KilnError, match=r"does not broadcast to X's shape"):
        G.run_op("PRelu", [rand((3, 1)), rand((3, 4))])


# ---------------------------------------------------------------- binary, broadcast

SHAPES = [((2, 3, 4), (3, 1)), ((3, 1), (2, 3, 4)), ((4, 1, 5), (3, 1)), ((2, 3), ()), ((), (2, 3)), ((), ()), ((1,), (2, 3)), ((2, 3), (1,))]
BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_broadcast(op, a_shape, b_shape):
    a, b = rand(a_shape), rand(b_shape)
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype("float32")
    (y,) = run(op, [a, b])
    check(y, BINARY[op](a, b).astype("float32"))


def _trunc_div(a, b):
    # ONNX / C integer division: the quotient truncated toward zero.
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return np.where(b == 0, 0, np.sign(a) * np.sign(b) * q).astype(a.dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_int(op, dtype):
    a, b = rand_int((3, 4), dtype), rand_int((4,), dtype, -5, 6)
    (y,) = run(op, [a, b])
    want = _trunc_div(a, b) if op == "Div" else BINARY[op](a, b)
    check(y, want)


def test_int_div_truncates_and_zero_divisor_gives_zero():
    a = np.array([-7, 7, -7, 7, 5, -1], dtype="int64")
    b = np.array([2, -2, -2, 2, 0, 3], dtype="int64")
    check(run("Div", [a, b])[0], np.array([-3, -3, 3, 3, 0, 0], dtype="int64"))


def test_shape_arithmetic_int64_folded():
    # Shape-like int64 math on constants folds at compile time (fold_constants runs a kernel).
    b = G.Builder()
    x = b.input("x", (3,), "int64")
    dims = b.op("Div", b.constant("n", np.array([12, -9, 7], "int64")), b.constant("d", np.array([5, 2, -2], "int64")))
    y = b.op("Add", x, b.op("Mul", dims, b.constant("k", np.array(3, "int64"))))
    exe = kiln.compile(b.build(y))
    xv = np.array([1, 2, 3], "int64")
    check(exe(xv)[0], xv + np.array([2, -4, -3], "int64") * 3)
    assert "Div" not in exe.graph.__str__()


@pytest.mark.parametrize("op,ref", [("Max", np.maximum), ("Min", np.minimum), ("Sum", np.add)])
def test_variadic(op, ref):
    a, b, c = rand((2, 1, 4)), rand((3, 1)), rand((4,))
    check(run(op, [a, b, c])[0], ref(ref(a, b), c))
    check(run(op, [a])[0], a)
    i, j = rand_int((2, 3), "int64"), rand_int((3,), "int64")
    check(run(op, [i, j])[0], ref(i, j))


def test_mean():
    a, b, c = rand((2, 1, 4)), rand((3, 1)), rand((4,))
    check(run("Mean", [a, b, c])[0], ((a + b + c) / 3).astype("float32"))


# ---------------------------------------------------------------- Pow

def test_pow_tensor_exponent_broadcast():
    x, e = rand((2, 3, 4), lo=0.1, hi=3), rand((3, 1), lo=-2, hi=2)
    check(run("Pow", [x, e])[0], np.power(x.astype("float64"), e).astype("float32"), rtol=1e-5)
    # Integer exponent, negative base.
    x = rand((3, 4))
    check(run("Pow", [x, np.array([3], "int64")])[0], x.astype("float64") ** 3, dtype="float32", rtol=1e-5)


@pytest.mark.parametrize("e,ref", [(2.0, lambda x: x * x), (0.5, np.sqrt), (1.0, lambda x: x), (3.0, lambda x: x.astype("float64") ** 3)])
@pytest.mark.parametrize("e_shape", [(), (1,), (1, 1, 1)])
def test_pow_constant_exponent(e, ref, e_shape):
    x = rand((2, 3), lo=0.0, hi=3)
    e_arr = np.full(e_shape, e, "float32")
    want = np.broadcast_to(ref(x), np.broadcast_shapes(x.shape, e_shape)).astype("float32")
    for y in (fused("Pow", [x, e_arr], const={1})[0], run("Pow", [x, e_arr])[0]):
        check(y, want, rtol=1e-6)
    if e in (2.0, 0.5):
        # The constant exponent is specialised to x*x / sqrt(x): exact, unlike a pow call.
        np.testing.assert_array_equal(fused("Pow", [x, e_arr], const={1})[0], want)


def test_pow_needs_float_base():
    with pytest.raises(KilnError, match=r"Pow node.*base.*int32.*float"):
        G.run_op("Pow", [rand_int((3,)), rand((3,))])


# ---------------------------------------------------------------- Clip

def test_clip():
    x = rand((2, 3, 4))
    lo, hi = np.float32(-0.5), np.float32(1.25)
    check(run("Clip", [x, lo, hi])[0], np.clip(x, lo, hi))
    check(run("Clip", [x, lo])[0], np.maximum(x, lo))
    check(run("Clip", [x, None, hi])[0], np.minimum(x, hi))
    check(run("Clip", [x])[0], x)
    # min > max: every element becomes max (ONNX).
    check(run("Clip", [x, np.float32(2), np.float32(1)])[0], np.full_like(x, 1))
    i = rand_int((5, 2), "int32")
    check(run("Clip", [i, np.int32(-3), np.int32(4)])[0], np.clip(i, -3, 4))
    check(fused("Clip", [x, lo, hi], const={1, 2})[0], np.clip(x, lo, hi))


def test_clip_bound_errors():
    x = rand((2, 3))
    with pytest.raises(KilnError, match=r"Clip node.*min.*must be a constant"):
        kiln.compile(build("Clip", [x, np.float32(0)])[0])
    with pytest.raises(KilnError, match=r"Clip node.*min.*must be a scalar"):
        G.run_op("Clip", [x, np.zeros(2, "float32")])
    with pytest.raises(KilnError, match=r"Clip node.*float32 and float64"):
        G.run_op("Clip", [x, np.float64(0)])


# ---------------------------------------------------------------- comparisons, logic, Where

CMP = {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater, "GreaterOrEqual": np.greater_equal}


@pytest.mark.parametrize("op", sorted(CMP))
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_compare(op, dtype):
    a, b = rand_int((2, 3, 4), dtype, -2, 3), rand_int((3, 1), dtype, -2, 3)  # small ints: ties happen
    (y,) = run(op, [a, b])
    check(y, CMP[op](a, b), dtype="bool")


def test_logic():
    a, b = rand((2, 3, 4)) > 0, rand((3, 1)) > 0
    check(run("And", [a, b])[0], a & b)
    check(run("Or", [a, b])[0], a | b)
    check(run("Xor", [a, b])[0], a ^ b)
    check(run("Not", [a])[0], ~a)
    check(run("Equal", [a, b])[0], a == b)
    check(run("Identity", [a])[0], a)
    c = rand((2, 3, 1)) > 0
    check(run("Where", [c, a, b])[0], np.where(c, a, b))  # bool X and Y


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_where(dtype):
    c = rand((2, 1, 4)) > 0
    x, y = rand_int((3, 1), dtype), rand_int((4,), dtype)
    check(run("Where", [c, x, y])[0], np.where(c, x, y))
    check(fused("Where", [c, x, y])[0], np.where(c, x, y))


def test_logic_dtype_errors():
    with pytest.raises(KilnError, match=r"Where node.*condition.*float32.*bool"):
        G.run_op("Where", [rand((3,)), rand((3,)), rand((3,))])
    with pytest.raises(KilnError, match=r"Where node.*float32 and int64"):
        G.run_op("Where", [rand((3,)) > 0, rand((3,)), rand_int((3,), "int64")])
    with pytest.raises(KilnError, match=r"And node.*float32.*bool"):
        G.run_op("And", [rand((3,)), rand((3,))])
    with pytest.raises(KilnError, match=r"Less node.*bool"):
        G.run_op("Less", [rand((3,)) > 0, rand((3,)) > 0])


# ---------------------------------------------------------------- Cast

CAST_TO = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 9: "bool", 10: "float16", 11: "float64"}


@pytest.mark.parametrize("to", sorted(CAST_TO))
def test_cast(to):
    want_dtype = CAST_TO[to]
    for x in (rand((2, 3, 4), lo=-40, hi=40), rand((3, 4), "float64"), rand_int((5,), "int64"), rand((4, 2)) > 0, np.array([0.0, -0.0, 2.5, -2.5], "float32")):
        if want_dtype in ("uint8",) and x.dtype.kind in "fi":
            x = np.abs(x)  # a negative value to an unsigned type is undefined in ONNX
        (y,) = run("Cast", [x], to=to)
        check(y, x.astype(want_dtype), dtype=want_dtype)


def test_cast_errors():
    with pytest.raises(KilnError, match=r"Cast node.*to=8.*supported"):
        G.run_op("Cast", [rand((3,))], to=8)
    # bfloat16 computes (autocast rounds through it) but has no numpy dtype to come out as.
    with pytest.raises(KilnError, match=r"dtype bfloat16 has no numpy equivalent"):
        G.run_op("Cast", [rand((3,))], to=16)
    with pytest.raises(KilnError, match=r"Cast node.*lacks the required attribute 'to'"):
        G.run_op("Cast", [rand((3,))])


# ---------------------------------------------------------------- Dropout, Identity

def test_dropout_is_identity():
    x = rand((2, 5))
    check(run("Dropout", [x])[0], x)
    check(run("Dropout", [x, np.float32(0.3)])[0], x)
    check(run("Dropout", [x, np.float32(0.3), np.array(False)])[0], x)
    b = G.Builder()
    xi = b.input("x", x.shape)
    y = b.op("Relu", b.op("Dropout", b.op("Identity", xi), seed=3))
    exe = kiln.compile(b.build(y))
    check(exe(x)[0], np.maximum(x, 0))
    assert "Dropout" not in str(exe.graph) and "Identity" not in str(exe.graph)


def test_dropout_training_mode_error():
    with pytest.raises(KilnError, match=r"Dropout node.*training_mode is true.*inference"):
        G.run_op("Dropout", [rand((3,)), np.float32(0.5), np.array(True)])


def test_dropout_of_ratio_zero_in_training_mode_is_the_identity():
    # Swin's attention exports F.dropout(p=0.0) with training_mode true: it drops nothing.
    x = rand((3, 4))
    b = G.Builder()
    y = b.op("Dropout", b.input("x", x.shape), G.make_constant("r", np.array(0.0, "float32")), G.make_constant("t", np.array(True)))
    exe = kiln.compile(b.build(y))
    check(exe(x)[0], x)
    assert "Dropout" not in str(exe.graph)


# ---------------------------------------------------------------- BatchNormalization

def _bn_ref(x, scale, b, mean, var, eps=1e-5):
    r = (1, -1) + (1,) * (x.ndim - 2)
    x64 = x.astype("float64")
    return ((x64 - mean.reshape(r)) / np.sqrt(var.reshape(r) + eps) * scale.reshape(r) + b.reshape(r)).astype(x.dtype)


def _bn_params(c):
    return rand((c,)), rand((c,)), rand((c,)), rand((c,), lo=0.1, hi=2)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3), (1, 4, 6), (2, 1, 3, 3)])
def test_batch_norm(shape):
    x = rand(shape)
    scale, b, mean, var = _bn_params(shape[1])
    check(run("BatchNormalization", [x, scale, b, mean, var])[0], _bn_ref(x, scale, b, mean, var), rtol=1e-5, atol=1e-5)
    got = run("BatchNormalization", [x, scale, b, mean, var], epsilon=0.1, momentum=0.5)[0]
    check(got, _bn_ref(x, scale, b, mean, var, 0.1), rtol=1e-5, atol=1e-5)
    # Against torch, with constant parameters through the fused path.
    want = torch.nn.functional.batch_norm(torch.from_numpy(x), torch.from_numpy(mean), torch.from_numpy(var), torch.from_numpy(scale),
                                          torch.from_numpy(b), training=False, eps=1e-5).numpy()
    check(fused("BatchNormalization", [x, scale, b, mean, var], const={1, 2, 3, 4})[0], want, rtol=1e-5, atol=1e-5)


def test_batch_norm_errors():
    x = rand((2, 3, 4))
    p = _bn_params(3)
    with pytest.raises(KilnError, match=r"BatchNormalization node.*training_mode=1.*inference"):
        G.run_op("BatchNormalization", [x, *p], training_mode=1)
    with pytest.raises(KilnError, match=r"BatchNormalization node.*input_var has type float32\[4\].*shape \[3\]"):
        G.run_op("BatchNormalization", [x, *p[:3], rand((4,))])
    with pytest.raises(KilnError, match=r"BatchNormalization node.*at least 2 dimensions"):
        G.run_op("BatchNormalization", [rand((3,)), *p])
    with pytest.raises(KilnError, match=r"BatchNormalization node.*X has dtype int32"):
        G.run_op("BatchNormalization", [rand_int((2, 3)), *p])


# ---------------------------------------------------------------- errors

def test_dtype_mismatch_names_both():
    with pytest.raises(KilnError, match=r"Add node.*float32 and int32.*Cast"):
        G.run_op("Add", [rand((2, 3)), rand_int((2, 3))])
    with pytest.raises(KilnError, match=r"Mul node.*int64 and int32"):
        G.run_op("Mul", [rand_int((3,), "int64"), rand_int((3,))])


def test_shapes_that_do_not_broadcast():
    with pytest.raises(KilnError, match=r"Add node.*\[2, 3\].*\[4\].*do not broadcast"):
        G.run_op("Add", [rand((2, 3)), rand((4,))])
    with pytest.raises(KilnError, match=r"Where node.*do not broadcast"):
        G.run_op("Where", [rand((2, 3)) > 0, rand((3,)), rand((2,))])
    with pytest.raises(KilnError, match=r"Max node.*do not broadcast"):
        G.run_op("Max", [rand((2, 3)), rand((3,)), rand((5, 1, 2))])


@pytest.mark.parametrize("op", ["Sqrt", "Exp", "Erf", "Sigmoid", "Tanh", "LeakyRelu", "HardSwish", "Mean"])
def test_float_ops_reject_ints(op):
    with pytest.raises(KilnError, match=rf"{op} node.*int32.*float"):
        G.run_op(op, [rand_int((3,))])


def test_arithmetic_rejects_bool():
    with pytest.raises(KilnError, match=r"Add node.*bool.*numeric"):
        G.run_op("Add", [rand((3,)) > 0, rand((3,)) > 0])


# ---------------------------------------------------------------- 0-d tensors

@pytest.mark.parametrize("fuse", [False, True])
def test_zero_dim(fuse):
    b = G.Builder()
    s, t, v = b.input("s", ()), b.input("t", ()), b.input("v", (3,))
    k = G.make_constant("k", np.array(2.0, "float32"))  # Builder.constant makes 0-d arrays 1-d
    a = b.op("Add", s, t)
    p = b.op("Pow", a, k)
    w = b.op("Where", b.op("Greater", s, t), p, b.op("Neg", p))
    c = b.op("Cast", b.op("Clip", w, G.make_constant("lo", np.array(-4.0, "float32"))), to=11)
    r = b.op("Mul", b.op("Relu", s), v)  # 0-d with 1-d
    exe = kiln.compile(b.build(c, r, w), plain=not fuse, fuse=fuse)
    sv, tv, vv = np.array(1.5, "float32"), np.array(-2.25, "float32"), rand((3,))
    got_c, got_r, got_w = exe(sv, tv, vv)
    p_ref = (sv + tv) ** 2
    w_ref = np.where(sv > tv, p_ref, -p_ref)
    check(got_w, w_ref.astype("float32"))
    check(got_c, np.maximum(w_ref, -4.0).astype("float64"))
    check(got_r, (np.maximum(sv, 0) * vv).astype("float32"))


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Not", "Cast"])
def test_zero_dim_single_op(op):
    x = np.array(0.75, "float32") if op != "Not" else np.array(True)
    attrs = {"to": 7} if op == "Cast" else {}
    (y,) = run(op, [x], **attrs)
    assert y.shape == ()
    want = {"Relu": lambda: x, "Sigmoid": lambda: 1 / (1 + np.exp(-x)), "Not": lambda: ~x, "Cast": lambda: x.astype("int64")}[op]()
    check(y, np.asarray(want).astype(y.dtype))


def test_run_op_keeps_zero_dim():
    (y,) = G.run_op("Relu", [np.array(1.0, "float32")])
    assert y.shape == ()


def test_builder_constant_keeps_zero_dim():
    b = G.Builder()
    assert b.constant("k", np.array(2.0, "float32")).shape == ()


# ---------------------------------------------------------------- fused graphs

def test_fused_chain():
    b = G.Builder()
    x, y = b.input("x", (2, 3, 4)), b.input("y", (3, 1))
    scale, bias, mean, var = _bn_params(3)
    t = b.op("Mul", b.op("Add", x, y), b.constant("half", np.array([0.5], "float32")))
    u = b.op("HardSwish", t)
    v = b.op("Clip", u, b.constant("lo", np.float32(-1)), b.constant("hi", np.float32(1)))
    m = b.op("Greater", x, b.constant("zero", np.float32(0)))
    w = b.op("Where", m, v, b.op("Neg", b.op("Sigmoid", v)))
    n = b.op("BatchNormalization", w, *(b.constant(f"p{i}", a) for i, a in enumerate([scale, bias, mean, var])))
    z = b.op("Cast", b.op("Relu", n), to=11)
    exe = kiln.compile(b.build(z, m))
    xv, yv = rand((2, 3, 4)), rand((3, 1))
    got_z, got_m = exe(xv, yv)
    t_ = (xv + yv) * 0.5
    v_ = np.clip(t_ * np.clip(t_ / 6 + 0.5, 0, 1), -1, 1)
    w_ = np.where(xv > 0, v_, -1 / (1 + np.exp(-v_))).astype("float32")
    check(got_z, np.maximum(_bn_ref(w_, scale, bias, mean, var), 0).astype("float64"), rtol=1e-5, atol=1e-5)
    check(got_m, xv > 0)
    assert exe.num_kernels <= 2


def test_every_op_registered_once_with_pattern():
    pats = {}
    for op in ["Add", "Sub", "Mul", "Div", "Pow", "Where", "PRelu", "BatchNormalization", "Equal", "And", "Max"]:
        pats[op] = G.op_info(op)["pattern"]
        assert pats[op] == "broadcast", (op, pats[op])
    for op in ["Sqrt", "Erf", "Tanh", "Sigmoid", "Exp", "Neg", "Relu", "Abs", "Reciprocal", "Clip", "LeakyRelu", "HardSigmoid",
               "HardSwish", "Cast", "Identity", "Dropout", "Not"]:
        assert G.op_info(op)["pattern"] == "elementwise", op
    assert _kiln.graph.op_const_inputs("Clip") == [1, 2] and _kiln.graph.op_const_inputs("Dropout") == [1, 2]
    attrs = G.op_info("BatchNormalization")["attrs"]
    assert math.isclose(attrs["epsilon"], 1e-5) and attrs["training_mode"] == 0
    assert math.isclose(G.op_info("LeakyRelu")["attrs"]["alpha"], 0.01)
    assert G.op_info("HardSigmoid")["attrs"] == pytest.approx({"alpha": 0.2, "beta": 0.5})
    assert G.op_info("Cast")["attrs"] == {"to": None}


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32"])
def test_mod_both_sign_conventions(dtype):
    # fmod=0 takes the divisor's sign (Python's %, numpy.mod), fmod=1 the dividend's (C's fmod, numpy.fmod).
    a = np.array([[-7, 7, -7, 7, 5, 0, -9, 13]], dtype=dtype)
    b = np.array([3, -3, -3, 3, 2, 4, 4, -5], dtype=dtype)
    if dtype == "float32":
        a = a + np.float32(0.5)
    check(run("Mod", [a, b], fmod=1)[0], np.fmod(a, b))
    check(run("Mod", [a, b])[0], np.mod(a, b), rtol=1e-6)
    check(fused("Mod", [a, b], fmod=1)[0], np.fmod(a, b))
    check(fused("Mod", [a, b])[0], np.mod(a, b), rtol=1e-6)
    # A zero integer divisor gives 0 instead of trapping.
    if dtype != "float32":
        check(run("Mod", [a, np.zeros_like(b)])[0], np.zeros_like(a))
    with pytest.raises(KilnError, match="fmod is 2; it takes 0"):
        run("Mod", [a, b], fmod=2)


def test_mod_from_onnx_like_swin_window_masks():
    # Swin Transformer's export computes window indices with Mod on int64 (opset 14).
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    node = helper.make_node("Mod", ["x", "m"], ["y"], fmod=0)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [6])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [6])],
                          [helper.make_tensor("m", TensorProto.INT64, [1], [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    x = np.array([-5, -4, -1, 0, 3, 9], "int64")
    check(kiln.compile(kiln.graph.from_onnx(m.SerializeToString()))(x)[0], np.mod(x, 4))
