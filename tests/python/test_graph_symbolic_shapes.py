"""Symbolic dimensions through type inference and the operators' computes.

Each inference test builds one op over inputs with named shape variables
("batch", "seq") and checks the inferred shape against golden text; the
error tests check that dims which must agree but cannot be proven equal are
named. The compute tests lower small BERT, decoder (KV cache) and ResNet
graphs to one tensor-expression DAG (kiln.graph.to_te), build it once over
its shape variables and run it at several sizes (1 and primes included)
against numpy / PyTorch.
"""
import numpy as np
import pytest

import kiln
from kiln import te
from kiln._ffi import _kiln
from kiln.graph import make_constant, make_graph, make_input

I64_MAX = 2**63 - 1


def op(name, inputs, **attrs):
    (out,) = kiln.graph.make_op(name, inputs, **attrs)
    return out


def const(name, value, dtype=None):
    return make_constant(name, np.asarray(value, dtype=dtype))


def ints(name, values):
    return const(name, values, "int64")


def bert_x():
    return make_input("x", ("batch", "seq", 768))


# ---------------------------------------------------------------- inference: elementwise and broadcast

@pytest.mark.parametrize("name", ["Relu", "Erf", "Sqrt", "Tanh", "Sigmoid", "Neg", "Exp"])
def test_unary_keeps_the_symbolic_shape(name):
    assert op(name, [bert_x()]).shape == ("batch", "seq", 768)


def test_cast_keeps_the_shape_and_changes_the_dtype():
    y = op("Cast", [bert_x()], to=7)
    assert (y.shape, y.dtype) == (("batch", "seq", 768), "int64")


@pytest.mark.parametrize("name", ["Add", "Sub", "Mul", "Div", "Pow"])
def test_binary_broadcasts_a_static_operand_against_symbols(name):
    x = bert_x()
    assert op(name, [x, const("b", np.ones(768, "float32"))]).shape == ("batch", "seq", 768)
    assert op(name, [x, make_input("m", (1, "seq", 1))]).shape == ("batch", "seq", 768)
    assert op(name, [x, x]).shape == ("batch", "seq", 768)


def test_where_broadcasts_three_inputs():
    cond = make_input("mask", ("batch", 1, 1, "seq"), "bool")
    scores = make_input("s", ("batch", 12, "seq", "seq"))
    assert op("Where", [cond, scores, const("ninf", np.float32(-1e9))]).shape == ("batch", 12, "seq", "seq")


def test_two_different_shape_variables_do_not_broadcast():
    with pytest.raises(kiln.KilnError, match=r"batch vs seq.*same shape-variable name"):
        op("Add", [make_input("a", ("batch", 768)), make_input("b", ("seq", 768))])


def test_a_symbolic_dim_is_not_taken_for_1():
    with pytest.raises(kiln.KilnError, match=r"seq vs 768\).*'seq' is known only when the model runs and cannot be proven to be 768"):
        op("Add", [make_input("a", ("batch", "seq")), make_input("b", ("batch", 768))])


def test_static_broadcast_errors_are_unchanged():
    with pytest.raises(kiln.KilnError, match=r"shapes \[2, 3\] and \[4\] do not broadcast \(dimension 1: 3 vs 4\)"):
        op("Add", [make_input("a", (2, 3)), make_input("b", (4,))])


# ---------------------------------------------------------------- inference: contractions

def test_matmul_by_a_weight_and_batched_attention():
    x = bert_x()
    assert op("MatMul", [x, const("w", np.zeros((768, 3072), "float32"))]).shape == ("batch", "seq", 3072)
    q = make_input("q", ("batch", 12, "seq", 64))
    kt = make_input("kt", ("batch", 12, 64, "seq"))
    assert op("MatMul", [q, kt]).shape == ("batch", 12, "seq", "seq")
    # A weight's batch dims broadcast against the symbolic ones.
    assert op("MatMul", [q, make_input("w2", (1, 12, 64, 5))]).shape == ("batch", 12, "seq", 5)


def test_matmul_contraction_must_be_provably_equal():
    with pytest.raises(kiln.KilnError, match=r"A's last dimension is hidden but B's second-to-last dimension is 768.*give the input that size"):
        op("MatMul", [make_input("a", ("batch", "hidden")), const("w", np.zeros((768, 10), "float32"))])
    with pytest.raises(kiln.KilnError, match=r"A's last dimension is hidden but B's second-to-last dimension is model.*same shape-variable name"):
        op("MatMul", [make_input("a", ("batch", "hidden")), make_input("w", ("model", 10))])
    with pytest.raises(kiln.KilnError, match=r"do not broadcast \(dimension 0: batch vs beam\)"):
        op("MatMul", [make_input("a", ("batch", 4, 8)), make_input("b", ("beam", 8, 4))])


def test_gemm_with_symbolic_rows_and_a_bias():
    a = make_input("a", ("batch", 512))
    y = op("Gemm", [a, const("w", np.zeros((1000, 512), "float32")), const("c", np.zeros(1000, "float32"))], transB=1)
    assert y.shape == ("batch", 1000)
    with pytest.raises(kiln.KilnError, match=r"A is batch x 512|A is batchx512"):
        op("Gemm", [a, const("w2", np.zeros((256, 10), "float32"))])


# ---------------------------------------------------------------- inference: normalisation and reductions

def test_softmax_layer_norm_and_reductions():
    x = bert_x()
    assert op("Softmax", [x], axis=-1).shape == ("batch", "seq", 768)
    ln = op("LayerNormalization", [x, const("g", np.ones(768, "float32")), const("b", np.zeros(768, "float32"))], axis=-1)
    assert ln.shape == ("batch", "seq", 768)
    assert op("ReduceMean", [x], axes=[-1]).shape == ("batch", "seq", 1)
    assert op("ReduceMax", [x], axes=[1], keepdims=0).shape == ("batch", 768)
    assert op("ReduceSum", [x, ints("ax", [1])]).shape == ("batch", 1, 768)


def test_layer_norm_scale_must_match_a_symbolic_normalised_dim():
    x = make_input("x", ("batch", "seq"))
    with pytest.raises(kiln.KilnError, match=r"does not broadcast to the normalised shape \[seq\]"):
        op("LayerNormalization", [x, const("g", np.ones(8, "float32"))], axis=-1)


# ---------------------------------------------------------------- inference: shape operators

def test_transpose_flatten_squeeze_unsqueeze():
    x = bert_x()
    assert op("Transpose", [x], perm=[1, 0, 2]).shape == ("seq", "batch", 768)
    assert op("Flatten", [make_input("f", ("batch", 512, 1, 1))], axis=1).shape == ("batch", 512)
    assert op("Flatten", [x], axis=2).shape == ("batch*seq", 768)
    assert op("Unsqueeze", [x, ints("a", [1, 2])]).shape == ("batch", 1, 1, "seq", 768)
    assert op("Squeeze", [make_input("s", ("batch", 1, "seq")), ints("a2", [1])]).shape == ("batch", "seq")
    # Without axes only the static 1s go: a symbolic dim is not taken for 1.
    assert op("Squeeze", [make_input("s2", ("batch", 1, "seq"))]).shape == ("batch", "seq")
    with pytest.raises(kiln.KilnError, match=r"cannot squeeze axis 0 .*its extent is batch"):
        op("Squeeze", [make_input("s3", ("batch", 1)), ints("a3", [0])])


def test_reshape_with_zero_and_minus_one():
    x = bert_x()
    heads = op("Reshape", [x, ints("s", [0, 0, 12, 64])])
    assert heads.shape == ("batch", "seq", 12, 64)
    assert op("Reshape", [heads, ints("s2", [0, 0, -1])]).shape == ("batch", "seq", 768)
    assert op("Reshape", [x, ints("s3", [-1, 768])]).shape == ("batch*seq", 768)
    assert op("Reshape", [x, ints("s4", [0, -1, 64])]).shape == ("batch", "seq*12", 64)
    rows = op("Reshape", [x, ints("s5", [-1, 768])])
    assert op("Reshape", [rows, ints("s6", [-1, 12, 64])]).shape == ("batch*seq", 12, 64)


def test_reshape_that_cannot_be_proven_is_left_to_the_run():
    # Counts equal only at some sizes: inference lets them through and compile records a constraint a run checks
    # (test_dynamic_robustness.py); counts that differ at every size but 0 are refused here.
    x = bert_x()
    assert op("Reshape", [x, ints("s", [0, -1, 100])]).shape == ("batch", "floordiv(batch*seq*768, batch*100)", 100)
    assert op("Reshape", [x, ints("s2", [0, 12, 64])]).shape == ("batch", 12, 64)
    with pytest.raises(kiln.KilnError, match=r"cannot reshape float32\[batch, seq, 768\].*differ for every size but 0"):
        op("Reshape", [x, ints("s3", [0, 0, 2, 768])])


def test_expand_against_symbolic_dims():
    assert op("Expand", [make_input("e", ("batch", 1, 768)), ints("s", [1, 4, 768])]).shape == ("batch", 4, 768)
    with pytest.raises(kiln.KilnError, match=r"batch vs 4"):
        op("Expand", [make_input("e2", ("batch", 768)), ints("s2", [4, 768])])


def test_concat_sums_the_axis_for_a_kv_cache():
    past = make_input("past", ("batch", 12, "past", 64))
    new = make_input("new", ("batch", 12, 1, 64))
    kv = op("Concat", [past, new], axis=2)
    assert kv.shape == ("batch", 12, "past + 1", 64)
    assert op("Concat", [kv, make_input("more", ("batch", 12, "seq", 64))], axis=-2).shape == ("batch", 12, "past + seq + 1", 64)
    with pytest.raises(kiln.KilnError, match=r"must agree.*'beam' and 'batch' cannot be proven equal"):
        op("Concat", [past, make_input("other", ("beam", 12, 1, 64))], axis=2)


def test_split_of_a_static_axis_keeps_symbolic_dims():
    qkv = make_input("qkv", ("batch", "seq", 2304))
    outs = kiln.graph.make_op("Split", [qkv, ints("sizes", [768, 768, 768])], axis=2)
    assert [o.shape for o in outs] == [("batch", "seq", 768)] * 3
    with pytest.raises(kiln.KilnError, match=r"dimension 'seq' is symbolic"):
        kiln.graph.make_op("Split", [qkv, ints("s2", [1, 1])], axis=1)


def test_slice_with_static_bounds_on_a_symbolic_axis():
    x = bert_x()
    first = op("Slice", [x, ints("a", [0]), ints("b", [1]), ints("c", [1])])
    assert first.shape == ("batch", "min(seq, 1)", 768)
    tail = op("Slice", [x, ints("a2", [2]), ints("b2", [I64_MAX]), ints("c2", [1])])
    assert tail.shape == ("batch", "max(seq - 2, 0)", 768)
    last = op("Slice", [x, ints("a5", [-1]), ints("b5", [I64_MAX]), ints("c5", [1])])
    assert last.shape == ("batch", "min(seq, 1)", 768)
    whole = op("Slice", [x, ints("a3", [0]), ints("b3", [I64_MAX]), ints("c3", [1])])
    assert whole.shape == ("batch", "seq", 768)
    # A static axis slices as before.
    assert op("Slice", [x, ints("a4", [0]), ints("b4", [64]), ints("c4", [2])]).shape == ("batch", "seq", 64)


def test_gather_with_symbolic_indices_and_data():
    table = const("emb", np.zeros((100, 16), "float32"))
    ids = make_input("ids", ("batch", "seq"), "int64")
    assert op("Gather", [table, ids], axis=0).shape == ("batch", "seq", 16)
    assert op("Gather", [bert_x(), ints("i", 0)], axis=1).shape == ("batch", 768)


# ---------------------------------------------------------------- inference: convolution and pooling

def test_conv_pool_batch_norm_with_symbolic_batch_and_image():
    img = make_input("img", ("batch", 3, "h", "w"))
    conv = op("Conv", [img, const("w", np.zeros((64, 3, 7, 7), "float32"))], strides=[2, 2], pads=[3, 3, 3, 3])
    assert conv.shape == ("batch", 64, "floordiv(h + 1, 2)", "floordiv(w + 1, 2)")
    bn = op("BatchNormalization", [conv] + [const(f"p{i}", np.ones(64, "float32")) for i in range(4)])
    assert bn.shape == conv.shape
    pool = op("MaxPool", [bn], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    assert pool.shape == ("batch", 64, "floordiv(floordiv(h + 1, 2) + 1, 2)", "floordiv(floordiv(w + 1, 2) + 1, 2)")
    same = op("Conv", [pool, const("w3", np.zeros((64, 64, 3, 3), "float32"))], pads=[1, 1, 1, 1])
    assert same.shape == pool.shape
    avg = op("AveragePool", [same], kernel_shape=[2, 2], strides=[2, 2])
    assert avg.shape[2] == "floordiv(floordiv(h + 1, 2) + 1, 4)"
    assert op("GlobalAveragePool", [same]).shape == ("batch", 64, 1, 1)


def test_conv_refuses_what_a_symbolic_image_cannot_do():
    img = make_input("img", ("batch", 3, "h", "w"))
    w = const("w", np.zeros((8, 3, 3, 3), "float32"))
    with pytest.raises(kiln.KilnError, match=r"SAME padding with stride 2 on the symbolic spatial dimension 'h'"):
        op("Conv", [img, w], strides=[2, 2], auto_pad="SAME_UPPER")
    assert op("Conv", [img, w], auto_pad="SAME_UPPER").shape == ("batch", 8, "h", "w")
    # ceil_mode: ceil(room / 2) + 1, less one where the last window would start in the end pad (none here: no pads).
    ceil = op("MaxPool", [img], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    assert ceil.shape[2] == "floordiv(h + 1, 2) - min(max(floordiv(h + 1, 2)*2 - h - 1, 0), 1)", ceil.shape
    with pytest.raises(kiln.KilnError, match=r"dimension 'c' is symbolic"):
        op("Conv", [make_input("x", ("batch", "c", 8, 8)), w])


def test_blocked_layout_ops_keep_symbolic_batch_and_image():
    x = make_input("x", ("batch", 32, "h", "w"))
    blocked = op("kiln.LayoutTransform", [x], src_block=0, dst_block=16)
    assert blocked.shape == ("batch", 2, "h", "w", 16)
    conv = op("kiln.ConvNCHWc", [blocked, const("wp", np.zeros((2, 2, 3, 3, 16, 16), "float32"))], strides=[2, 2], pads=[1, 1, 1, 1])
    assert conv.shape == ("batch", 2, "floordiv(h + 1, 2)", "floordiv(w + 1, 2)", 16)
    pool = op("kiln.MaxPoolNCHWc", [conv], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    assert pool.shape == conv.shape
    assert op("kiln.LayoutTransform", [pool], src_block=16, dst_block=0).shape == ("batch", 32, "floordiv(h + 1, 2)", "floordiv(w + 1, 2)")
    rows = make_input("rows", ("batch", "seq", 64))
    assert op("kiln.MatMulPackedB", [rows, const("panels", np.zeros((4, 64, 16), "float32"))]).shape == ("batch", "seq", 64)


# ---------------------------------------------------------------- computes: build once, run at many shapes

class Compiled:
    """A graph lowered whole to one DAG (kiln.graph.to_te), built once with the default schedule."""

    def __init__(self, graph):
        self.inputs, cts, self.constants, self.outputs = _kiln.graph.to_te(graph)
        # The computes announce the shapes inference did (to_te checks each node's).
        for value, tensor in zip(graph.output_values, self.outputs):
            assert tuple(str(d) for d in tensor.shape) == tuple(str(d) for d in value.shape)
        s = te.create_schedule(self.outputs)
        self.mod = kiln.build(s, list(self.inputs) + list(cts) + list(self.outputs), "llvm")

    def __call__(self, *arrays, out_shapes):
        outs = [np.zeros(s, "float32") for s in out_shapes]
        self.mod(*arrays, *self.constants, *outs)
        return outs


def layer_norm_ref(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def softmax_ref(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_bert_attention_block_runs_at_many_sequence_lengths():
    rng = np.random.default_rng(0)
    H, heads, d = 16, 2, 8
    wq, bq = rng.standard_normal((H, 3 * H)).astype("float32") * 0.3, rng.standard_normal(3 * H).astype("float32")
    g, b = rng.standard_normal(H).astype("float32"), rng.standard_normal(H).astype("float32")
    x = make_input("x", ("batch", "seq", H))
    ln = op("LayerNormalization", [x, const("g", g), const("b", b)], axis=-1)
    qkv = op("Add", [op("MatMul", [ln, const("wq", wq)]), const("bq", bq)])
    split = op("Reshape", [qkv, ints("s", [0, 0, 3, heads, d])])
    q = op("Transpose", [op("Gather", [split, ints("i0", 0)], axis=2)], perm=[0, 2, 1, 3])
    k = op("Transpose", [op("Gather", [split, ints("i1", 1)], axis=2)], perm=[0, 2, 3, 1])
    v = op("Transpose", [op("Gather", [split, ints("i2", 2)], axis=2)], perm=[0, 2, 1, 3])
    p = op("Softmax", [op("Mul", [op("MatMul", [q, k]), const("sc", np.float32(d ** -0.5))])], axis=-1)
    ctx = op("Reshape", [op("Transpose", [op("MatMul", [p, v])], perm=[0, 2, 1, 3]), ints("s2", [0, 0, -1])])
    # The erf form of GELU, a mean over the hidden dim and a residual.
    half = op("Mul", [ctx, const("half", np.float32(0.5))])
    gelu = op("Mul", [half, op("Add", [op("Erf", [op("Mul", [ctx, const("r2", np.float32(2 ** -0.5))])]), const("one", np.float32(1))])])
    y = op("Add", [op("Sub", [gelu, op("ReduceMean", [gelu], axes=[-1])]), x])
    assert y.shape == ("batch", "seq", H)
    kernel = Compiled(make_graph([x], [y]))
    from math import erf
    erf_v = np.vectorize(erf)
    for batch, seq in [(1, 1), (1, 7), (2, 13), (3, 2)]:
        xv = rng.standard_normal((batch, seq, H)).astype("float32")
        r = layer_norm_ref(xv.astype(np.float64), g, b) @ wq + bq
        r = r.reshape(batch, seq, 3, heads, d)
        qr, kr, vr = (r[:, :, j].transpose(0, 2, 1, 3) for j in range(3))
        pr = softmax_ref(qr @ kr.transpose(0, 1, 3, 2) * d ** -0.5)
        c = (pr @ vr).transpose(0, 2, 1, 3).reshape(batch, seq, H)
        ge = 0.5 * c * (1 + erf_v(c / np.sqrt(2)))
        ref = ge - ge.mean(-1, keepdims=True) + xv
        (got,) = kernel(xv, out_shapes=[ref.shape])
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_shape_operators_run_at_many_shapes():
    rng = np.random.default_rng(5)
    x = make_input("x", ("batch", "seq", 12))
    w = rng.standard_normal((12, 6)).astype("float32")
    rows = op("Reshape", [x, ints("s", [-1, 12])])  # [batch*seq, 12]
    y = op("Gemm", [rows, const("w", w)])
    back = op("Reshape", [op("Unsqueeze", [y, ints("u", [0])]), ints("s2", [0, -1, 3])])  # [1, batch*seq*2, 3]
    expanded = op("Expand", [op("Unsqueeze", [x, ints("u2", [1])]), ints("e", [1, 3, 1, 1])])  # [batch, 3, seq, 12]
    mask = make_input("mask", ("batch", 1, "seq", 1), "bool")
    picked = op("Where", [mask, expanded, const("z", np.float32(-1))])
    squeezed = op("Squeeze", [op("ReduceSum", [picked, ints("ax", [1])]), ints("sq", [1])])  # [batch, seq, 12]
    flat = op("Flatten", [squeezed], axis=2)  # [batch*seq, 12]
    kernel = Compiled(make_graph([x, mask], [back, picked, flat]))
    for batch, seq in [(1, 1), (2, 3), (3, 5)]:
        xv = rng.standard_normal((batch, seq, 12)).astype("float32")
        mv = rng.uniform(size=(batch, 1, seq, 1)) < 0.5
        r_back = (xv.reshape(-1, 12).astype(np.float64) @ w).reshape(1, -1, 3)
        r_picked = np.where(mv, np.broadcast_to(xv[:, None], (batch, 3, seq, 12)), -1).astype("float32")
        r_flat = r_picked.sum(1).reshape(-1, 12)
        got_back, got_picked, got_flat = kernel(xv, mv, out_shapes=[r_back.shape, r_picked.shape, r_flat.shape])
        np.testing.assert_allclose(got_back, r_back, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got_picked, r_picked)
        np.testing.assert_allclose(got_flat, r_flat, rtol=1e-6, atol=1e-6)


def test_decoder_step_with_a_growing_kv_cache():
    rng = np.random.default_rng(1)
    heads, d = 2, 8
    past_k = make_input("past_k", ("batch", heads, "past", d))
    past_v = make_input("past_v", ("batch", heads, "past", d))
    new_k = make_input("new_k", ("batch", heads, 1, d))
    new_v = make_input("new_v", ("batch", heads, 1, d))
    q = make_input("q", ("batch", heads, 1, d))
    keys = op("Concat", [past_k, new_k], axis=2)
    values = op("Concat", [past_v, new_v], axis=2)
    scores = op("MatMul", [q, op("Transpose", [keys], perm=[0, 1, 3, 2])])
    assert scores.shape == ("batch", heads, 1, "past + 1")
    ctx = op("MatMul", [op("Softmax", [scores], axis=-1), values])
    last = op("Slice", [keys, ints("a", [-1]), ints("b", [I64_MAX]), ints("c", [2])])
    halves = kiln.graph.make_op("Split", [keys, ints("h", [4, 4])], axis=3)
    kernel = Compiled(make_graph([past_k, past_v, new_k, new_v, q], [ctx, keys, last, halves[1]]))
    for batch, past in [(2, 0), (1, 1), (2, 5), (1, 17)]:  # 0: the first step, an empty cache
        pk, pv = (rng.standard_normal((batch, heads, past, d)).astype("float32") for _ in range(2))
        nk, nv, qv = (rng.standard_normal((batch, heads, 1, d)).astype("float32") for _ in range(3))
        kr, vr = np.concatenate([pk, nk], 2), np.concatenate([pv, nv], 2)
        ref = softmax_ref(qv @ kr.transpose(0, 1, 3, 2)) @ vr
        got, got_keys, got_last, got_half = kernel(pk, pv, nk, nv, qv, out_shapes=[ref.shape, kr.shape, nk.shape, kr[..., 4:].shape])
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(got_keys, kr)
        np.testing.assert_array_equal(got_last, nk)
        np.testing.assert_array_equal(got_half, kr[..., 4:])


@pytest.mark.parametrize("start,end,step", [(0, 1, 1), (2, I64_MAX, 1), (-1, I64_MAX, 1), (1, -1, 2), (-3, -1, 1),
                                             (-1, -I64_MAX, -1), (5, 0, -2), (0, 3, 1), (0, I64_MAX, 2), (-3, I64_MAX, 2),
                                             (1, I64_MAX, 3)])
def test_slice_of_a_symbolic_axis_matches_numpy_at_every_length(start, end, step):
    x = make_input("x", (2, "seq"))
    y = op("Slice", [x, ints("a", [start]), ints("b", [end]), ints("c", [1]), ints("d", [step])])
    kernel = Compiled(make_graph([x], [y]))
    for seq in [1, 2, 3, 4, 7]:
        xv = np.arange(2 * seq, dtype="float32").reshape(2, seq)
        ref = xv[:, slice(start, None if abs(end) == I64_MAX else end, step)]
        if ref.shape[1] == 0:
            continue  # an empty output: nothing to run
        # The output's shape is checked against the count expression when the kernel binds it.
        (got,) = kernel(xv, out_shapes=[ref.shape])
        np.testing.assert_array_equal(got, ref)


def test_resnet_stem_and_block_run_at_many_batches_and_image_sizes():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(2)
    w1 = rng.standard_normal((8, 3, 7, 7)).astype("float32") * 0.1
    w2 = rng.standard_normal((8, 8, 3, 3)).astype("float32") * 0.1
    bn = [rng.uniform(0.5, 1.5, 8).astype("float32") for _ in range(4)]
    w3 = rng.standard_normal((16, 8, 1, 1)).astype("float32")
    fc = rng.standard_normal((5, 16)).astype("float32")
    x = make_input("x", ("batch", 3, "h", "w"))
    stem = op("Conv", [x, const("w1", w1)], strides=[2, 2], pads=[3, 3, 3, 3])
    stem = op("Relu", [op("BatchNormalization", [stem] + [const(f"bn{i}", p) for i, p in enumerate(bn)])])
    pool = op("MaxPool", [stem], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    block = op("Relu", [op("Add", [op("Conv", [pool, const("w2", w2)], pads=[1, 1, 1, 1]), pool])])
    wide = op("Conv", [block, const("w3", w3)])  # 16 output channels: the channels-last compute
    avg = op("AveragePool", [wide], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1])
    flat = op("Flatten", [op("GlobalAveragePool", [avg])], axis=1)
    logits = op("Gemm", [flat, const("fc", fc)], transB=1)
    assert logits.shape == ("batch", 5)
    kernel = Compiled(make_graph([x], [logits, block]))
    for batch, h, w in [(1, 9, 16), (2, 13, 11), (3, 8, 8)]:
        xv = rng.standard_normal((batch, 3, h, w)).astype("float32")
        t = torch.from_numpy(xv)
        s = F.conv2d(t, torch.from_numpy(w1), stride=2, padding=3)
        s = F.relu(F.batch_norm(s, torch.from_numpy(bn[2]), torch.from_numpy(bn[3]), torch.from_numpy(bn[0]), torch.from_numpy(bn[1]), eps=1e-5))
        p = F.max_pool2d(s, 3, 2, 1)
        blk = F.relu(F.conv2d(p, torch.from_numpy(w2), padding=1) + p)
        wd3 = F.conv2d(blk, torch.from_numpy(w3))
        a = F.avg_pool2d(F.pad(wd3, (0, 1, 0, 1)), 2, 1)
        a = a / F.avg_pool2d(F.pad(torch.ones_like(wd3), (0, 1, 0, 1)), 2, 1)  # count_include_pad=0
        ref = (a.mean((2, 3)) @ torch.from_numpy(fc).T).numpy()
        got, got_block = kernel(xv, out_shapes=[ref.shape, tuple(blk.shape)])
        np.testing.assert_allclose(got_block, blk.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fuse", [False, True])
def test_alter_conv_layout_keeps_symbolic_batch_and_image(fuse):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(4)
    w1 = rng.standard_normal((32, 3, 7, 7)).astype("float32") * 0.1
    w2 = rng.standard_normal((32, 32, 3, 3)).astype("float32") * 0.1
    w_dw = rng.standard_normal((32, 1, 3, 3)).astype("float32")
    x = make_input("x", ("batch", 3, "h", "w"))
    stem = op("Relu", [op("Conv", [x, const("w1", w1)], strides=[2, 2], pads=[3, 3, 3, 3])])
    pool = op("MaxPool", [stem], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    block = op("Relu", [op("Add", [op("Conv", [pool, const("w2", w2)], pads=[1, 1, 1, 1]), pool])])
    dw = op("Conv", [block, const("w_dw", w_dw)], pads=[1, 1, 1, 1], group=32)
    g = kiln.graph.optimize(make_graph([x], [op("GlobalAveragePool", [dw])]), "llvm", fuse)
    assert "kiln.ConvNCHWc" in " ".join(g.op_types()) and "kiln.DepthwiseConvNCHWc" in " ".join(g.op_types())
    assert g.output_types[0][0] == ("batch", 32, 1, 1)
    kernel = Compiled(g)
    for batch, h, wd in [(1, 17, 23), (2, 32, 29)]:
        xv = rng.standard_normal((batch, 3, h, wd)).astype("float32")
        t = F.relu(F.conv2d(torch.from_numpy(xv), torch.from_numpy(w1), stride=2, padding=3))
        p = F.max_pool2d(t, 3, 2, 1)
        blk = F.relu(F.conv2d(p, torch.from_numpy(w2), padding=1) + p)
        ref = F.conv2d(blk, torch.from_numpy(w_dw), padding=1, groups=32).mean((2, 3), keepdim=True).numpy()
        (got,) = kernel(xv, out_shapes=[ref.shape])
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_blocked_layout_conv_runs_at_many_image_sizes():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 16, 3, 3)).astype("float32") * 0.2
    packed = w.reshape(2, 8, 2, 8, 3, 3).transpose(0, 2, 4, 5, 3, 1).copy()  # [K/kb, C/cb, KH, KW, cb, kb]
    x = make_input("x", ("batch", 16, "h", "w"))
    blocked = op("kiln.LayoutTransform", [x], src_block=0, dst_block=8)
    conv = op("kiln.ConvNCHWc", [blocked, const("wp", packed)], strides=[2, 2], pads=[1, 1, 1, 1])
    y = op("kiln.LayoutTransform", [op("kiln.MaxPoolNCHWc", [conv], kernel_shape=[2, 2], strides=[1, 1])], src_block=8, dst_block=0)
    kernel = Compiled(make_graph([x], [y]))
    for batch, h, wd in [(1, 5, 7), (2, 11, 8)]:
        xv = rng.standard_normal((batch, 16, h, wd)).astype("float32")
        ref = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(torch.from_numpy(xv), torch.from_numpy(w), stride=2, padding=1), 2, 1)
        (got,) = kernel(xv, out_shapes=[tuple(ref.shape)])
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-4, atol=1e-4)


def test_bfloat16_pairs_pack_and_contract_over_symbolic_dims():
    # autocast + use_bf16_dot pack the operands in pairs along K; attention's
    # P V contracts over seq, so the packed dim itself may be symbolic (and odd).
    rng = np.random.default_rng(6)
    x = make_input("x", ("batch", "seq", 32))
    w = rng.standard_normal((32, 48)).astype("float32")
    y = op("MatMul", [x, const("w", w)])
    gram = op("MatMul", [op("Transpose", [y], perm=[0, 2, 1]), y])
    g = kiln.graph.autocast(make_graph([x], [y, gram]), "bfloat16", [], False)
    g = kiln.graph.optimize(g, "llvm -mcpu=sapphirerapids", False)
    assert "kiln.MatMulBF16Pairs" in " ".join(g.op_types())
    assert [t[0] for t in g.output_types] == [("batch", "seq", 48), ("batch", 48, 48)]
    kernel = Compiled(g)
    for batch, seq in [(1, 1), (2, 4), (1, 7)]:
        xv = rng.standard_normal((batch, seq, 32)).astype("float32")
        ref = xv.astype(np.float64) @ w
        ref_gram = ref.transpose(0, 2, 1) @ ref
        got, got_gram = kernel(xv, out_shapes=[ref.shape, ref_gram.shape])
        # bfloat16 operands: 8 bits of mantissa.
        assert np.abs(got - ref).max() <= 2e-2 * np.abs(ref).max()
        assert np.abs(got_gram - ref_gram).max() <= 2e-2 * np.abs(ref_gram).max()


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_of_symbolic_dims_matches_numpy(mode):
    x = make_input("x", ("batch", "seq"))
    y = op("Pad", [x, ints("p", [0, 2, 1, 3]), const("v", np.float32(7))], mode=mode)
    assert y.shape == ("batch + 1", "seq + 5")
    kernel = Compiled(make_graph([x], [y]))
    np_mode = {"constant": "constant", "edge": "edge", "reflect": "reflect"}[mode]
    for batch, seq in [(1, 1), (2, 3), (3, 6), (1, 5)]:
        if mode == "reflect" and seq < 4:
            continue  # numpy's reflect of a short axis repeats periodically past what ONNX defines
        xv = np.arange(batch * seq, dtype="float32").reshape(batch, seq)
        kw = {"constant_values": 7} if mode == "constant" else {}
        ref = np.pad(xv, ((0, 1), (2, 3)), mode=np_mode, **kw)
        (got,) = kernel(xv, out_shapes=[ref.shape])
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("fuse", [False, True])
def test_winograd_conv_with_a_symbolic_batch(fuse):
    # A static image keeps alter_conv_layout's Winograd form; the batch multiplies the tile count.
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(7)
    w = rng.standard_normal((32, 32, 3, 3)).astype("float32") * 0.1
    x = make_input("x", ("batch", 32, 28, 28))
    y = op("Relu", [op("Conv", [x, const("w", w)], pads=[1, 1, 1, 1])])
    g = kiln.graph.optimize(make_graph([x], [y]), "llvm", fuse)
    assert "kiln.WinogradMatMul" in " ".join(g.op_types())
    assert g.output_types[0][0] == ("batch", 32, 28, 28)
    kernel = Compiled(g)
    for batch in [1, 2, 3]:
        xv = rng.standard_normal((batch, 32, 28, 28)).astype("float32")
        ref = F.relu(F.conv2d(torch.from_numpy(xv), torch.from_numpy(w), padding=1)).numpy()
        (got,) = kernel(xv, out_shapes=[ref.shape])
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)


def test_gathers_and_normalisations_over_symbolic_axes():
    rng = np.random.default_rng(8)
    table = rng.standard_normal((50, 4)).astype("float32")
    ids = make_input("ids", ("batch", "seq"), "int64")
    x = make_input("x", ("batch", "seq", 4))
    scale = make_input("scale", ("seq", 4))
    emb = op("Gather", [const("table", table), ids], axis=0)  # [batch, seq, 4]
    last = op("Gather", [x, ints("last", -1)], axis=1)  # the last position: [batch, 4]
    # Statistics over the symbolic axis: counts known only at run time.
    ln = op("LayerNormalization", [x, scale], axis=1)
    mean = op("ReduceMean", [x], axes=[1], keepdims=0)
    kernel = Compiled(make_graph([ids, x, scale], [emb, last, ln, mean]))
    for batch, seq in [(1, 1), (2, 3), (1, 6)]:
        iv = rng.integers(0, 50, size=(batch, seq)).astype("int64")
        xv = rng.standard_normal((batch, seq, 4)).astype("float32")
        sv = rng.standard_normal((seq, 4)).astype("float32")
        x64 = xv.astype(np.float64)
        m = x64.mean((1, 2), keepdims=True)
        r_ln = (x64 - m) / np.sqrt(((x64 - m) ** 2).mean((1, 2), keepdims=True) + 1e-5) * sv
        outs = kernel(iv, xv, sv, out_shapes=[(batch, seq, 4), (batch, 4), xv.shape, (batch, 4)])
        np.testing.assert_array_equal(outs[0], table[iv])
        np.testing.assert_array_equal(outs[1], xv[:, -1])
        np.testing.assert_allclose(outs[2], r_ln, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(outs[3], x64.mean(1), rtol=1e-5, atol=1e-6)
