// Elementwise and broadcast arithmetic and math: Add, Sub, Mul, Div, Mod, Pow, the
// variadic Max, Min, Sum and Mean, the unary math functions, and the ops the
// graph passes remove (Identity, inference Dropout). Activations are in
// activation.cpp, comparisons, Where and Cast in logical.cpp.
#include <cmath>

#include "elementwise_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

using Exprs = std::vector<Expr>;

// ONNX integer Div truncates toward zero (C); a zero divisor would trap
// (SIGFPE) and take the process down, so it gives 0, as numpy does.
Expr divide(Expr a, Expr b) {
  if (a.dtype().is_float()) return a / b;
  Expr zero = make_zero(b.dtype());
  Expr is_zero = b == zero;
  return select(is_zero, zero, a / select(is_zero, make_const(b.dtype(), 1), b));
}

// ONNX Mod: fmod=0 takes the divisor's sign (Python's %, floor modulo),
// fmod=1 the dividend's (C's fmod). Integers by zero give 0 rather than
// trapping, as Div does; floats by zero give NaN, as in numpy and ONNX Runtime.
Expr modulo(Expr a, Expr b, bool c_fmod) {
  DataType t = a.dtype();
  if (t.is_float()) return c_fmod ? Mod::make(a, b) : a - floor(a / b) * b;
  Expr zero = make_zero(b.dtype());
  Expr is_zero = b == zero;
  Expr safe_b = select(is_zero, make_const(b.dtype(), 1), b);
  return select(is_zero, zero, c_fmod || t.is_uint() ? truncmod(a, safe_b) : floormod(a, safe_b));
}

OpDef mod_def() {
  OpDef d = broadcast_def("Mod", "a mod b, broadcast: the sign of b (Python's %) with fmod=0, of a (C's fmod) with fmod=1; "
                          "a zero integer divisor gives 0", 2, 2, DTypes::Numeric,
                          [](const OpCall& call, const Exprs& x) { return modulo(x[0], x[1], call.attrs.get_int("fmod") != 0); });
  d.attrs = {AttrSpec{"fmod", AttrKind::Int, AttrValue(int64_t(0))}};
  auto infer = d.infer;
  d.infer = [infer](const OpCall& call) {
    int64_t fmod = call.attrs.get_int("fmod");
    if (fmod != 0 && fmod != 1) call.fail("attribute fmod is " + std::to_string(fmod) + "; it takes 0 (Python's %) or 1 (C's fmod)");
    return infer(call);
  };
  return d;
}

OpDef pow_def() {
  OpDef d;
  d.name = "Pow";
  d.doc = "x ** y, broadcast; x float, y float or integer (cast to x's dtype); output dtype of x";
  d.min_inputs = d.max_inputs = 2;
  d.pattern = Pattern::Broadcast;
  d.sharding = elementwise_rule();
  d.cost = per_element_cost();
  d.infer = [](const OpCall& call) {
    expect_dtype(call, 0, DTypes::Float, "the base (input 0)");
    expect_dtype(call, 1, DTypes::Numeric, "the exponent (input 1)");
    return std::vector<TensorType>{TensorType{broadcast_inputs(call), call.input_types[0].dtype}};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    // A constant scalar exponent of 2, 1 or 0.5 (x**2 in a variance, a square
    // root written as a power) is a multiply or sqrt rather than a pow call.
    // The exponent tensor still takes part, so the output shape broadcasts.
    double e = NAN;
    if (call.constants[1] && call.constants[1]->numel() == 1) e = scalar_constant(call, 1, "exponent");
    ops::BinaryFn f;
    if (e == 2.0) f = [](Expr x, Expr) { return x * x; };
    else if (e == 1.0) f = [](Expr x, Expr) { return x; };
    else if (e == 0.5) f = [](Expr x, Expr) { return sqrt(x); };
    else f = [](Expr x, Expr y) { return pow(x, cast(x.dtype(), y)); };
    return std::vector<te::Tensor>{ops::binary(in[0], in[1], f, "Pow")};
  };
  return d;
}

// Whether a Dropout node's constant training_mode input is true.
bool training_dropout(const OpCall& call) { return call.has_input(2) && scalar_constant(call, 2, "training_mode") != 0; }

// Inference Dropout: the identity. Training mode (a true constant
// training_mode input) imports, for kiln.train to make it stochastic
// (kiln.Dropout); remove_identity leaves it, and its compute refuses it.
OpDef dropout_def() {
  OpDef d = unary_def("Dropout", "inference Dropout: the identity (inputs ratio and training_mode are optional constants)", DTypes::Float,
                      [](const OpCall&, Expr x) { return x; }, {{"seed", AttrKind::Int, AttrValue(int64_t{0})}});
  d.max_inputs = 3;
  d.const_inputs = {1, 2};
  d.is_identity = true;
  auto base = d.infer;
  d.infer = [base](const OpCall& call) {
    if (call.has_input(2)) scalar_constant(call, 2, "training_mode");  // fails unless a constant scalar
    return base(call);
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    if (training_dropout(call))
      call.fail("training_mode is true: train the model with kiln.train (which draws the masks), or export it in eval mode for inference");
    return std::vector<te::Tensor>{ops::unary(in[0], [](Expr x) { return x; }, "Dropout")};
  };
  return d;
}

// ---- gradients: the reverse of a broadcast is a sum back to the input's shape.

using Values = std::vector<Value>;

// (da, db) of a binary op, each summed back to its input's shape.
Values binary_grads(GradBuilder& b, const Value& da, const Value& db) {
  return {da.defined() ? b.sum_to(da, b.in_type(0).shape) : Value(), db.defined() ? b.sum_to(db, b.in_type(1).shape) : Value()};
}

Values add_grad(GradBuilder& b, const Values& g) { return binary_grads(b, g[0], b.wants(1) ? g[0] : Value()); }
Values sub_grad(GradBuilder& b, const Values& g) { return binary_grads(b, g[0], b.wants(1) ? b.neg(g[0]) : Value()); }
Values mul_grad(GradBuilder& b, const Values& g) {
  return binary_grads(b, b.wants(0) ? b.mul(g[0], b.in(1)) : Value(), b.wants(1) ? b.mul(g[0], b.in(0)) : Value());
}
// d(a/b)/db = -(a/b)/b: reuses the output instead of squaring b.
Values div_grad(GradBuilder& b, const Values& g) {
  return binary_grads(b, b.wants(0) ? b.div(g[0], b.in(1)) : Value(), b.wants(1) ? b.neg(b.div(b.mul(g[0], b.out()), b.in(1))) : Value());
}

// x ** e: dx = g e x^(e-1); de = g y log(x) (only for a float exponent).
Values pow_grad(GradBuilder& b, const Values& g) {
  Value x = b.in(0), e = b.in(1);
  DataType t = x.type().dtype;
  if (!e.type().dtype.is_float()) e = b.op("Cast", {e}, Attrs({{"to", int64_t(t.bits() == 64 ? 11 : 1)}}));
  Value dx, de;
  if (b.wants(0)) dx = b.mul(g[0], b.mul(e, b.op("Pow", {x, b.sub(e, b.scalar(1, t))})));
  if (b.wants(1)) de = b.mul(g[0], b.mul(b.out(), b.op("Log", {x})));
  return binary_grads(b, dx, de);
}

Values sum_grad(GradBuilder& b, const Values& g) {
  Values out;
  for (int i = 0; i < b.num_inputs(); ++i) out.push_back(b.sum_to(g[0], b.in_type(i).shape));
  return out;
}

Values mean_grad(GradBuilder& b, const Values& g) {
  Value s = b.scale(g[0], 1.0 / b.num_inputs());
  Values out;
  for (int i = 0; i < b.num_inputs(); ++i) out.push_back(b.sum_to(s, b.in_type(i).shape));
  return out;
}

// Max/Min of two inputs: the gradient to the one taken (the first on a tie).
GradientFn extremum_grad(const char* keep_first) {
  return [keep_first](GradBuilder& b, const Values& g) -> Values {
    if (b.num_inputs() == 1) return {g[0]};
    if (b.num_inputs() > 2) b.call().fail("has no gradient with more than two inputs (nest two-input " + b.node().op->name + "s)");
    Value first = b.op(keep_first, {b.in(0), b.in(1)}), zero = b.scalar(0, g[0].type().dtype);
    return binary_grads(b, b.wants(0) ? b.op("Where", {first, g[0], zero}) : Value(), b.wants(1) ? b.op("Where", {first, zero, g[0]}) : Value());
  };
}

Value abs_grad(GradBuilder& b, const Value& g) {
  return b.op("Where", {b.op("Less", {b.in(0), b.scalar(0, g.type().dtype)}), b.neg(g), g});
}

Value erf_grad(GradBuilder& b, const Value& g) {  // 2/sqrt(pi) exp(-x^2)
  Value x = b.in(0);
  return b.mul(b.scale(g, 2.0 / std::sqrt(M_PI)), b.op("Exp", {b.neg(b.mul(x, x))}));
}

Expr fold(const Exprs& xs, Expr (*f)(Expr, Expr)) {
  Expr acc = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) acc = f(acc, xs[i]);
  return acc;
}
Expr add2(Expr a, Expr b) { return a + b; }
Expr max2(Expr a, Expr b) { return max(a, b); }
Expr min2(Expr a, Expr b) { return min(a, b); }

const bool registered = [] {
  constexpr int kMany = 1 << 20;  // variadic ops take any number of inputs
  register_op(with_grad(broadcast_def("Add", "a + b, broadcast", 2, 2, DTypes::Numeric, [](const OpCall&, const Exprs& x) { return x[0] + x[1]; }), add_grad));
  register_op(with_grad(broadcast_def("Sub", "a - b, broadcast", 2, 2, DTypes::Numeric, [](const OpCall&, const Exprs& x) { return x[0] - x[1]; }), sub_grad));
  register_op(with_grad(broadcast_def("Mul", "a * b, broadcast", 2, 2, DTypes::Numeric, [](const OpCall&, const Exprs& x) { return x[0] * x[1]; }), mul_grad));
  register_op(with_grad(broadcast_def("Div", "a / b, broadcast; integers truncate toward zero (a zero divisor gives 0)", 2, 2, DTypes::Numeric,
                                      [](const OpCall&, const Exprs& x) { return divide(x[0], x[1]); }), div_grad));
  register_op(with_grad(pow_def(), pow_grad));
  register_op(mod_def());
  register_op(with_grad(broadcast_def("Max", "elementwise maximum of 1 or more inputs, broadcast", 1, kMany, DTypes::Numeric,
                                      [](const OpCall&, const Exprs& x) { return fold(x, max2); }), extremum_grad("GreaterOrEqual")));
  register_op(with_grad(broadcast_def("Min", "elementwise minimum of 1 or more inputs, broadcast", 1, kMany, DTypes::Numeric,
                                      [](const OpCall&, const Exprs& x) { return fold(x, min2); }), extremum_grad("LessOrEqual")));
  register_op(with_grad(broadcast_def("Sum", "elementwise sum of 1 or more inputs, broadcast", 1, kMany, DTypes::Numeric,
                                      [](const OpCall&, const Exprs& x) { return fold(x, add2); }), sum_grad));
  register_op(with_grad(broadcast_def("Mean", "elementwise mean of 1 or more inputs, broadcast", 1, kMany, DTypes::Float, [](const OpCall&, const Exprs& x) {
    return fold(x, add2) / make_const(x[0].dtype(), static_cast<double>(x.size()));
  }), mean_grad));

  auto unary = [](const char* name, const char* doc, DTypes t, Expr (*f)(Expr), UnaryGradFn df = nullptr) {
    OpDef d = unary_def(name, doc, t, [f](const OpCall&, Expr x) { return f(x); });
    if (df) d.gradient = unary_grad(std::move(df));
    register_op(std::move(d));
  };
  unary("Neg", "-x", DTypes::Signed, [](Expr x) { return -x; }, [](GradBuilder& b, const Value& g) { return b.neg(g); });
  unary("Abs", "|x|", DTypes::Numeric, [](Expr x) { return x.dtype().is_uint() ? x : abs(x); }, abs_grad);
  unary("Sqrt", "sqrt(x)", DTypes::Float, [](Expr x) { return sqrt(x); }, [](GradBuilder& b, const Value& g) { return b.div(g, b.scale(b.out(), 2)); });
  unary("Exp", "exp(x)", DTypes::Float, [](Expr x) { return exp(x); }, [](GradBuilder& b, const Value& g) { return b.mul(g, b.out()); });
  unary("Log", "natural log(x)", DTypes::Float, [](Expr x) { return log(x); }, [](GradBuilder& b, const Value& g) { return b.div(g, b.in(0)); });
  unary("Erf", "the error function erf(x)", DTypes::Float, [](Expr x) { return erf(x); }, erf_grad);
  unary("Reciprocal", "1 / x", DTypes::Float, [](Expr x) { return make_const(x.dtype(), 1.0) / x; },
        [](GradBuilder& b, const Value& g) { return b.neg(b.mul(g, b.mul(b.out(), b.out()))); });
  unary("Floor", "floor(x)", DTypes::Float, [](Expr x) { return floor(x); });
  unary("Ceil", "ceil(x)", DTypes::Float, [](Expr x) { return ceil(x); });

  OpDef identity = unary_def("Identity", "the input, unchanged (removed by remove_identity)", DTypes::Any, [](const OpCall&, Expr x) { return x; });
  identity.is_identity = true;
  identity.gradient = unary_grad([](GradBuilder&, const Value& g) { return g; });
  register_op(std::move(identity));
  register_op(with_grad(dropout_def(), unary_grad([](GradBuilder&, const Value& g) { return g; })));
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
