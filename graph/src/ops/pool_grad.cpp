// The gradient operators of the pools (kiln's own, made by the pools'
// gradients in pool.cpp). MaxPool's gradient goes to the first maximum of
// each window in scan order (as PyTorch's does), found by
// kiln.MaxPoolArgmax; kiln.MaxPoolGrad and kiln.AveragePoolGrad gather, for
// each input element, the output gradients of the windows that cover it.
#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"
#include "op_helpers.h"
#include "sharding_rules.h"
#include "window_grad.h"

namespace kiln::graph::ops_detail {
namespace {

using ops::index_imm;
using ops::shape_exprs;

// blocked=1 (made by the training layout, train_layout.cpp): the tensors are
// [N, C/b, spatial..., b], the last axis the channels' inner block, which a
// window does not cross.
int64_t blocked(const OpCall& call) { return call.attrs.get_int_or("blocked", 0) != 0 ? 1 : 0; }

std::vector<int64_t> spatial(const std::vector<int64_t>& s, int64_t inner = 0) { return std::vector<int64_t>(s.begin() + 2, s.end() - inner); }

// The index [n, c, spatial..., (inner)] of output index i with its spatial part replaced by `rest`.
std::vector<Expr> prefixed(const std::vector<Var>& i, const std::vector<Expr>& rest, int64_t inner = 0) {
  std::vector<Expr> v{i[0], i[1]};
  v.insert(v.end(), rest.begin(), rest.end());
  if (inner) v.push_back(i.back());
  return v;
}

std::vector<Expr> tail(const std::vector<Var>& i, int64_t inner = 0) { return std::vector<Expr>(i.begin() + 2, i.end() - inner); }

// Windows of an op whose inputs are [dY, ...] and whose output is the input's gradient.
std::vector<ops::WindowDim> dx_windows(const OpCall& call) {
  const auto& in = call.attrs.get_ints("input_shape");
  if (in.size() != call.input_types[0].shape.size()) call.fail("input_shape " + attr_to_string(in) + " and dY " + call.input_types[0].str() + " differ in rank");
  return grad_windows(call, spatial(in, blocked(call)), spatial(call.input_types[0].shape, blocked(call)));
}

std::vector<TensorType> dx_infer(const OpCall& call) {
  dx_windows(call);
  return {TensorType{call.attrs.get_ints("input_shape"), call.input_types[0].dtype}};
}

Expr sum_or_zero(const Expr& valid, const Expr& body, const std::vector<IterVar>& axes) {
  return te::sum(valid.defined() ? if_then_else(valid, body, make_zero(body.dtype())) : body, axes);
}

// kiln.MaxPoolArgmax(X, Y): per output, the row-major tap of the window's first maximum (int32).
void register_argmax() {
  OpDef d;
  d.name = "kiln.MaxPoolArgmax";
  d.doc = "per MaxPool output (Y = MaxPool(X)), the index of the first tap of its window holding the maximum";
  d.min_inputs = d.max_inputs = 2;
  d.attrs = window_grad_specs(false);
  d.attrs.push_back({"blocked", AttrKind::Int, int64_t(0)});
  d.pattern = Pattern::Reduction;
  d.infer = [](const OpCall& call) {
    grad_windows(call, spatial(call.input_types[0].shape, blocked(call)), spatial(call.input_types[1].shape, blocked(call)));
    return std::vector<TensorType>{TensorType{call.input_types[1].shape, DataType::Int(32)}};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    te::Tensor X = in[0], Y = in[1];
    const int64_t b = blocked(call);
    auto dims = grad_windows(call, spatial(call.input_types[0].shape, b), spatial(call.input_types[1].shape, b));
    Taps taps(dims);
    int64_t count = 1;
    for (const auto& w : dims) count *= w.kernel;
    Expr none = make_const(DataType::Int(32), static_cast<double>(count));
    return std::vector<te::Tensor>{te::compute(shape_exprs(call.input_types[1].shape), [&](const std::vector<Var>& i) {
      auto [h, inside] = forward_taps(dims, tail(i, b), taps.t);
      Expr hit = X(prefixed(i, h, b)) == Y(std::vector<Expr>(i.begin(), i.end()));
      Expr v = select(hit, cast(DataType::Int(32), taps.flat(dims)), none);
      return te::min(inside.defined() ? if_then_else(inside, v, none) : v, taps.axes);
    }, "maxpool_argmax")};
  };
  d.sharding = channel_rule();
  register_op(std::move(d));
}

// kiln.MaxPoolGrad(dY, Argmax) -> dX: each window's gradient to its first maximum.
void register_max_grad() {
  OpDef d;
  d.name = "kiln.MaxPoolGrad";
  d.doc = "MaxPool's input gradient from dY and kiln.MaxPoolArgmax";
  d.min_inputs = d.max_inputs = 2;
  d.attrs = window_grad_specs(true);
  d.attrs.push_back({"blocked", AttrKind::Int, int64_t(0)});
  d.pattern = Pattern::Reduction;
  d.infer = dx_infer;
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    te::Tensor dY = in[0], A = in[1];
    auto dims = dx_windows(call);
    const int64_t b = blocked(call);
    Taps taps(dims);
    return std::vector<te::Tensor>{te::compute(shape_exprs(call.attrs.get_ints("input_shape")), [&](const std::vector<Var>& i) {
      auto [o, valid] = reverse_taps(dims, tail(i, b), taps.t);
      Expr hit = A(prefixed(i, o, b)) == cast(DataType::Int(32), taps.flat(dims));
      return sum_or_zero(valid, select(hit, dY(prefixed(i, o, b)), make_zero(dY.dtype())), taps.axes);
    }, "maxpool_grad")};
  };
  d.sharding = channel_rule_with_input_shape();
  register_op(std::move(d));
}

// The number of elements AveragePool divided window o by (as ops::avg_pool counts them).
Expr window_count(const std::vector<ops::WindowDim>& dims, const std::vector<Expr>& o, bool include_pad, DataType t) {
  Expr n;
  for (size_t j = 0; j < dims.size(); ++j) {
    const ops::WindowDim& d = dims[j];
    int64_t lo_limit = include_pad ? -d.pad_begin : 0, hi_limit = include_pad ? d.in + d.pad_end : d.in;
    Expr start = o[j] * index_imm(d.stride) - index_imm(d.pad_begin);
    Expr extent = min(start + index_imm(d.kernel), index_imm(hi_limit)) - max(start, index_imm(lo_limit));
    n = n.defined() ? n * extent : extent;
  }
  return cast(t, n);
}

void register_avg_grad() {
  OpDef d;
  d.name = "kiln.AveragePoolGrad";
  d.doc = "AveragePool's input gradient from dY: each window's gradient spread evenly over the elements it averaged";
  d.attrs = window_grad_specs(true);
  d.attrs.push_back({"count_include_pad", AttrKind::Int, int64_t(0)});
  d.pattern = Pattern::Reduction;
  d.infer = dx_infer;
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    te::Tensor dY = in[0];
    auto dims = dx_windows(call);
    bool include = call.attrs.get_int("count_include_pad") != 0;
    Taps taps(dims);
    return std::vector<te::Tensor>{te::compute(shape_exprs(call.attrs.get_ints("input_shape")), [&](const std::vector<Var>& i) {
      auto [o, valid] = reverse_taps(dims, tail(i), taps.t);
      return sum_or_zero(valid, dY(prefixed(i, o)) / window_count(dims, o, include, dY.dtype()), taps.axes);
    }, "avgpool_grad")};
  };
  d.sharding = channel_rule_with_input_shape();
  register_op(std::move(d));
}

const bool registered = [] {
  register_argmax();
  register_max_grad();
  register_avg_grad();
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
