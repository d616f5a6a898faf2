// Activation functions: Relu, LeakyRelu, PRelu, Elu, Sigmoid, Tanh,
// HardSigmoid, HardSwish, Softplus and Clip (ONNX semantics and defaults).
#include <limits>

#include "elementwise_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

Expr c(const Expr& like, double v) { return make_const(like.dtype(), v); }

// x * slope where x < 0, else x: LeakyRelu and PRelu.
Expr leaky(Expr x, Expr slope) { return select(x < make_zero(x.dtype()), x * slope, x); }

// Clip (opset 11+): min and max are optional scalar inputs, constants in
// practice (read at compile time); an absent bound is unbounded. With
// min > max every element becomes max, as ONNX specifies.
OpDef clip_def() {
  OpDef d = unary_def("Clip", "min(max(x, min), max); min and max are optional constant scalar inputs 1 and 2", DTypes::Numeric,
                      [](const OpCall& call, Expr x) {
                        if (call.has_input(1)) x = max(x, c(x, scalar_constant(call, 1, "min")));
                        if (call.has_input(2)) x = min(x, c(x, scalar_constant(call, 2, "max")));
                        return x;
                      });
  d.max_inputs = 3;
  d.const_inputs = {1, 2};
  auto base = d.infer;
  d.infer = [base](const OpCall& call) {
    std::vector<TensorType> out = base(call);
    for (int i : {1, 2}) {
      if (!call.has_input(i)) continue;
      const char* what = i == 1 ? "min" : "max";
      expect_same_dtype(call, 0, i);
      scalar_constant(call, i, what);  // fails unless a constant scalar
    }
    return out;
  };
  return d;
}

// PRelu: the slope broadcasts to X's shape (one way: the output is X's shape).
OpDef prelu_def() {
  OpDef d = broadcast_def("PRelu", "x < 0 ? slope * x : x; slope broadcasts to x's shape", 2, 2, DTypes::Signed,
                          [](const OpCall&, const std::vector<Expr>& x) { return leaky(x[0], x[1]); });
  auto base = d.infer;
  d.infer = [base](const OpCall& call) {
    std::vector<TensorType> out = base(call);
    if (out[0].shape != call.input_types[0].shape)
      call.fail("slope of shape " + shape_to_string(call.input_types[1].shape) + " does not broadcast to X's shape " +
                shape_to_string(call.input_types[0].shape) + " (PRelu's output keeps X's shape)");
    return out;
  };
  return d;
}

// ---- gradients

// g where `cond` holds, else `other` (0 when undefined).
Value where(GradBuilder& b, const Value& cond, const Value& g, Value other = Value()) {
  if (!other.defined()) other = b.scalar(0, g.type().dtype);
  return b.op("Where", {cond, g, other});
}
Value positive(GradBuilder& b) { return b.op("Greater", {b.in(0), b.scalar(0, b.in_type(0).dtype)}); }

Value relu_grad(GradBuilder& b, const Value& g) { return where(b, positive(b), g); }
Value leaky_grad(GradBuilder& b, const Value& g) { return where(b, positive(b), g, b.scale(g, b.attrs().get_float("alpha"))); }
Value sigmoid_grad(GradBuilder& b, const Value& g) {  // y (1 - y)
  Value y = b.out();
  return b.mul(g, b.mul(y, b.sub(b.scalar(1, y.type().dtype), y)));
}
Value tanh_grad(GradBuilder& b, const Value& g) {  // 1 - y^2
  Value y = b.out();
  return b.mul(g, b.sub(b.scalar(1, y.type().dtype), b.mul(y, y)));
}
Value softplus_grad(GradBuilder& b, const Value& g) { return b.mul(g, b.op("Sigmoid", {b.in(0)})); }
Value elu_grad(GradBuilder& b, const Value& g) {  // x < 0: alpha exp(x) = y + alpha
  Value neg_slope = b.add(b.out(), b.scalar(b.attrs().get_float("alpha"), g.type().dtype));
  return where(b, positive(b), g, b.mul(g, neg_slope));
}
// Inside [min, max] the gradient passes; a clipped element has none.
std::vector<Value> clip_grad(GradBuilder& b, const std::vector<Value>& g) {
  Value x = b.in(0), keep;
  if (b.num_inputs() > 1 && b.in(1).defined()) keep = b.op("GreaterOrEqual", {x, b.in(1)});
  if (b.num_inputs() > 2 && b.in(2).defined()) {
    Value le = b.op("LessOrEqual", {x, b.in(2)});
    keep = keep.defined() ? b.op("And", {keep, le}) : le;
  }
  return {keep.defined() ? where(b, keep, g[0]) : g[0]};
}

const bool registered = [] {
  auto unary = [](const char* name, const char* doc, DTypes t, CallUnaryFn f, std::vector<AttrSpec> attrs = {}, UnaryGradFn df = nullptr) {
    OpDef d = unary_def(name, doc, t, std::move(f), std::move(attrs));
    if (df) d.gradient = unary_grad(std::move(df));
    register_op(std::move(d));
  };
  auto fattr = [](const char* name, double v) { return AttrSpec{name, AttrKind::Float, AttrValue(v)}; };
  unary("Relu", "max(x, 0)", DTypes::Signed, [](const OpCall&, Expr x) { return max(x, make_zero(x.dtype())); }, {}, relu_grad);
  unary("LeakyRelu", "x < 0 ? alpha * x : x", DTypes::Float,
        [](const OpCall& call, Expr x) { return leaky(x, c(x, call.attrs.get_float("alpha"))); }, {fattr("alpha", 0.01)}, leaky_grad);
  unary("Elu", "x < 0 ? alpha * (exp(x) - 1) : x", DTypes::Float, [](const OpCall& call, Expr x) {
    return select(x < make_zero(x.dtype()), c(x, call.attrs.get_float("alpha")) * (exp(x) - c(x, 1)), x);
  }, {fattr("alpha", 1.0)}, elu_grad);
  unary("Sigmoid", "1 / (1 + exp(-x))", DTypes::Float, [](const OpCall&, Expr x) { return sigmoid(x); }, {}, sigmoid_grad);
  unary("Tanh", "tanh(x)", DTypes::Float, [](const OpCall&, Expr x) { return tanh(x); }, {}, tanh_grad);
  unary("HardSigmoid", "max(0, min(1, alpha * x + beta))", DTypes::Float, [](const OpCall& call, Expr x) {
    Expr y = c(x, call.attrs.get_float("alpha")) * x + c(x, call.attrs.get_float("beta"));
    return max(c(x, 0), min(c(x, 1), y));
  }, {fattr("alpha", 0.2), fattr("beta", 0.5)});
  unary("HardSwish", "x * max(0, min(1, x / 6 + 0.5))", DTypes::Float, [](const OpCall&, Expr x) {
    return x * max(c(x, 0), min(c(x, 1), x * c(x, 1.0 / 6.0) + c(x, 0.5)));
  });
  // log(1 + exp(x)) overflows for large x; max(x, 0) + log(1 + exp(-|x|)) is the same value without it.
  unary("Softplus", "log(1 + exp(x))", DTypes::Float, [](const OpCall&, Expr x) {
    return max(x, c(x, 0)) + log(c(x, 1) + exp(-abs(x)));
  }, {}, softplus_grad);
  register_op(with_grad(clip_def(), clip_grad));
  register_op(prelu_def());
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
