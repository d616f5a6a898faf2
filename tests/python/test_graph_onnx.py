"""The ONNX importer (kiln.graph.from_onnx, from_torch): small models built
with onnx.helper; each error case, initializers / Constant nodes / attributes,
the translation of opset-11 forms, shape overrides.

Translations are checked two ways: the opset-11 model imports to the same
graph (structural_equal: ops, attributes, wiring, constant bytes) as its
opset-13 form, and, where kiln has the ops' kernels, runs like numpy.
Tests of ops other modules register skip while those ops are absent.
"""
import numpy as np
import pytest

import kiln
from kiln.graph import Builder

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def needs(*ops, compute=False):
    """Skips unless kiln registers every op (with a kernel when `compute`)."""
    have = set(kiln.graph.registered_ops())
    missing = [o for o in ops if o not in have or (compute and not kiln.graph.op_info(o)["has_compute"])]
    if missing:
        pytest.skip(f"kiln does not register {missing} yet")


def model(nodes, inputs, outputs, inits=(), opset=13, value_info=()):
    """A model from nodes; inputs / outputs as (name, shape) or ValueInfoProtos."""
    def vi(x, elem=F):
        return x if isinstance(x, onnx.ValueInfoProto) else helper.make_tensor_value_info(x[0], elem, x[1])
    g = helper.make_graph(nodes, "g", [vi(i) for i in inputs], [vi(o) for o in outputs], list(inits), value_info=list(value_info))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run(graph, *inputs):
    return kiln.compile(graph)(*inputs)


def error(match, fn, *args, **kwargs):
    with pytest.raises(kiln.KilnError, match=match) as e:
        fn(*args, **kwargs)
    return str(e.value)


# --- a model end to end ------------------------------------------------------

def relu_add(opset=13, x_shape=(2, 3)):
    b = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "b")
    return model([helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r", "b"], ["y"])],
                 [("x", list(x_shape))], [("y", None)], [b], opset=opset)


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_relu_add_runs_like_numpy(opset, tmp_path):
    m = relu_add(opset)
    x = rand(2, 3)
    want = np.maximum(x, 0) + np.array([0.5, -1, 2], np.float32)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    for source in (m, m.SerializeToString(), str(path), path):
        g = kiln.graph.from_onnx(source)
        assert g.input_names == ["x"] and g.output_names == ["y"]
        assert g.op_types() == ["Relu", "Add"]
        np.testing.assert_allclose(run(g, x)[0], want, rtol=1e-6)
    assert "relu" in str(g) and "Add_1" in str(g)  # the ONNX node name, or op type and index


def test_wrong_input_shape_at_run_time():
    exe = kiln.compile(kiln.graph.from_onnx(relu_add()))
    with pytest.raises(kiln.KilnError):
        exe(rand(3, 3))


# --- errors ------------------------------------------------------------------

def test_missing_file(tmp_path):
    error("cannot open the ONNX file '/nonexistent/x.onnx'", kiln.graph.from_onnx, "/nonexistent/x.onnx")
    error("is a directory", kiln.graph.from_onnx, tmp_path)


def test_truncated_and_foreign_bytes(tmp_path):
    data = relu_add().SerializeToString()
    error("not an ONNX model", kiln.graph.from_onnx, data[:-1])
    error("not an ONNX model", kiln.graph.from_onnx, b"this is not a model")
    error("hold no ONNX graph", kiln.graph.from_onnx, b"")
    path = tmp_path / "bad.onnx"
    path.write_bytes(data[:-1])
    error("ONNX file .*bad.onnx.*not an ONNX model", kiln.graph.from_onnx, path)
    error("takes a file path, an onnx.ModelProto or its bytes", kiln.graph.from_onnx, 42)


def test_unsupported_op():
    m = model([helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")], [("x", [2])], [("y", None)], opset=12)
    msg = error("NoSuchOp", kiln.graph.from_onnx, m)
    assert "'mystery'" in msg and "opset 12" in msg
    listed = msg.split("kiln supports: ")[1].split(", ")
    assert "Relu" in listed and "Add" in listed
    assert not any(o.startswith("kiln.") for o in listed)


def test_unsupported_op_unnamed_node():
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NoSuchOp", ["r"], ["y"])], [("x", [2])], [("y", None)])
    error("node 'NoSuchOp_1' has op type 'NoSuchOp' \\(opset 13\\)", kiln.graph.from_onnx, m)


def test_non_default_domain():
    node = helper.make_node("FusedConv", ["x"], ["y"], name="fc", domain="com.microsoft")
    m = model([node], [("x", [2])], [("y", None)])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    error("'fc' \\(op type 'FusedConv'\\) is in the domain 'com.microsoft'", kiln.graph.from_onnx, m)


@pytest.mark.parametrize("opset", [10, 18])
def test_opset_out_of_range(opset):
    error(f"opset {opset}; kiln imports opsets 11 to 17", kiln.graph.from_onnx, relu_add(opset))


def test_no_default_opset():
    m = relu_add()
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid("ai.onnx.ml", 2))
    error("imports no opset of the default domain", kiln.graph.from_onnx, m)


def test_missing_initializer():
    m = model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [("x", [2])], [("y", None)])
    error("Add node 'add' reads 'w', which is neither a graph input, an initializer nor the output of an earlier node",
          kiln.graph.from_onnx, m)


def test_undefined_graph_output():
    m = model([helper.make_node("Relu", ["x"], ["r"])], [("x", [2])], [("nowhere", None)])
    error("graph output 'nowhere' reads 'nowhere'", kiln.graph.from_onnx, m)


def test_extra_outputs_fine_until_read():
    # Relu gives one output; a second one listed but unused (as Dropout's mask) is no problem ...
    unused = model([helper.make_node("Relu", ["x"], ["r", "extra"], name="relu")], [("x", [2])], [("r", None)])
    assert kiln.graph.from_onnx(unused).op_types() == ["Relu"]
    # ... an optional output given as "" neither ...
    blank = model([helper.make_node("Relu", ["x"], ["r", ""], name="relu")], [("x", [2])], [("r", None)])
    assert kiln.graph.from_onnx(blank).op_types() == ["Relu"]
    # ... but reading it is an error naming the node and the output.
    read = model([helper.make_node("Relu", ["x"], ["r", "extra"], name="relu"), helper.make_node("Add", ["r", "extra"], ["y"])],
                 [("x", [2])], [("y", None)])
    error("reads 'extra', output 1 of Relu node 'relu', which kiln's Relu does not produce", kiln.graph.from_onnx, read)
    as_output = model([helper.make_node("Relu", ["x"], ["r", "extra"], name="relu")], [("x", [2])], [("extra", None)])
    error("graph output 'extra' reads 'extra', output 1 of Relu node 'relu'", kiln.graph.from_onnx, as_output)


def test_external_data():
    w = TensorProto(name="w", data_type=F, dims=[2])
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="weights.bin")
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", [2])], [("y", None)], [w])
    error("initializer 'w' keeps its data in an external file \\('weights.bin'\\).*onnx.load", kiln.graph.from_onnx, m)


def test_malformed_initializer():
    w = TensorProto(name="w", data_type=F, dims=[3], float_data=[1.0, 2.0])  # 2 values for 3 elements
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", [3])], [("y", None)], [w])
    error("initializer 'w' holds 2 values in float_data for 3 elements", kiln.graph.from_onnx, m)
    raw = numpy_helper.from_array(np.zeros(3, np.float32), "w")
    raw.raw_data = raw.raw_data[:-1]
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", [3])], [("y", None)], [raw])
    error("initializer 'w' holds 11 bytes of raw data", kiln.graph.from_onnx, m)
    huge = TensorProto(name="w", data_type=F, dims=[1 << 40, 1 << 40])  # must fail before allocating
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", [3])], [("y", None)], [huge])
    error("initializer 'w' has the shape .* too large", kiln.graph.from_onnx, m)


def test_unsupported_element_type():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.STRING, [2])], [("y", None)])
    error("ONNX input 'x' has ONNX element type STRING", kiln.graph.from_onnx, m)


def test_unsupported_attribute_kinds():
    t = helper.make_node("Relu", ["x"], ["y"], name="r", t=numpy_helper.from_array(np.zeros(1, np.float32)))
    error("Relu node 'r': attribute 't' is a tensor", kiln.graph.from_onnx, model([t], [("x", [2])], [("y", None)]))
    s = helper.make_node("Relu", ["x"], ["y"], name="r", names=["a", "b"])
    error("attribute 'names' is of ONNX type STRINGS", kiln.graph.from_onnx, model([s], [("x", [2])], [("y", None)]))


def test_attribute_the_op_does_not_take():
    # Attributes pass through to the registry, which names the problem.
    node = helper.make_node("Relu", ["x"], ["y"], name="r", alpha=0.5)
    error("Relu node 'r' has attribute 'alpha', which Relu does not take", kiln.graph.from_onnx,
          model([node], [("x", [2])], [("y", None)]))


# --- input shapes ------------------------------------------------------------

def test_symbolic_dimension_stays_symbolic():
    # A dim_param becomes the shape variable of that name; shapes= can fix it or rename it.
    m = relu_add(x_shape=("batch", 3))
    g = kiln.graph.from_onnx(m)
    assert g.input_types == [(("batch", 3), "float32")] and g.output_types == [(("batch", 3), "float32")]
    assert kiln.graph.from_onnx(m, shapes={"x": ("n", 3)}).output_types == [(("n", 3), "float32")]
    g = kiln.graph.from_onnx(m, shapes={"x": (4, 3)})
    assert g.input_types == [((4, 3), "float32")]
    x = rand(4, 3)
    np.testing.assert_allclose(run(g, x)[0], np.maximum(x, 0) + np.array([0.5, -1, 2], np.float32), rtol=1e-6)


def test_unknown_dimension_and_rank():
    x = helper.make_tensor_value_info("x", F, [2, 3])
    x.type.tensor_type.shape.dim[1].Clear()  # neither a value nor a name: named after the input and axis
    m = model([helper.make_node("Relu", ["x"], ["y"])], [x], [("y", None)])
    assert kiln.graph.from_onnx(m).output_types == [((2, "x_dim1"), "float32")]
    assert kiln.graph.from_onnx(m, shapes={"x": [2, 5]}).output_types == [((2, 5), "float32")]
    no_rank = model([helper.make_node("Relu", ["x"], ["y"])], [("x", None)], [("y", None)])
    error("'x' has no declared shape", kiln.graph.from_onnx, no_rank)
    assert kiln.graph.from_onnx(no_rank, shapes={"x": [7]}).output_types == [((7,), "float32")]


def test_shape_override_of_a_static_shape():
    # Restating a static shape is fine; changing it is refused (a Reshape's constant shape in the file
    # would otherwise silently mix up the new batch), and a symbolic dimension takes any value.
    g = kiln.graph.from_onnx(relu_add(), shapes={"x": [2, 3]})
    assert g.input_types == [((2, 3), "float32")] and g.output_types == [((2, 3), "float32")]
    error(r"sets axis 0 to 5, but the model declares that axis static as 2 .*dynamic_axes",
          kiln.graph.from_onnx, relu_add(), shapes={"x": [5, 3]})
    g = kiln.graph.from_onnx(relu_add(x_shape=("batch", 3)), shapes={"x": [5, 3]})
    assert g.input_types == [((5, 3), "float32")] and g.output_types == [((5, 3), "float32")]


def test_bad_shape_overrides():
    m = relu_add()
    error("shapes\\['x'\\] = \\[2, 3, 1\\] has 3 dimensions, but the model's input 'x' has 2", kiln.graph.from_onnx, m,
          shapes={"x": [2, 3, 1]})
    error("shapes names 'y', which is not an input of the model \\(its inputs: x\\)", kiln.graph.from_onnx, m,
          shapes={"x": [2, 3], "y": [1]})
    error("shapes names 'b'", kiln.graph.from_onnx, m, shapes={"b": [3]})  # an initializer is not an input
    error("negative dimension", kiln.graph.from_onnx, m, shapes={"x": [-1, 3]})
    # A static dimension cannot be replaced: both values are named.
    error(r"shapes\['x'\] = \[2, 4\] sets axis 1 to 4, but the model declares that axis static as 3 \(\[2, 3\]\)",
          kiln.graph.from_onnx, m, shapes={"x": [2, 4]})
    error(r"sets axis 0 to a, but the model declares that axis static as 2", kiln.graph.from_onnx, m, shapes={"x": ["a", 3]})
    error("must be a sequence of ints and shape-variable names", kiln.graph.from_onnx, m, shapes={"x": [1.5, 3]})


# --- initializers, Constant nodes, attributes --------------------------------

DTYPES = [np.float32, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed"])
def test_initializer_dtypes(dtype, raw):
    data = (RNG.standard_normal((2, 3)) * 50).astype(dtype)
    if raw:
        w = numpy_helper.from_array(data, "w")
    else:
        w = helper.make_tensor("w", onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(dtype)], data.shape, data.flatten().tolist())
        assert not w.raw_data
    # An initializer also listed as a graph input (as older exporters do) is a constant, not a model input.
    w_in = helper.make_tensor_value_info("w", w.data_type, [2, 3])
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", [2]), w_in], [("y", None), w_in], [w])
    g = kiln.graph.from_onnx(m)
    assert g.input_names == ["x"]
    assert g.output_types[1] == ((2, 3), np.dtype(dtype).name if dtype is not np.bool_ else "bool")
    out = run(g, rand(2))[1]
    np.testing.assert_array_equal(out, data)


def test_scalar_initializer():
    w = numpy_helper.from_array(np.array(3.5, np.float32), "w")
    g = kiln.graph.from_onnx(model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", [2])], [("y", None)], [w]))
    x = rand(2)
    np.testing.assert_allclose(run(g, x)[0], x + 3.5, rtol=1e-6)


@pytest.mark.parametrize("attr,value,want", [
    ("value", numpy_helper.from_array(np.array([[1, 2], [3, 4]], np.int32)), np.array([[1, 2], [3, 4]], np.int32)),
    ("value_float", 2.5, np.array(2.5, np.float32)),
    ("value_floats", [1.5, -2.0], np.array([1.5, -2.0], np.float32)),
    ("value_int", 7, np.array(7, np.int64)),
    ("value_ints", [3, 1, 4], np.array([3, 1, 4], np.int64)),
])
def test_constant_node(attr, value, want):
    c = helper.make_node("Constant", [], ["c"], **{attr: value})
    g = kiln.graph.from_onnx(model([c, helper.make_node("Relu", ["x"], ["y"])], [("x", [2])], [("y", None), ("c", None)]))
    out = run(g, rand(2))[1]
    assert out.dtype == want.dtype
    np.testing.assert_array_equal(out, want)


def test_constant_node_feeds_an_op():
    c = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array([1, 2], np.float32)))
    g = kiln.graph.from_onnx(model([c, helper.make_node("Mul", ["x", "c"], ["y"])], [("x", [2])], [("y", None)]))
    x = rand(2)
    np.testing.assert_allclose(run(g, x)[0], x * [1, 2], rtol=1e-6)


def test_constant_node_errors():
    sparse = helper.make_node("Constant", [], ["c"], name="k", value_string="hi")
    error("Constant node 'k' has the attribute 'value_string'", kiln.graph.from_onnx,
          model([sparse], [("x", [2])], [("c", None)]))


def test_attributes_pass_through():
    needs("LeakyRelu", "Transpose")
    nodes = [helper.make_node("LeakyRelu", ["x"], ["l"], alpha=0.25), helper.make_node("Transpose", ["l"], ["y"], perm=[1, 0])]
    g = kiln.graph.from_onnx(model(nodes, [("x", [2, 3])], [("y", None)]))
    b = Builder()
    x = b.input("x", (2, 3))
    want = b.build(b.op("Transpose", b.op("LeakyRelu", x, alpha=0.25), perm=[1, 0]))
    assert g.structural_equal(want)


def test_string_attribute_passes_through():
    needs("Pad")
    pads = numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "pads")
    g = kiln.graph.from_onnx(model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")], [("x", [2, 3])], [("y", None)], [pads]))
    b = Builder()
    want = b.build(b.op("Pad", b.input("x", (2, 3)), b.constant("p", np.array([0, 1, 0, 1], np.int64)), mode="reflect"))
    assert g.structural_equal(want)


def test_constant_of_shape_value_tensor():
    needs("ConstantOfShape")
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    node = helper.make_node("ConstantOfShape", ["shape"], ["c"], value=numpy_helper.from_array(np.array([7], np.int64)))
    g = kiln.graph.from_onnx(model([node, helper.make_node("Relu", ["x"], ["y"])], [("x", [2])], [("y", None), ("c", None)], [shape]))
    b = Builder()
    x = b.input("x", (2,))
    c = b.op("ConstantOfShape", b.constant("s", np.array([2, 3], np.int64)), value=7.0, dtype=int(TensorProto.INT64))
    # The importer folds as it builds: the ConstantOfShape of a constant shape is a constant.
    assert g.op_types() == ["Relu"]
    assert g.structural_equal(kiln.graph.fold_constants(b.build(b.op("Relu", x), c)))


# --- opset-11 forms ----------------------------------------------------------

def both_opsets(nodes11, nodes13, inputs, outputs, inits13=()):
    """The graphs of the opset-11 and the opset-13 form of a model."""
    g11 = kiln.graph.from_onnx(model(nodes11, inputs, outputs, opset=11))
    g13 = kiln.graph.from_onnx(model(nodes13, inputs, outputs, inits13, opset=13))
    return g11, g13


def test_split_attribute_becomes_input():
    needs("Split")
    g11, g13 = both_opsets([helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 3])],
                           [helper.make_node("Split", ["x", "s"], ["a", "b"], axis=1)],
                           [("x", [2, 4])], [("a", None), ("b", None)],
                           [numpy_helper.from_array(np.array([1, 3], np.int64), "s")])
    assert g11.structural_equal(g13)
    assert g11.output_types == [((2, 1), "float32"), ((2, 3), "float32")]
    if kiln.graph.op_info("Split")["has_compute"]:
        x = rand(2, 4)
        for got, want in zip(run(g11, x), np.split(x, [1], axis=1)):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opset", [11, 13])
def test_even_split_gets_num_outputs(opset):
    needs("Split")
    g = kiln.graph.from_onnx(model([helper.make_node("Split", ["x"], ["a", "b", "c"], axis=-1)], [("x", [2, 6])],
                                   [("a", None), ("b", None), ("c", None)], opset=opset))
    b = Builder()
    want = b.build(b.op("Split", b.input("x", (2, 6)), axis=-1, num_outputs=3))
    assert g.structural_equal(want)
    assert g.output_types == [((2, 2), "float32")] * 3


def test_unsqueeze_squeeze_axes_become_inputs():
    needs("Unsqueeze", "Squeeze")
    g11, g13 = both_opsets([helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, -1]), helper.make_node("Squeeze", ["u"], ["y"], axes=[0])],
                           [helper.make_node("Unsqueeze", ["x", "ua"], ["u"]), helper.make_node("Squeeze", ["u", "sa"], ["y"])],
                           [("x", [2, 3])], [("y", None)],
                           [numpy_helper.from_array(np.array([0, -1], np.int64), "ua"), numpy_helper.from_array(np.array([0], np.int64), "sa")])
    assert g11.structural_equal(g13)
    assert g11.output_types == [((2, 3, 1), "float32")]
    if all(kiln.graph.op_info(o)["has_compute"] for o in ("Unsqueeze", "Squeeze")):
        x = rand(2, 3)
        np.testing.assert_array_equal(run(g11, x)[0], x[:, :, None])


def test_squeeze_without_axes():
    needs("Squeeze")
    g11, g13 = both_opsets([helper.make_node("Squeeze", ["x"], ["y"])], [helper.make_node("Squeeze", ["x"], ["y"])],
                           [("x", [1, 3, 1])], [("y", None)])
    assert g11.structural_equal(g13) and g11.output_types == [((3,), "float32")]


def test_reduce_sum_axes_become_input():
    needs("ReduceSum")
    g11, g13 = both_opsets([helper.make_node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0)],
                           [helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0)],
                           [("x", [2, 3, 4])], [("y", None)], [numpy_helper.from_array(np.array([1], np.int64), "a")])
    assert g11.structural_equal(g13)
    assert g11.output_types == [((2, 4), "float32")]
    if kiln.graph.op_info("ReduceSum")["has_compute"]:
        x = rand(2, 3, 4)
        np.testing.assert_allclose(run(g11, x)[0], x.sum(axis=1), rtol=1e-5, atol=1e-6)


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_on_the_last_axis_is_opset13_softmax(op):
    needs(op)
    g11, g13 = both_opsets([helper.make_node(op, ["x"], ["y"], axis=2)], [helper.make_node(op, ["x"], ["y"])],
                           [("x", [2, 3, 4])], [("y", None)])
    assert g11.structural_equal(g13)
    # The opset-11 default axis (1) is the last one of a 2-D input.
    g11, g13 = both_opsets([helper.make_node(op, ["x"], ["y"])], [helper.make_node(op, ["x"], ["y"])], [("x", [3, 5])], [("y", None)])
    assert g11.structural_equal(g13)


@pytest.mark.parametrize("axis", [1, 0, -2])
def test_softmax_flattens_before_opset13(axis):
    needs("Softmax", "Reshape")
    g = kiln.graph.from_onnx(model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], [("x", [2, 3, 4])], [("y", None)], opset=11))
    a = axis % 3
    b = Builder()
    x = b.input("x", (2, 3, 4))
    flat = b.op("Reshape", x, b.constant("f", np.array([int(np.prod([2, 3, 4][:a])), int(np.prod([2, 3, 4][a:]))], np.int64)))
    want = b.build(b.op("Reshape", b.op("Softmax", flat, axis=-1), b.constant("s", np.array([2, 3, 4], np.int64))))
    assert g.structural_equal(want)
    assert g.output_types == [((2, 3, 4), "float32")]
    if all(kiln.graph.op_info(o)["has_compute"] for o in ("Softmax", "Reshape")):
        xv = rand(2, 3, 4)
        np.testing.assert_allclose(run(g, xv)[0], np_softmax(xv.reshape(int(np.prod(xv.shape[:a])), -1), 1).reshape(xv.shape),
                                   rtol=1e-5, atol=1e-6)


def test_softmax_axis_out_of_range():
    needs("Softmax")
    m = model([helper.make_node("Softmax", ["x"], ["y"], axis=3, name="sm")], [("x", [2, 3])], [("y", None)], opset=11)
    error("Softmax node 'sm' \\(opset 11\\): axis 3 is out of range", kiln.graph.from_onnx, m)


def test_dropout_ratio_attribute_and_unused_mask():
    needs("Dropout")
    g11, g13 = both_opsets([helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.25)],
                           [helper.make_node("Dropout", ["x", "r"], ["y", "mask"])],
                           [("x", [2, 3])], [("y", None)], [numpy_helper.from_array(np.array(0.25, np.float32), "r")])
    assert g11.structural_equal(g13)


# --- from_torch --------------------------------------------------------------

def test_from_torch_two_inputs():
    torch = pytest.importorskip("torch")

    class M(torch.nn.Module):
        def forward(self, x, y):
            return torch.relu(x) * y + x

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    g = kiln.graph.from_torch(M(), (x, y))
    assert g.input_names == ["input0", "input1"]
    assert g.input_types == [((3, 4), "float32")] * 2
    np.testing.assert_allclose(run(g, x, y)[0], M()(x, y).numpy(), rtol=1e-5, atol=1e-6)


def test_from_torch_linear_relu():
    torch = pytest.importorskip("torch")
    needs("Gemm", "Relu", compute=True)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 5), torch.nn.ReLU())
    net.train()
    x = torch.randn(4, 8)
    g = kiln.graph.from_torch(net, x, opset=13)
    assert net.training  # left as it was
    with torch.no_grad():
        want = net.eval()(x).numpy()
    np.testing.assert_allclose(run(g, x)[0], want, rtol=1e-5, atol=1e-5)
