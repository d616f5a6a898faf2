// Comparisons and logic (bool outputs), Where and Cast. Bool tensors are one
// byte per element (0 or 1); the kernels load and store them as such.
#include <optional>

#include "elementwise_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

using Exprs = std::vector<Expr>;

// Cast's targets: the ONNX data types kiln computes with (bfloat16 included:
// the mixed-precision pass rounds through it; kernels hold it as its bits).
std::optional<DataType> onnx_dtype(int64_t code) { return dtype_of_onnx_code(code); }

int64_t onnx_float_code(DataType t) { return t.bits() == 64 ? 11 : t.is_bfloat() ? 16 : t.bits() == 16 ? 10 : 1; }

// Cast (attribute `to`: an ONNX data type code). Float to integer truncates
// toward zero; anything to bool is x != 0; bool to a number is 0 or 1.
OpDef cast_def() {
  OpDef d = unary_def("Cast", "x converted to dtype `to` (ONNX TensorProto.DataType: 1 float, 6 int32, 7 int64, 9 bool, 10 float16, 11 double, ...)",
                      DTypes::Numeric, [](const OpCall& call, Expr x) { return cast(*onnx_dtype(call.attrs.get_int("to")), x); },
                      {{"to", AttrKind::Int, std::nullopt}});
  d.infer = [](const OpCall& call) {
    if (call.input_types[0].dtype.is_handle()) call.fail("the input has dtype " + call.input_types[0].dtype.str() + ", which Cast cannot convert");
    int64_t to = call.attrs.get_int("to");
    std::optional<DataType> t = onnx_dtype(to);
    if (!t)
      call.fail("to=" + std::to_string(to) +
                " is an ONNX data type kiln does not compute with; supported: 1 float32, 2 uint8, 3 int8, 4 uint16, 5 int16, 6 int32, 7 int64, "
                "9 bool, 10 float16, 11 float64, 12 uint32, 13 uint64, 16 bfloat16");
    return std::vector<TensorType>{TensorType{call.input_types[0].shape, *t}};
  };
  return d;
}

// Where(cond, X, Y): X where cond else Y; the three broadcast; dtype of X.
OpDef where_def() {
  OpDef d;
  d.name = "Where";
  d.doc = "cond ? X : Y, the three broadcast; cond bool, X and Y of one dtype";
  d.min_inputs = d.max_inputs = 3;
  d.pattern = Pattern::Broadcast;
  d.sharding = elementwise_rule();
  d.cost = per_element_cost();
  d.infer = [](const OpCall& call) {
    expect_dtype(call, 0, DTypes::Bool, "the condition (input 0)");
    expect_same_dtype(call, 1, 2);
    return std::vector<TensorType>{TensorType{broadcast_inputs(call), call.input_types[1].dtype}};
  };
  d.compute = [](const OpCall&, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::nary(in, [](const Exprs& x) { return select(x[0], x[1], x[2]); }, "Where")};
  };
  return d;
}

// ---- gradients

// Float to float: the gradient cast back; to or from an integer type there is none.
std::vector<Value> cast_grad(GradBuilder& b, const std::vector<Value>& g) {
  DataType from = b.in_type(0).dtype;
  if (!from.is_float() || !g[0].type().dtype.is_float()) return {Value()};
  if (from == g[0].type().dtype) return {g[0]};
  return {b.op("Cast", {g[0]}, Attrs({{"to", onnx_float_code(from)}}))};
}

// The gradient goes to the branch each element was taken from.
std::vector<Value> where_grad(GradBuilder& b, const std::vector<Value>& g) {
  Value zero = b.scalar(0, g[0].type().dtype), cond = b.in(0);
  Value dx = b.wants(1) ? b.sum_to(b.op("Where", {cond, g[0], zero}), b.in_type(1).shape) : Value();
  Value dy = b.wants(2) ? b.sum_to(b.op("Where", {cond, zero, g[0]}), b.in_type(2).shape) : Value();
  return {Value(), dx, dy};
}

const bool registered = [] {
  auto compare = [](const char* name, const char* doc, DTypes t, Expr (*f)(Expr, Expr)) {
    register_op(broadcast_def(name, doc, 2, 2, t, [f](const OpCall&, const Exprs& x) { return f(x[0], x[1]); }, DataType::Bool()));
  };
  compare("Equal", "a == b, broadcast; bool output", DTypes::Any, [](Expr a, Expr b) { return a == b; });
  compare("Less", "a < b, broadcast; bool output", DTypes::Numeric, [](Expr a, Expr b) { return a < b; });
  compare("LessOrEqual", "a <= b, broadcast; bool output", DTypes::Numeric, [](Expr a, Expr b) { return a <= b; });
  compare("Greater", "a > b, broadcast; bool output", DTypes::Numeric, [](Expr a, Expr b) { return a > b; });
  compare("GreaterOrEqual", "a >= b, broadcast; bool output", DTypes::Numeric, [](Expr a, Expr b) { return a >= b; });
  compare("And", "a and b, broadcast; bool inputs", DTypes::Bool, [](Expr a, Expr b) { return a && b; });
  compare("Or", "a or b, broadcast; bool inputs", DTypes::Bool, [](Expr a, Expr b) { return a || b; });
  compare("Xor", "a xor b, broadcast; bool inputs", DTypes::Bool, [](Expr a, Expr b) { return a != b; });
  register_op(unary_def("Not", "not x; bool input", DTypes::Bool, [](const OpCall&, Expr x) { return !x; }));
  register_op(with_grad(where_def(), where_grad));
  register_op(with_grad(cast_def(), cast_grad));
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
