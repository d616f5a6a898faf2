#include "elementwise_helpers.h"

#include "kiln/support/error.h"

namespace kiln::graph::ops_detail {

bool dtype_in(DataType t, DTypes k) {
  switch (k) {
    case DTypes::Float: return t.is_float();
    case DTypes::Signed: return t.is_float() || t.is_int();
    case DTypes::Numeric: return t.is_float() || t.is_integer();
    case DTypes::Bool: return t.is_bool();
    case DTypes::Any: return true;
  }
  return false;
}

const char* dtypes_name(DTypes k) {
  switch (k) {
    case DTypes::Float: return "a float tensor (float16, float32 or float64)";
    case DTypes::Signed: return "a float or signed integer tensor";
    case DTypes::Numeric: return "a numeric tensor (float or integer, not bool)";
    case DTypes::Bool: return "a bool tensor";
    case DTypes::Any: return "a tensor";
  }
  return "?";
}

void expect_dtype(const OpCall& call, int i, DTypes k, const std::string& what) {
  DataType t = call.input_types[i].dtype;
  if (!dtype_in(t, k))
    call.fail(what + " has dtype " + t.str() + "; " + call.op->name + " needs " + dtypes_name(k) + (k == DTypes::Bool ? "" : " (insert a Cast)"));
}

void expect_same_dtype(const OpCall& call, int i, int j) {
  DataType a = call.input_types[i].dtype, b = call.input_types[j].dtype;
  if (a != b)
    call.fail("inputs " + std::to_string(i) + " and " + std::to_string(j) + " have dtypes " + a.str() + " and " + b.str() +
              "; they must agree (insert a Cast)");
}

Shape broadcast_inputs(const OpCall& call, const std::vector<int>& which) {
  std::vector<int> idx = which;
  if (idx.empty())
    for (int i = 0; i < call.num_inputs(); ++i) idx.push_back(i);
  Shape shape;
  for (int i : idx) {
    if (!call.has_input(i)) continue;
    shape = broadcast_dims(call, shape, call.input_types[i].shape);
  }
  return shape;
}

double scalar_constant(const OpCall& call, int i, const char* what) {
  const NDArray& a = call.constant(i, what);
  if (a.numel() != 1) call.fail(std::string("input ") + std::to_string(i) + " (" + what + ") must be a scalar, got shape " + shape_to_string(a.shape()));
  std::optional<double> v = scalar_of(a);
  if (!v) call.fail(std::string("input ") + std::to_string(i) + " (" + what + ") has dtype " + a.dtype().str() + ", which kiln cannot read at compile time");
  return *v;
}

OpDef unary_def(const std::string& name, const std::string& doc, DTypes dtypes, CallUnaryFn f, std::vector<AttrSpec> attrs, DataType out) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.attrs = std::move(attrs);
  d.pattern = Pattern::Elementwise;
  d.sharding = elementwise_rule();
  d.cost = per_element_cost();
  d.infer = [dtypes, out](const OpCall& call) {
    expect_dtype(call, 0, dtypes, "the input");
    TensorType t = call.input_types[0];
    if (out.bits() != 0) t.dtype = out;
    return std::vector<TensorType>{t};
  };
  d.compute = [f, name](const OpCall& call, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::unary(in[0], [&](Expr x) { return f(call, x); }, name)};
  };
  return d;
}

OpDef broadcast_def(const std::string& name, const std::string& doc, int min_inputs, int max_inputs, DTypes dtypes, CallNaryFn f, DataType out) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.min_inputs = min_inputs;
  d.max_inputs = max_inputs;
  d.pattern = Pattern::Broadcast;
  d.sharding = elementwise_rule();
  d.cost = per_element_cost();
  d.infer = [dtypes, out](const OpCall& call) {
    for (int i = 0; i < call.num_inputs(); ++i) {
      if (!call.has_input(i)) call.fail("input " + std::to_string(i) + " is missing");
      if (i > 0) expect_same_dtype(call, 0, i);
    }
    expect_dtype(call, 0, dtypes, call.num_inputs() > 1 ? "input 0" : "the input");
    return std::vector<TensorType>{TensorType{broadcast_inputs(call), out.bits() != 0 ? out : call.input_types[0].dtype}};
  };
  d.compute = [f, name](const OpCall& call, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::nary(in, [&](const std::vector<Expr>& xs) { return f(call, xs); }, name)};
  };
  return d;
}

GradientFn unary_grad(UnaryGradFn df) {
  return [df](GradBuilder& b, const std::vector<Value>& g) { return std::vector<Value>{df(b, g[0])}; };
}

}  // namespace kiln::graph::ops_detail
