// kiln.Dropout(x, seed): training-time dropout with a mask drawn from a
// counter-based hash of (seed, element index), so it needs no RNG state, is
// the same on every run with the same seed, and its gradient is the same op
// applied to the output gradient (dropout is linear in x for a fixed mask).
// lift_parameters(training) turns each Dropout of a model into one, fed a
// fresh seed per step by kiln.train.
#include "elementwise_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

constexpr int64_t kPrime = 2147483647;  // 2^31 - 1: products of two residues fit in int64

Expr i64(int64_t v) { return make_const(DataType::Int(64), static_cast<double>(v)); }
Expr mod_p(Expr x) { return floormod(x, i64(kPrime)); }

// A uniform residue in [0, 2^31 - 1) per (element, seed): multiplicative
// (Lehmer) steps spread neighbouring indices, squaring steps break the
// lattice a purely linear generator would leave.
Expr hash(Expr flat, Expr seed) {
  Expr h = mod_p(mod_p(flat) * i64(48271) + mod_p(seed) * i64(69621) % i64(kPrime));
  h = mod_p(h * h + i64(12345));
  h = mod_p(h * i64(48271));
  h = mod_p(h * h + i64(6789));
  return mod_p(h * i64(16807));
}

std::vector<TensorType> infer(const OpCall& call) {
  expect_dtype(call, 0, DTypes::Float, "X");
  const TensorType& s = call.input_types[1];
  if (s.dtype != DataType::Int(64) || s.ndim() != 0) call.fail("the seed (input 1) must be an int64 scalar, got " + s.str());
  double p = call.attrs.get_float("ratio");
  if (!(p >= 0 && p < 1)) call.fail("ratio " + std::to_string(p) + " must be in [0, 1)");
  return {call.input_types[0]};
}

std::vector<te::Tensor> compute(const OpCall& call, const std::vector<te::Tensor>& in) {
  te::Tensor X = in[0], S = in[1];
  const std::vector<int64_t>& shape = call.input_types[0].shape;
  double p = call.attrs.get_float("ratio");
  Expr threshold = i64(static_cast<int64_t>(p * static_cast<double>(kPrime)));
  Expr scale = make_const(X.dtype(), 1.0 / (1.0 - p));
  return {te::compute(ops::shape_exprs(shape), [&](const std::vector<Var>& i) {
    Expr flat = i64(0);
    for (size_t k = 0; k < shape.size(); ++k) flat = flat * i64(shape[k]) + cast(DataType::Int(64), i[k]);
    Expr x = X(std::vector<Expr>(i.begin(), i.end()));
    return select(hash(flat, S({})) >= threshold, x * scale, make_zero(X.dtype()));
  }, "dropout")};
}

std::vector<Value> gradient(GradBuilder& b, const std::vector<Value>& g) {
  return {b.op("kiln.Dropout", {g[0], b.in(1)}, b.attrs()), Value()};
}

const bool registered = [] {
  OpDef d;
  d.name = "kiln.Dropout";
  d.doc = "training dropout: x / (1 - ratio) where a hash of (seed, element index) keeps it, else 0; seed an int64 scalar input";
  d.min_inputs = d.max_inputs = 2;
  d.attrs = {{"ratio", AttrKind::Float, AttrValue(0.5)}};
  d.pattern = Pattern::Broadcast;
  d.sharding = elementwise_rule();
  d.cost = per_element_cost();
  d.infer = infer;
  d.compute = compute;
  d.gradient = gradient;
  register_op(std::move(d));
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
