// Training losses, kiln's own ops (no ONNX counterpart in the inference
// opsets): kiln.SoftmaxCrossEntropy and kiln.MeanSquaredError, both reduced
// to a scalar (the mean), with their gradients. Pattern Reduction.
#include <algorithm>
#include <cmath>

#include "elementwise_helpers.h"
#include "kiln/support/error.h"
#include "sharding_rules.h"

namespace kiln::graph::ops_detail {
namespace {

int onnx_float_code(DataType t) { return t.bits() == 64 ? 11 : 1; }

// ---- kiln.SoftmaxCrossEntropy(logits [N, C], labels [N] int) -> mean over N of -log softmax(logits)[label]

std::vector<TensorType> ce_infer(const OpCall& call) {
  const TensorType &x = call.input_types[0], &y = call.input_types[1];
  expect_dtype(call, 0, DTypes::Float, "the logits (input 0)");
  if (x.ndim() != 2) call.fail("the logits " + x.str() + " must be [batch, classes]");
  if (!y.dtype.is_integer()) call.fail("the labels " + y.str() + " must be class indices (int32 or int64), one per row of the logits");
  if (y.shape != std::vector<int64_t>{x.shape[0]})
    call.fail("the labels " + y.str() + " must be [" + std::to_string(x.shape[0]) + "], one class index per row of the logits " + x.str());
  return {TensorType{{}, x.dtype}};
}

// Stable: log(sum exp(x - max)) + max - x[label]. A label outside [0, C)
// is clamped (a kernel cannot report it).
std::vector<te::Tensor> ce_compute(const OpCall& call, const std::vector<te::Tensor>& in) {
  te::Tensor X = in[0], L = in[1];
  int64_t N = call.input_types[0].shape[0], C = call.input_types[0].shape[1];
  auto row = [&](const char* name, auto f) { return te::compute({ops::index_imm(N)}, [&](const std::vector<Var>& i) { return f(i[0]); }, name); };
  te::Tensor mx = row("ce.max", [&](Var n) {
    IterVar c = te::reduce_axis(Range(0, ops::index_imm(C)), "c");
    return te::max(X({n, c.var()}), {c});
  });
  te::Tensor se = row("ce.sumexp", [&](Var n) {
    IterVar c = te::reduce_axis(Range(0, ops::index_imm(C)), "c");
    return te::sum(exp(X({n, c.var()}) - mx({n})), {c});
  });
  te::Tensor nll = row("ce.nll", [&](Var n) {
    Expr label = cast(n.dtype(), L({n}));
    label = max(min(label, make_const(n.dtype(), static_cast<double>(C - 1))), make_zero(n.dtype()));
    return log(se({n})) + mx({n}) - X({n, label});
  });
  te::Tensor total = te::compute({}, [&](const std::vector<Var>&) {
    IterVar n = te::reduce_axis(Range(0, ops::index_imm(N)), "n");
    return te::sum(nll({n.var()}), {n});
  }, "ce.sum");
  return {te::compute({}, [&](const std::vector<Var>&) { return total({}) * make_const(X.dtype(), 1.0 / static_cast<double>(N)); }, "softmax_cross_entropy")};
}

// d/dlogits = (softmax(logits) - onehot(labels)) * g / N.
std::vector<Value> ce_grad(GradBuilder& b, const std::vector<Value>& g) {
  const TensorType& x = b.in_type(0);
  DataType t = x.dtype, lt = b.in_type(1).dtype;
  std::vector<int64_t> classes(x.shape[1]);
  for (int64_t c = 0; c < x.shape[1]; ++c) classes[c] = c;
  Value cls = b.ints(classes);
  if (lt != DataType::Int(64)) cls = b.op("Cast", {cls}, Attrs({{"to", int64_t(6)}}));  // int32 labels
  Value hit = b.op("Equal", {b.op("Unsqueeze", {b.in(1), b.ints({1})}), cls});
  Value onehot = b.op("Cast", {hit}, Attrs({{"to", int64_t(onnx_float_code(t))}}));
  Value p = b.op("Softmax", {b.in(0)}, Attrs({{"axis", int64_t(1)}}));
  return {b.mul(b.sub(p, onehot), b.scale(g[0], 1.0 / static_cast<double>(x.shape[0])))};
}

// ---- kiln.MeanSquaredError(prediction, target) -> mean((prediction - target)^2)

std::vector<TensorType> mse_infer(const OpCall& call) {
  expect_dtype(call, 0, DTypes::Float, "the prediction (input 0)");
  const TensorType &p = call.input_types[0], &t = call.input_types[1];
  if (p != t) call.fail("the prediction " + p.str() + " and the target " + t.str() + " must have one shape and dtype (kiln does not broadcast a loss)");
  return {TensorType{{}, p.dtype}};
}

// The squares are summed in two levels, the trailing axes first (about
// sqrt(n) elements each) and then those sums: one float32 accumulator over
// every element drifts (a BERT layer's [8, 128, 768] output: 4e-4 relative
// to PyTorch's loss); two of about sqrt(n) stay near rounding.
std::vector<te::Tensor> mse_compute(const OpCall& call, const std::vector<te::Tensor>& in) {
  const std::vector<int64_t>& shape = call.input_types[0].shape;
  int64_t n = std::max<int64_t>(call.input_types[0].numel(), 1);
  size_t split = 0;  // axes [split, rank) are summed first; 0: one level
  double best = 0;
  for (size_t k = 1, inner = n; k < shape.size(); ++k) {
    inner /= shape[k - 1];
    double off = std::abs(std::log(static_cast<double>(std::max<int64_t>(inner, 1))) - 0.5 * std::log(static_cast<double>(n)));
    if (split == 0 || off < best) split = k, best = off;
  }
  auto axes_of = [&](size_t from, size_t to, std::vector<IterVar>* axes) {
    for (size_t k = from; k < to; ++k) axes->push_back(te::reduce_axis(Range(0, ops::index_imm(shape[k])), "r" + std::to_string(k)));
  };
  auto square = [&](const std::vector<Expr>& at) {
    Expr d = in[0](at) - in[1](at);
    return d * d;
  };
  te::Tensor total;
  if (split == 0) {
    std::vector<IterVar> axes;
    axes_of(0, shape.size(), &axes);
    std::vector<Expr> at;
    for (const IterVar& a : axes) at.push_back(a.var());
    total = te::compute({}, [&](const std::vector<Var>&) { return axes.empty() ? square(at) : te::sum(square(at), axes); }, "mse.sum");
  } else {
    std::vector<int64_t> outer(shape.begin(), shape.begin() + split);
    te::Tensor rows = te::compute(ops::shape_exprs(outer), [&](const std::vector<Var>& i) {
      std::vector<IterVar> axes;
      axes_of(split, shape.size(), &axes);
      std::vector<Expr> at(i.begin(), i.end());
      for (const IterVar& a : axes) at.push_back(a.var());
      return te::sum(square(at), axes);
    }, "mse.rows");
    total = te::compute({}, [&](const std::vector<Var>&) {
      std::vector<IterVar> axes;
      axes_of(0, split, &axes);
      std::vector<Expr> at;
      for (const IterVar& a : axes) at.push_back(a.var());
      return te::sum(rows(at), axes);
    }, "mse.sum");
  }
  double scale = 1.0 / static_cast<double>(n);
  return {te::compute({}, [&](const std::vector<Var>&) { return total({}) * make_const(in[0].dtype(), scale); }, "mean_squared_error")};
}

std::vector<Value> mse_grad(GradBuilder& b, const std::vector<Value>& g) {
  double n = static_cast<double>(std::max<int64_t>(b.in_type(0).numel(), 1));
  Value d = b.mul(b.sub(b.in(0), b.in(1)), b.scale(g[0], 2.0 / n));
  return {d, b.wants(1) ? b.neg(d) : Value()};
}

// ---- sharding: on split inputs each rank's mean, scaled by its share, is an
// addend of the global mean, so the loss is a partial sum and the batch is
// never gathered (the gradient ops scale by the global count).

// batch_only: the cross entropy's logits keep a split of the batch only (its classes are gathered).
RuleOutput mean_loss_propagate(const RuleInput& r, bool batch_only) {
  ShardingSpec x = seen(r, 0);
  if (batch_only)
    for (int d = 1; d < x.ndim(); ++d) x.dims[d].clear();
  RuleOutput o = with_inputs_default(r);
  o.in[0] = x;
  o.in[1] = batch_only ? ShardingSpec{{x.dims[0]}, {}} : x;
  ShardingSpec out = R(r.node.types[0].ndim());
  for (const auto& d : x.dims) out.partial.insert(out.partial.end(), d.begin(), d.end());
  std::sort(out.partial.begin(), out.partial.end());
  o.out.push_back(out);
  return o;
}

// The rank's loss times its share (1 / the ranks it is split over).
Ref<OpNode> mean_loss_localize(const OpNode& g, std::vector<Value> ins, const std::vector<ShardingSpec>& outs, const Mesh& mesh) {
  Ref<OpNode> local = make_op(g.op, ins, g.attrs, g.name);
  int64_t k = 1;
  for (int a : outs[0].partial) k *= mesh.axis_size(a);
  if (k == 1) return local;
  DataType t = g.types[0].dtype;
  NDArray c = NDArray::empty({}, t);
  if (t == DataType::Float(64)) *static_cast<double*>(c.data()) = 1.0 / static_cast<double>(k);
  else *static_cast<float*>(c.data()) = 1.0f / static_cast<float>(k);
  return make_op("Mul", {local->output(), make_constant(g.name + ".share", c)->output()}, {}, g.name + ".share");
}

ShardingRule mean_loss_rule(bool batch_only) {
  return {batch_only ? "mean_loss_batch" : "mean_loss", [batch_only](const RuleInput& r) { return mean_loss_propagate(r, batch_only); },
          mean_loss_localize};
}

const bool registered = [] {
  OpDef ce;
  ce.name = "kiln.SoftmaxCrossEntropy";
  ce.doc = "mean over the batch of -log softmax(logits)[label]: logits [N, C] float, labels [N] int32/int64; a scalar";
  ce.min_inputs = ce.max_inputs = 2;
  ce.pattern = Pattern::Reduction;
  ce.infer = ce_infer;
  ce.compute = ce_compute;
  ce.gradient = ce_grad;
  ce.sharding = mean_loss_rule(true);
  register_op(std::move(ce));

  OpDef mse;
  mse.name = "kiln.MeanSquaredError";
  mse.doc = "mean((prediction - target)^2) over every element; prediction and target of one shape; a scalar";
  mse.min_inputs = mse.max_inputs = 2;
  mse.pattern = Pattern::Reduction;
  mse.infer = mse_infer;
  mse.compute = mse_compute;
  mse.gradient = mse_grad;
  mse.sharding = mean_loss_rule(false);
  register_op(std::move(mse));
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
