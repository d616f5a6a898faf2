// ONNX nodes to kiln operator nodes: attributes, and the translation of
// forms older than opset 13 to the ones the registry takes (it holds the
// opset-13..17 forms, where attributes such as Split's `split` and
// Squeeze's `axes` became inputs and Softmax stopped flattening to 2-D).
#include <algorithm>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/support/error.h"
#include "onnx_internal.h"

namespace kiln::graph::onnx_detail {

namespace {

using AP = onnx::AttributeProto;

const char* attr_type_name(AP::AttributeType t) {
  return AP::AttributeType_IsValid(t) ? AP::AttributeType_Name(t).c_str() : "?";
}

// The one element of a scalar (or one-element) array as a double.
double scalar_value(const NDArray& a, const std::string& what) {
  KILN_USER_CHECK(a.numel() == 1) << what << " must hold one value, not " << a.numel() << " (shape " << shape_to_string(a.shape()) << ")";
  std::optional<double> v = scalar_of(a);
  KILN_USER_CHECK(v) << what << " has type " << a.dtype().str() << ", which kiln cannot read as a number";
  return *v;
}

// ConstantOfShape's `value` tensor as the registry's attributes: value (float) and dtype (the ONNX enum).
void constant_of_shape_value(const onnx::TensorProto& t, const std::string& what, Attrs* attrs) {
  NDArray a = tensor_from_onnx(t, what);
  attrs->set("value", scalar_value(a, what));
  attrs->set("dtype", static_cast<int64_t>(t.data_type()));
}

Attrs without(const Attrs& attrs, const std::string& name) {
  auto values = attrs.values();
  values.erase(name);
  return Attrs(std::move(values));
}

Value int64_constant(const std::string& name, const std::vector<int64_t>& values) {
  NDArray a = NDArray::empty({static_cast<int64_t>(values.size())}, DataType::Int(64));
  std::copy(values.begin(), values.end(), a.data_as<int64_t>());
  return make_constant(name, a)->output();
}

const OpDef& require_op(const OnnxNode& n, const std::string& op_type, const std::string& why = "") {
  const OpDef* op = find_op(op_type);
  KILN_USER_CHECK(op) << "ONNX node '" << n.name << "' has op type '" << n.op_type << "' (opset " << n.opset << ")" << why
                      << ", which kiln does not support; kiln supports: " << supported_ops();
  return *op;
}

// Opset < 13 gave an integer list as the attribute `attr`; opset 13 takes it as input `index`.
void attr_to_input(OnnxNode* n, const std::string& attr, int index) {
  if (!n->attrs.has(attr)) return;
  std::vector<int64_t> values = n->attrs.get_ints(attr);
  n->attrs = without(n->attrs, attr);
  if (static_cast<int>(n->inputs.size()) <= index) n->inputs.resize(index + 1);
  n->inputs[index] = int64_constant(n->name + "/" + attr, values);
}

// Opset < 13 Softmax (LogSoftmax, Hardmax) flattens the input to 2-D at
// `axis` (default 1) and normalises over the second dimension. Where `axis`
// is the last axis that is opset 13's Softmax; elsewhere it is Softmax over
// the last axis of the flattened input.
std::vector<Value> emit_flattening_softmax(const OnnxNode& n) {
  const OpDef& op = require_op(n, n.op_type);
  KILN_USER_CHECK(!n.inputs.empty() && n.inputs[0].defined()) << n.op_type << " node '" << n.name << "' has no input";
  const std::vector<int64_t>& shape = n.inputs[0].type().shape;
  int rank = static_cast<int>(shape.size());
  int64_t axis = n.attrs.get_int_or("axis", 1);
  KILN_USER_CHECK(axis >= -rank && axis < rank)
      << n.op_type << " node '" << n.name << "' (opset " << n.opset << "): axis " << axis << " is out of range for its input of shape "
      << shape_to_string(shape);
  if (axis < 0) axis += rank;
  if (axis == rank - 1) return {make_op(&op, n.inputs, Attrs({{"axis", int64_t{-1}}}), n.name)->output()};
  const OpDef& reshape = require_op(n, "Reshape", " (kiln imports it as Reshape, " + n.op_type + ", Reshape and lacks Reshape)");
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < rank; ++i) (i < axis ? outer : inner) *= shape[i];
  Value flat = make_op(&reshape, {n.inputs[0], int64_constant(n.name + "/flat_shape", {outer, inner})}, {}, n.name + "/flatten")->output();
  Value y = make_op(&op, {flat}, Attrs({{"axis", int64_t{-1}}}), n.name)->output();
  return {make_op(&reshape, {y, int64_constant(n.name + "/shape", shape)}, {}, n.name + "/unflatten")->output()};
}

// A DequantizeLinear reading integer codes (int8/uint8 weights, an int32 bias).
bool keeps_integer_weights(const OpNode& n) {
  return n.op->name == "DequantizeLinear" && !n.inputs.empty() && n.inputs[0].type().dtype.is_integer();
}

}  // namespace

std::string supported_ops() {
  std::string known;
  for (const std::string& name : registered_ops())
    if (name.rfind("kiln.", 0) != 0) known += (known.empty() ? "" : ", ") + name;
  return known;
}

Attrs attrs_from_onnx(const onnx::NodeProto& node, const std::string& name, int64_t opset) {
  Attrs attrs;
  for (const AP& a : node.attribute()) {
    const std::string& k = a.name();
    std::string what = node.op_type() + " node '" + name + "': attribute '" + k + "'";
    switch (a.type()) {
      case AP::INT: attrs.set(k, static_cast<int64_t>(a.i())); break;
      case AP::FLOAT: attrs.set(k, static_cast<double>(a.f())); break;
      case AP::STRING: attrs.set(k, a.s()); break;
      case AP::INTS: attrs.set(k, std::vector<int64_t>(a.ints().begin(), a.ints().end())); break;
      case AP::FLOATS: attrs.set(k, std::vector<double>(a.floats().begin(), a.floats().end())); break;
      case AP::TENSOR:
        if (node.op_type() == "ConstantOfShape" && k == "value") {
          constant_of_shape_value(a.t(), what, &attrs);
          break;
        }
        KILN_USER_ERROR() << what << " is a tensor; kiln takes tensor attributes only as ConstantOfShape's value (opset " << opset << ")";
        break;
      default:
        KILN_USER_ERROR() << what << " is of ONNX type " << attr_type_name(a.type())
                          << ", which kiln attributes cannot hold (they are ints, floats, strings and lists of ints or floats)";
    }
  }
  return attrs;
}

std::vector<Value> emit_node(OnnxNode n) {
  if (n.opset < 13) {
    if (n.op_type == "Split") attr_to_input(&n, "split", 1);
    if (n.op_type == "Squeeze" || n.op_type == "Unsqueeze" || n.op_type == "ReduceSum") attr_to_input(&n, "axes", 1);
    if (n.op_type == "Softmax" || n.op_type == "LogSoftmax" || n.op_type == "Hardmax") return emit_flattening_softmax(n);
  }
  if (n.opset < 12 && n.op_type == "Dropout" && n.attrs.has("ratio")) {
    // Opset 12 moved the ratio to input 1 (inference ignores it, but the registry checks the form).
    NDArray ratio = NDArray::empty({}, DataType::Float(32));
    ratio.data_as<float>()[0] = static_cast<float>(n.attrs.get_float("ratio"));
    n.attrs = without(n.attrs, "ratio");
    n.inputs.resize(std::max<size_t>(n.inputs.size(), 2));
    n.inputs[1] = make_constant(n.name + "/ratio", ratio)->output();
  }
  const OpDef& op = require_op(n, n.op_type);
  // Without the `split` input, ONNX splits evenly into as many parts as the node has outputs; the registry's Split takes that count as num_outputs.
  bool split_even = n.op_type == "Split" && (n.inputs.size() < 2 || !n.inputs[1].defined());
  bool takes_count = std::any_of(op.attrs.begin(), op.attrs.end(), [](const AttrSpec& s) { return s.name == "num_outputs"; });
  if (split_even && takes_count && !n.attrs.has("num_outputs")) n.attrs.set("num_outputs", static_cast<int64_t>(n.num_outputs));
  // Trailing absent optional inputs are dropped: the registry counts inputs up to the last one given.
  while (!n.inputs.empty() && !n.inputs.back().defined()) n.inputs.pop_back();
  Ref<OpNode> node = make_op(&op, n.inputs, n.attrs, n.name);
  // Fold as we build: exporters compute shapes with Shape -> Gather -> Concat
  // chains, and a Reshape reading one needs it constant to have a type.
  // A DequantizeLinear of integer weights stays: the int8 passes match it
  // (fold_constants folds it to float32 after them where none claims it).
  if (!keeps_integer_weights(*node)) {
    std::vector<Value> folded = fold_node(node);
    if (!folded.empty()) return folded;
  }
  std::vector<Value> outs;
  for (int i = 0; i < node->num_outputs(); ++i) outs.push_back(node->output(i));
  return outs;
}

}  // namespace kiln::graph::onnx_detail
