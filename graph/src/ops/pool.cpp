// Pooling: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool. Pattern
// Reduction: a pool reduces a small window per output, which the tuner's
// simple rule vectorises as it is (no multi-level tiling to leave room for),
// and an elementwise consumer may still fuse after it.
#include "kiln/graph/autodiff.h"
#include "kiln/ops/graph_nn.h"

#include "op_helpers.h"
#include "sharding_rules.h"
#include "window_attrs.h"
#include "window_grad.h"

namespace kiln::graph::ops_detail {
namespace {

// X [N, C, spatial...] with `what` spatial dims (0: any number >= 1).
void expect_pool_input(const OpCall& call, size_t spatial) {
  const TensorType& x = call.input_types[0];
  if (x.ndim() < 3) call.fail("X " + x.str() + " must be [N, C, spatial...] with at least one spatial dim");
  if (spatial != 0 && static_cast<size_t>(x.ndim()) != spatial + 2)
    call.fail("kernel_shape has " + std::to_string(spatial) + " dims but X " + x.str() + " has " + std::to_string(x.ndim() - 2) + " spatial dims");
}

std::vector<ops::WindowDim> pool_windows(const OpCall& call) {
  const std::vector<int64_t>& kernel = call.attrs.get_ints("kernel_shape");
  if (kernel.empty()) call.fail("kernel_shape is required and must not be empty");
  expect_pool_input(call, kernel.size());
  return resolve_windows(call, kernel, true);
}

std::vector<TensorType> pool_infer(const OpCall& call) {
  std::vector<ops::WindowDim> dims = pool_windows(call);
  TensorType t = call.input_types[0];
  for (size_t j = 0; j < dims.size(); ++j) t.shape[j + 2] = out_dim(dims[j]);
  return {t};
}

std::vector<TensorType> global_infer(const OpCall& call) {
  expect_pool_input(call, 0);
  TensorType t = call.input_types[0];
  for (int j = 2; j < t.ndim(); ++j) t.shape[j] = 1;
  return {t};
}

std::vector<AttrSpec> window_attrs(bool dilations) {
  std::vector<AttrSpec> a = {{"auto_pad", AttrKind::String, std::string("NOTSET")},
                             {"ceil_mode", AttrKind::Int, int64_t(0)},
                             {"kernel_shape", AttrKind::Ints, std::nullopt},
                             {"pads", AttrKind::Ints, std::vector<int64_t>{}},
                             {"strides", AttrKind::Ints, std::vector<int64_t>{}}};
  if (dilations) a.push_back({"dilations", AttrKind::Ints, std::vector<int64_t>{}});
  return a;
}

// ---- gradients (the kiln.*Grad ops are in pool_grad.cpp)

Attrs dx_attrs(GradBuilder& b) {
  Attrs a = window_grad_attrs(pool_windows(b.call()));
  a.set("input_shape", b.in_type(0).shape);
  return a;
}

std::vector<Value> max_pool_grad(GradBuilder& b, const std::vector<Value>& g) {
  Value argmax = b.op("kiln.MaxPoolArgmax", {b.in(0), b.out()}, window_grad_attrs(pool_windows(b.call())));
  return {b.op("kiln.MaxPoolGrad", {g[0], argmax}, dx_attrs(b))};
}

std::vector<Value> avg_pool_grad(GradBuilder& b, const std::vector<Value>& g) {
  Attrs a = dx_attrs(b);
  a.set("count_include_pad", b.attrs().get_int("count_include_pad"));
  return {b.op("kiln.AveragePoolGrad", {g[0]}, a)};
}

std::vector<Value> global_avg_grad(GradBuilder& b, const std::vector<Value>& g) {
  const TensorType& x = b.in_type(0);
  double n = static_cast<double>(x.numel() / (x.shape[0] * x.shape[1]));
  return {b.expand(b.scale(g[0], 1.0 / n), x.shape)};
}

void register_max_pool() {
  OpDef d;
  d.name = "MaxPool";
  d.doc = "max over windows (1 to 3 spatial dims), asymmetric pads, dilations, ceil_mode; output Y only (no Indices)";
  d.attrs = window_attrs(true);
  // storage_order only lays out the Indices output, which kiln does not produce.
  d.attrs.push_back({"storage_order", AttrKind::Int, int64_t(0)});
  d.pattern = Pattern::Reduction;
  d.infer = pool_infer;
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{ops::max_pool(in[0], pool_windows(call), "maxpool")}; };
  d.gradient = max_pool_grad;
  d.sharding = channel_rule();
  register_op(std::move(d));
}

void register_avg_pool() {
  OpDef d;
  d.name = "AveragePool";
  d.doc = "mean over windows, asymmetric pads, ceil_mode; count_include_pad=0 divides by the elements inside X";
  d.attrs = window_attrs(false);
  d.attrs.push_back({"count_include_pad", AttrKind::Int, int64_t(0)});
  d.pattern = Pattern::Reduction;
  d.infer = pool_infer;
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::avg_pool(in[0], pool_windows(call), call.attrs.get_int("count_include_pad") != 0, "avgpool")};
  };
  d.gradient = avg_pool_grad;
  d.sharding = channel_rule();
  register_op(std::move(d));
}

void register_global(const std::string& name, ops::ReduceOp op, const std::string& doc) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.pattern = Pattern::Reduction;
  d.infer = global_infer;
  d.compute = [op, name](const OpCall& call, const std::vector<te::Tensor>& in) {
    std::vector<int> axes;
    for (int j = 2; j < call.input_types[0].ndim(); ++j) axes.push_back(j);
    return std::vector<te::Tensor>{ops::reduce(in[0], op, axes, true, name)};
  };
  if (op == ops::ReduceOp::Mean) d.gradient = global_avg_grad;
  d.sharding = channel_rule();
  register_op(std::move(d));
}

// The pools on blocked tensors [N, C/b, H, W, b] (made by alter_conv_layout,
// so a pool between convolutions needs no layout change): the same
// attributes and windows as the plain op, read from the [N, C, H, W] view.
OpCall plain_view(const OpCall& call) {
  OpCall v = call;
  const auto& s = call.input_types[0].shape;
  if (s.size() != 5) call.fail("X " + call.input_types[0].str() + " must be blocked [N, C/b, H, W, b]");
  v.input_types[0].shape = {s[0], s[1] * s[4], s[2], s[3]};
  return v;
}

std::vector<TensorType> blocked(const OpCall& call, std::vector<TensorType> plain) {
  const auto& s = call.input_types[0].shape;
  TensorType t = plain[0];
  t.shape = {t.shape[0], s[1], t.shape[2], t.shape[3], s[4]};
  return {t};
}

void register_blocked(const std::string& plain_name) {
  OpDef d = get_op(plain_name);
  d.name = "kiln." + plain_name + "NCHWc";
  d.gradient = nullptr;  // made after differentiation; the plain op's gradient does not fit the blocked layout
  d.sharding = replicated_rule();  // made after distribution; the channel rule does not know the blocks
  d.doc = plain_name + " of a blocked [N, C/b, H, W, b] tensor (made by alter_conv_layout)";
  d.infer = [infer = d.infer](const OpCall& call) { return blocked(call, infer(plain_view(call))); };
  d.compute = [plain_name](const OpCall& call, const std::vector<te::Tensor>& in) {
    OpCall v = plain_view(call);
    if (plain_name == "MaxPool") return std::vector<te::Tensor>{ops::max_pool(in[0], pool_windows(v), "maxpool")};
    if (plain_name == "AveragePool")
      return std::vector<te::Tensor>{ops::avg_pool(in[0], pool_windows(v), call.attrs.get_int("count_include_pad") != 0, "avgpool")};
    ops::ReduceOp op = plain_name == "GlobalMaxPool" ? ops::ReduceOp::Max : ops::ReduceOp::Mean;
    return std::vector<te::Tensor>{ops::reduce(in[0], op, {2, 3}, true, plain_name)};
  };
  register_op(std::move(d));
}

const bool registered = [] {
  register_max_pool();
  register_avg_pool();
  register_global("GlobalAveragePool", ops::ReduceOp::Mean, "mean over every spatial dim, kept as 1s");
  register_global("GlobalMaxPool", ops::ReduceOp::Max, "max over every spatial dim, kept as 1s");
  for (const char* name : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}) register_blocked(name);
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
