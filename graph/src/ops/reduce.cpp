// Reductions and normalisations: ReduceSum / Mean / Max / Min, Softmax,
// LayerNormalization (pattern Reduction).
#include <algorithm>

#include "kiln/graph/autodiff.h"
#include "kiln/ops/graph_nn.h"
#include "kiln/support/error.h"
#include "op_helpers.h"
#include "sharding_rules.h"

namespace kiln::graph::ops_detail {
namespace {

struct ReduceSpec {
  std::vector<int> axes;  // normalised, sorted, distinct
  bool keepdims = true;
};

// ReduceSum (opset 13) takes its axes as constant input 1, the others (opset < 18) as an attribute.
ReduceSpec reduce_spec(const OpCall& call, bool axes_input) {
  int rank = call.input_types[0].ndim();
  std::vector<int64_t> raw;
  if (axes_input) {
    if (call.has_input(1)) {
      if (call.input_types[1].ndim() > 1) call.fail("axes (input 1) must be 1-D, got " + call.input_types[1].str());
      raw = call.constant_ints(1, "axes");
    }
  } else {
    raw = call.attrs.get_ints("axes");
  }
  ReduceSpec s;
  s.keepdims = call.attrs.get_int("keepdims") != 0;
  for (int64_t a : raw) {
    int n = normalize_axis(call, a, rank);
    if (std::find(s.axes.begin(), s.axes.end(), n) != s.axes.end()) call.fail("axes " + attr_to_string(raw) + " name axis " + std::to_string(n) + " twice");
    s.axes.push_back(n);
  }
  std::sort(s.axes.begin(), s.axes.end());
  // Empty axes reduce everything, unless noop_with_empty_axes asks for the input as it is.
  if (s.axes.empty() && call.attrs.get_int_or("noop_with_empty_axes", 0) == 0)
    for (int d = 0; d < rank; ++d) s.axes.push_back(d);
  return s;
}

// ---- gradients

using Values = std::vector<Value>;

// The output gradient spread back over the reduced axes (scaled by `factor`: 1 for a sum, 1/count for a mean).
Value spread(GradBuilder& b, const Value& g, const ReduceSpec& s, double factor) {
  std::vector<int64_t> kept = b.in_type(0).shape;
  for (int a : s.axes) kept[a] = 1;
  Value r = b.reshape(g, kept);
  if (factor != 1.0) r = b.scale(r, factor);
  return b.expand(r, b.in_type(0).shape);
}

GradientFn reduce_grad(bool axes_input, bool mean) {
  return [axes_input, mean](GradBuilder& b, const Values& g) -> Values {
    ReduceSpec s = reduce_spec(b.call(), axes_input);
    double count = 1;
    for (int a : s.axes) count *= static_cast<double>(b.in_type(0).shape[a]);
    return {spread(b, g[0], s, mean ? 1.0 / count : 1.0)};
  };
}

// dx = y (g - sum(g y)) along the axis.
Values softmax_grad(GradBuilder& b, const Values& g) {
  int64_t axis = normalize_axis(b.call(), b.attrs().get_int("axis"), b.in_type(0).ndim());
  Value y = b.out();
  Value gy = b.mul(g[0], y);
  return {b.mul(y, b.sub(g[0], b.reduce_sum(gy, {axis}, true)))};
}

// With xh = (x - mean) * rstd over the normalised axes A and dxh = g * scale:
// dx = rstd (dxh - mean_A(dxh) - xh mean_A(dxh xh)); dscale, dB sum g xh and g back to their shapes.
Values layer_norm_grad(GradBuilder& b, const Values& g) {
  const TensorType& xt = b.in_type(0);
  int axis = normalize_axis(b.call(), b.attrs().get_int("axis"), xt.ndim());
  std::vector<int64_t> axes;
  for (int k = axis; k < xt.ndim(); ++k) axes.push_back(k);
  Value x = b.in(0);
  Value xc = b.sub(x, b.reduce_mean(x, axes, true));
  Value var = b.reduce_mean(b.mul(xc, xc), axes, true);
  Value rstd = b.op("Reciprocal", {b.op("Sqrt", {b.add(var, b.scalar(b.attrs().get_float("epsilon"), xt.dtype))})});
  Value xh = b.mul(xc, rstd);
  Value dxh = b.mul(g[0], b.in(1));
  Values out(3);
  if (b.wants(0)) {
    Value m1 = b.reduce_mean(dxh, axes, true), m2 = b.reduce_mean(b.mul(dxh, xh), axes, true);
    out[0] = b.mul(rstd, b.sub(b.sub(dxh, m1), b.mul(xh, m2)));
  }
  if (b.wants(1)) out[1] = b.sum_to(b.mul(g[0], xh), b.in_type(1).shape);
  if (b.wants(2)) out[2] = b.sum_to(g[0], b.in_type(2).shape);
  return out;
}

// Reductions: split reduced dims are gathered first, except for a sum, whose blocks sum to a partial result.
RuleOutput reduce_propagate(const RuleInput& r, bool sum) {
  ShardingSpec x = seen(r, 0);
  int n = x.ndim();
  std::vector<int64_t> axes;
  if (has(r, 1)) axes = op_call(r.node).constant_ints(1, "axes");
  else if (r.node.attrs.has("axes")) axes = r.node.attrs.get_ints("axes");
  bool noop = axes.empty() && r.node.attrs.get_int_or("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(n, axes.empty() && !noop);
  for (int64_t a : axes) reduced[a < 0 ? a + n : a] = true;
  bool keep = r.node.attrs.get_int_or("keepdims", 1) != 0;
  ShardingSpec out{{}, {}};
  for (int d = 0; d < n; ++d) {
    if (!reduced[d]) {
      out.dims.push_back(x.dims[d]);
      continue;
    }
    if (sum) out.partial.insert(out.partial.end(), x.dims[d].begin(), x.dims[d].end());
    else x.dims[d].clear();
    if (keep) out.dims.push_back({});
  }
  std::sort(out.partial.begin(), out.partial.end());
  RuleOutput o = with_inputs_default(r);
  o.in[0] = x;
  o.out.push_back(out);
  return o;
}

// Softmax and LayerNormalization normalize over some axes (one, or axis..rank-1): those are gathered, the others keep their splits.
RuleOutput normalize_propagate(const RuleInput& r, bool to_end) {
  ShardingSpec x = seen(r, 0);
  int n = x.ndim();
  int axis = static_cast<int>(r.node.attrs.get_int_or("axis", -1));
  if (axis < 0) axis += n;
  for (int d = axis; d < (to_end ? n : axis + 1); ++d) x.dims[d].clear();
  RuleOutput o = with_inputs_default(r);
  o.in[0] = x;
  for (const auto& t : r.node.types) o.out.push_back(project(x, input_type(r, 0).shape, t.shape));
  return o;
}

void register_reduce(const std::string& name, ops::ReduceOp op, bool axes_input) {
  OpDef d;
  if (op == ops::ReduceOp::Sum || op == ops::ReduceOp::Mean) d.gradient = reduce_grad(axes_input, op == ops::ReduceOp::Mean);
  d.name = name;
  d.doc = axes_input ? "reduction over the axes of constant input 1 (all when absent), keepdims" : "reduction over the axes attribute (all when empty), keepdims";
  d.pattern = Pattern::Reduction;
  d.attrs = {{"keepdims", AttrKind::Int, int64_t(1)}};
  if (axes_input) {
    d.max_inputs = 2;
    d.const_inputs = {1};
    d.attrs.push_back({"noop_with_empty_axes", AttrKind::Int, int64_t(0)});
  } else {
    d.attrs.push_back({"axes", AttrKind::Ints, std::vector<int64_t>{}});
  }
  d.infer = [axes_input](const OpCall& call) {
    ReduceSpec s = reduce_spec(call, axes_input);
    TensorType t = call.input_types[0];
    Shape shape;
    for (int k = 0; k < t.ndim(); ++k) {
      bool reduced = std::binary_search(s.axes.begin(), s.axes.end(), k);
      if (!reduced) shape.push_back(t.shape[k]);
      else if (s.keepdims) shape.push_back(1);
    }
    t.shape = shape;
    return std::vector<TensorType>{t};
  };
  d.compute = [op, name, axes_input](const OpCall& call, const std::vector<te::Tensor>& in) {
    ReduceSpec s = reduce_spec(call, axes_input);
    return std::vector<te::Tensor>{ops::reduce(in[0], op, s.axes, s.keepdims, name)};
  };
  bool sum = op == ops::ReduceOp::Sum;
  d.sharding = {sum ? "reduce_sum" : "reduce", [sum](const RuleInput& r) { return reduce_propagate(r, sum); }, nullptr};
  d.cost = [](const OpCall& call, const std::vector<TensorType>&) { return OpCost{0, static_cast<double>(call.input_types[0].numel()), 0, 0}; };
  register_op(std::move(d));
}

void register_softmax() {
  OpDef d;
  d.name = "Softmax";
  d.doc = "exp(x - max) / sum along one axis (opset 13: default -1)";
  d.attrs = {{"axis", AttrKind::Int, int64_t(-1)}};
  d.pattern = Pattern::Reduction;
  d.infer = [](const OpCall& call) {
    if (!call.input_types[0].dtype.is_float()) call.fail("X must be a float tensor, got " + call.input_types[0].str());
    normalize_axis(call, call.attrs.get_int("axis"), call.input_types[0].ndim());
    return same_as_input(call);
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    int axis = normalize_axis(call, call.attrs.get_int("axis"), call.input_types[0].ndim());
    return std::vector<te::Tensor>{ops::softmax_axis(in[0], axis, "softmax")};
  };
  d.gradient = softmax_grad;
  d.sharding = {"softmax", [](const RuleInput& r) { return normalize_propagate(r, false); }, nullptr};
  d.cost = per_element_cost(4);  // max, exp, sum, divide
  register_op(std::move(d));
}

void register_layer_norm() {
  OpDef d;
  d.name = "LayerNormalization";
  d.doc = "(x - mean) / sqrt(var + epsilon) * Scale + B over dims axis..rank-1 (opset 17); output Y only (no Mean, InvStdDev)";
  d.min_inputs = 2;
  d.max_inputs = 3;
  // stash_type picks float32 statistics for low-precision inputs; kiln computes them in X's float type.
  d.attrs = {{"axis", AttrKind::Int, int64_t(-1)}, {"epsilon", AttrKind::Float, 1e-5}, {"stash_type", AttrKind::Int, int64_t(1)}};
  d.pattern = Pattern::Reduction;
  d.infer = [](const OpCall& call) {
    const TensorType& x = call.input_types[0];
    if (!x.dtype.is_float()) call.fail("X must be a float tensor, got " + x.str());
    int axis = normalize_axis(call, call.attrs.get_int("axis"), x.ndim());
    Shape normalized(x.shape.begin() + axis, x.shape.end());
    for (int i = 1; i < 3; ++i) {
      if (!call.has_input(i)) continue;
      const TensorType& t = call.input_types[i];
      const char* what = i == 1 ? "Scale" : "B";
      if (t.dtype != x.dtype) call.fail(std::string(what) + " has dtype " + t.dtype.str() + " but X has " + x.dtype.str());
      // Scale and B broadcast to the normalised shape without growing it: each dim is 1 or X's (provably, when symbolic).
      size_t lead = normalized.size() - std::min(normalized.size(), static_cast<size_t>(t.ndim()));
      bool ok = t.ndim() <= static_cast<int>(normalized.size());
      for (int k = 0; ok && k < t.ndim(); ++k) ok = t.shape[k] == 1 || t.shape[k] == normalized[lead + k];
      if (!ok) call.fail(std::string(what) + " " + t.str() + " does not broadcast to the normalised shape " + shape_to_string(normalized) + " of X " + x.str() + " (axis " + std::to_string(axis) + ")");
    }
    return same_as_input(call);
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    int axis = normalize_axis(call, call.attrs.get_int("axis"), call.input_types[0].ndim());
    te::Tensor bias = in.size() > 2 ? in[2] : te::Tensor();
    return std::vector<te::Tensor>{ops::layer_norm_axes(in[0], in[1], bias, axis, call.attrs.get_float("epsilon"), "layernorm")};
  };
  d.gradient = layer_norm_grad;
  d.sharding = {"layer_norm", [](const RuleInput& r) { return normalize_propagate(r, true); }, nullptr};
  d.cost = per_element_cost(7);  // sum, subtract, square and sum, normalise, scale, shift
  register_op(std::move(d));
}

const bool registered = [] {
  register_reduce("ReduceSum", ops::ReduceOp::Sum, true);
  register_reduce("ReduceMean", ops::ReduceOp::Mean, false);
  register_reduce("ReduceMax", ops::ReduceOp::Max, false);
  register_reduce("ReduceMin", ops::ReduceOp::Min, false);
  register_softmax();
  register_layer_norm();
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
