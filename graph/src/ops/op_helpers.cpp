#include "op_helpers.h"

#include "kiln/support/error.h"

namespace kiln::graph::ops_detail {

int normalize_axis(const OpCall& call, int64_t axis, int rank) {
  if (axis < -rank || axis >= std::max(rank, 1))
    call.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

std::vector<TensorType> same_as_input(const OpCall& call) { return {call.input_types[0]}; }

std::vector<TensorType> broadcast_types(const OpCall& call, bool mixed_dtypes) {
  std::vector<int64_t> shape = call.input_types[0].shape;
  for (int i = 1; i < call.num_inputs(); ++i) {
    if (!call.has_input(i)) continue;
    if (!mixed_dtypes && call.input_types[i].dtype != call.input_types[0].dtype)
      call.fail("inputs have dtypes " + call.input_types[0].dtype.str() + " and " + call.input_types[i].dtype.str() + "; they must agree (insert a Cast)");
    try {
      shape = ops::broadcast_shape(shape, call.input_types[i].shape);
    } catch (const Error& e) {
      call.fail(e.what());
    }
  }
  return {TensorType{shape, call.input_types[0].dtype}};
}

Expr scalar(DataType t, double v) { return make_const(t, v); }

void register_unary(const std::string& name, ops::UnaryFn f, const std::string& doc, std::vector<AttrSpec> attrs) {
  register_unary_attrs(name, [f](const OpCall&, Expr x) { return f(x); }, doc, std::move(attrs));
}

void register_unary_attrs(const std::string& name, UnaryAttrFn f, const std::string& doc, std::vector<AttrSpec> attrs) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.attrs = std::move(attrs);
  d.pattern = Pattern::Elementwise;
  d.infer = same_as_input;
  d.compute = [f, name](const OpCall& call, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::unary(in[0], [&](Expr x) { return f(call, x); }, name)};
  };
  register_op(std::move(d));
}

void register_binary(const std::string& name, ops::BinaryFn f, const std::string& doc, DataType out_dtype) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.min_inputs = d.max_inputs = 2;
  d.pattern = Pattern::Broadcast;
  d.infer = [out_dtype](const OpCall& call) {
    auto t = broadcast_types(call);
    if (out_dtype.bits() != 0) t[0].dtype = out_dtype;
    return t;
  };
  d.compute = [f, name](const OpCall&, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{ops::binary(in[0], in[1], f, name)}; };
  register_op(std::move(d));
}

}  // namespace kiln::graph::ops_detail
