// The gradient operators of Conv (kiln's own, made by Conv's gradient in
// nn.cpp): the input's gradient as a reduction over the kernel taps that
// reach each input element (a transposed convolution), and the weights'
// gradient as a reduction of input times output gradient over the batch and
// the output positions. Groups (and so depthwise) are the forward's.
#include <algorithm>
#include <functional>

#include "kiln/ir/op.h"
#include "conv_grad_grouped.h"
#include "kiln/ops/broadcast.h"
#include "op_helpers.h"
#include "sharding_rules.h"
#include "window_grad.h"

namespace kiln::graph::ops_detail {
namespace {

using ops::index_imm;
using ops::shape_exprs;

std::vector<int64_t> spatial(const std::vector<int64_t>& s) { return std::vector<int64_t>(s.begin() + 2, s.end()); }

std::vector<Expr> as_exprs(const std::vector<Var>& v, size_t from, size_t to) { return std::vector<Expr>(v.begin() + from, v.begin() + to); }

std::vector<Expr> cat(std::vector<Expr> a, const std::vector<Expr>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Sums `body` over `axes` with out-of-window terms zero.
Expr guarded_sum(const Expr& valid, const Expr& body, const std::vector<IterVar>& axes) {
  Expr v = valid.defined() ? if_then_else(valid, body, make_zero(body.dtype())) : body;
  return te::sum(v, axes);
}

// ---- the input's gradient as a forward convolution (ops::conv_nchw), so it
// is scheduled as one: a reduction without conditions over padded input.
// Where that form does not apply it falls back to the direct form.

std::vector<Expr> idx(const std::vector<Var>& i) { return std::vector<Expr>(i.begin(), i.end()); }

// dX = conv(dY dilated by the stride and padded by span - 1 - pad, W flipped
// with its channel axes swapped per group), stride 1. Undefined where a pad
// would be negative (a pad as wide as the window).
// With `product` (group 1 only), the conv is the channels-last form with that
// product: dY and W as bfloat16 pairs along K, [N, K/2, out...] and [K/2, C, kernel...].
te::Tensor grad_input_as_conv(const te::Tensor& dY, const te::Tensor& W, const std::vector<ops::WindowDim>& dims, int64_t G,
                              const std::vector<int64_t>& xs, const std::function<Expr(Expr, Expr)>& product) {
  std::vector<int64_t> ys = ops::const_shape(dY), ws = ops::const_shape(W);
  int64_t K = ws[0], Cg = ws[1], Kg = K / G, C = xs[1];
  std::vector<ops::WindowDim> conv(dims.size());
  std::vector<int64_t> dilated{ys[0], K};
  bool strided = false;
  for (size_t j = 0; j < dims.size(); ++j) {
    const ops::WindowDim& d = dims[j];
    int64_t in = (d.out - 1) * d.stride + 1, pb = d.span() - 1 - d.pad_begin, pe = xs[j + 2] + d.pad_begin - (d.out - 1) * d.stride - 1;
    if (pb < 0 || pe < 0) return te::Tensor();
    conv[j] = ops::WindowDim{in, d.kernel, 1, d.dilation, pb, pe, xs[j + 2]};
    dilated.push_back(in);
    strided |= d.stride > 1;
  }
  te::Tensor D = dY;
  if (strided)
    D = te::compute(shape_exprs(dilated), [&](const std::vector<Var>& i) {
      std::vector<Expr> at{i[0], i[1]};
      Expr hit;
      for (size_t j = 0; j < dims.size(); ++j) {
        Expr s = index_imm(dims[j].stride);
        at.push_back(dims[j].stride == 1 ? Expr(i[j + 2]) : floordiv(i[j + 2], s));
        if (dims[j].stride > 1) hit = and_maybe(hit, floormod(i[j + 2], s) == 0);
      }
      return if_then_else(hit, dY(at), make_zero(dY.dtype()));
    }, "conv_grad_input.dilate");
  std::vector<int64_t> fs{C, Kg};
  fs.insert(fs.end(), ws.begin() + 2, ws.end());
  te::Tensor Wf = te::compute(shape_exprs(fs), [&](const std::vector<Var>& i) {
    Expr c = i[0];
    Expr k = G == 1 ? Expr(i[1]) : floordiv(c, index_imm(Cg)) * index_imm(Kg) + i[1];
    std::vector<Expr> at{k, G == 1 ? c : floormod(c, index_imm(Cg))};
    for (size_t j = 0; j < dims.size(); ++j) at.push_back(index_imm(dims[j].kernel - 1) - i[j + 2]);
    return W(at);
  }, "conv_grad_input.flip");
  if (product) return ops::conv_channels_last(D, Wf, te::Tensor(), conv, "conv_grad_input", product);
  return ops::conv_nchw(D, Wf, conv, G, "conv_grad_input");
}

// dX from dY [N, K, out...] and W [K, C/group, kernel...] (or, with
// `product`, their bfloat16 pairs along K): as a forward convolution where
// that form applies, else directly over the taps that reach each input.
te::Tensor conv_grad_input(const OpCall& call, const te::Tensor& dY, const te::Tensor& W, const std::function<Expr(Expr, Expr)>& product) {
  const std::vector<int64_t>& xs = call.attrs.get_ints("input_shape");
  auto dims = grad_windows(call, spatial(xs), spatial(call.input_types[0].shape));
  int64_t G = call.attrs.get_int_or("group", 1), K = call.input_types[1].shape[0], Cg = call.input_types[1].shape[1], Kg = K / G;
  if (!product && G > 1)
    if (te::Tensor phases = grouped_grad_input_by_phases(dY, W, dims, G, xs); phases.defined()) return phases;
  te::Tensor as_conv = grad_input_as_conv(dY, W, dims, G, xs, product);
  if (as_conv.defined()) return as_conv;
  Taps taps(dims);
  IterVar kk = te::reduce_axis(Range(0, index_imm(Kg)), "kk");
  std::vector<IterVar> axes{kk};
  axes.insert(axes.end(), taps.axes.begin(), taps.axes.end());
  return te::compute(shape_exprs(xs), [&](const std::vector<Var>& i) {
    auto [o, valid] = reverse_taps(dims, as_exprs(i, 2, i.size()), taps.t);
    Expr c = i[1];
    Expr k = G == 1 ? Expr(kk.var()) : floordiv(c, index_imm(Cg)) * index_imm(Kg) + kk.var();
    Expr cw = G == 1 ? c : floormod(c, index_imm(Cg));
    Expr a = dY(cat({i[0], k}, o)), b = W(cat({k, cw}, taps.t));
    return guarded_sum(valid, product ? product(a, b) : a * b, axes);
  }, "conv_grad_input");
}

// What both forms of the weight gradient sum over: the batch and the output
// positions (axes, o), and X padded once (P) with its windows (unpadded), so
// the reduction reads it without conditions.
struct WeightGradSum {
  std::vector<IterVar> axes;
  std::vector<Expr> o;
  te::Tensor P;
  std::vector<ops::WindowDim> unpadded;
};

WeightGradSum weight_grad_sum(const te::Tensor& X, const std::vector<int64_t>& ys, const std::vector<ops::WindowDim>& dims) {
  WeightGradSum w;
  w.axes.push_back(te::reduce_axis(Range(0, index_imm(ys[0])), "n"));
  for (size_t j = 2; j < ys.size(); ++j) {
    w.axes.push_back(te::reduce_axis(Range(0, index_imm(ys[j])), "o" + std::to_string(j - 2)));
    w.o.push_back(w.axes.back().var());
  }
  w.P = ops::pad_spatial(X, dims, 0.0, "conv_grad_weight.pad");
  w.unpadded = dims;  // the windows over P: no pads, every tap inside
  for (auto& d : w.unpadded) d.pad_begin = d.pad_end = 0, d.in = (d.out - 1) * d.stride + d.span();
  return w;
}

// dW (one group) as a matmul per kernel tap, vectorized along the output
// channels: R[c, taps..., k] = sum over n and the output positions of
// dY[n, k, o...] * P[n, c, o * stride + tap * dilation], then dW = R with
// k moved first. dY is read with k as a plain index beside reduce indices,
// so the tuner's pack rule copies it into panels of k, contiguous along the
// output positions; P's rows (c, taps) walk the same positions. Written as
// a convolution instead (X and dY with N and C swapped), the vectors ran
// along the kernel's width, 3 lanes of 16: ResNet-18's weight gradients
// ran at 35 to 55 GFLOP/s.
//
// With `product`, X and dY are bfloat16 pairs along the batch (two images to
// a uint32, aligned at every position), and the sum runs over the pairs.
te::Tensor grad_weight_by_taps(const te::Tensor& X, const te::Tensor& dY, const std::vector<ops::WindowDim>& dims, const std::vector<int64_t>& ws,
                               const std::function<Expr(Expr, Expr)>& product = {}) {
  WeightGradSum w = weight_grad_sum(X, ops::const_shape(dY), dims);
  size_t nd = dims.size();
  std::vector<int64_t> rs{ws[1]};
  rs.insert(rs.end(), ws.begin() + 2, ws.end());
  rs.push_back(ws[0]);
  te::Tensor R = te::compute(shape_exprs(rs), [&](const std::vector<Var>& i) {
    auto [h, inside] = forward_taps(w.unpadded, w.o, as_exprs(i, 1, 1 + nd));
    Expr n = w.axes[0].var();
    Expr a = dY(cat({n, i.back()}, w.o)), b = w.P(cat({n, i[0]}, h));
    return guarded_sum(inside, product ? product(a, b) : a * b, w.axes);
  }, "conv_grad_weight.ck");
  return te::compute(shape_exprs(ws), [&](const std::vector<Var>& i) {
    std::vector<Expr> at{i[1]};
    for (size_t j = 0; j < nd; ++j) at.push_back(i[2 + j]);
    at.push_back(i[0]);
    return R(at);
  }, "conv_grad_weight");
}

// kiln.ConvGradInput(dY, W): dX keeps dY's batch split.
RuleOutput grad_input_propagate(const RuleInput& r) {
  ShardingSpec out = R(r.node.types[0].ndim());
  out.dims[0] = seen(r, 0).dims[0];
  out = fit_to(out, r.node.types[0].shape, r.mesh);
  RuleOutput o = with_inputs_default(r);
  o.in[0].dims[0] = out.dims[0];
  o.out.push_back(out);
  return o;
}

// kiln.ConvGradWeight(X, dY): the batch is contracted, so batch-split operands give a partial weight gradient.
RuleOutput grad_weight_propagate(const RuleInput& r) {
  Axes nb = seen(r, 0).dims[0];
  if (nb.empty()) nb = seen(r, 1).dims[0];
  if (!splits(input_type(r, 0).shape[0], nb, r.mesh)) nb.clear();
  RuleOutput o = with_inputs_default(r);
  o.in[0].dims[0] = nb;
  o.in[1].dims[0] = nb;
  ShardingSpec out = R(r.node.types[0].ndim());
  out.partial = nb;
  std::sort(out.partial.begin(), out.partial.end());
  o.out.push_back(out);
  return o;
}

// kiln.ConvGradInput(dY [N, K, out...], W [K, C/group, kernel...]) -> dX [input_shape].
void register_grad_input() {
  OpDef d;
  d.name = "kiln.ConvGradInput";
  d.doc = "the gradient of Conv's input X from dY and W (a transposed convolution); attributes resolved by Conv's gradient";
  d.min_inputs = d.max_inputs = 2;
  d.attrs = window_grad_specs(true);
  d.attrs.push_back({"group", AttrKind::Int, int64_t(1)});
  d.pattern = Pattern::OutputFusable;
  d.infer = [](const OpCall& call) {
    const auto& in = call.attrs.get_ints("input_shape");
    if (in.size() != call.input_types[0].shape.size()) call.fail("input_shape " + attr_to_string(in) + " and dY " + call.input_types[0].str() + " differ in rank");
    grad_windows(call, spatial(in), spatial(call.input_types[0].shape));
    return std::vector<TensorType>{TensorType{in, call.input_types[0].dtype}};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{conv_grad_input(call, in[0], in[1], {})}; };
  d.sharding = {"conv_grad_input", grad_input_propagate, input_shape_localize};
  register_op(std::move(d));

  // The same over bfloat16 pairs along K (made by use_bf16_dot), group 1, float32 out.
  OpDef p;
  p.name = "kiln.ConvGradInputBF16Pairs";
  p.doc = "kiln.ConvGradInput of dY [N, K/2, out...] and W [K/2, C, kernel...], both bfloat16 pairs along K (group 1): dX in float32";
  p.min_inputs = p.max_inputs = 2;
  p.attrs = window_grad_specs(true);
  p.pattern = Pattern::OutputFusable;
  p.infer = [](const OpCall& call) {
    const auto& in = call.attrs.get_ints("input_shape");
    const TensorType &dy = call.input_types[0], &w = call.input_types[1];
    if (dy.dtype != DataType::UInt(32) || w.dtype != DataType::UInt(32) || dy.shape[1] != w.shape[0] || in.size() < 2 || w.shape[1] != in[1])
      call.fail("dY " + dy.str() + " and W " + w.str() + " must be bfloat16 pairs (uint32) along K, [N, K/2, ...] and [K/2, C, ...], for input " + attr_to_string(in));
    if (in.size() != dy.shape.size()) call.fail("input_shape " + attr_to_string(in) + " and dY " + dy.str() + " differ in rank");
    grad_windows(call, spatial(in), spatial(dy.shape));
    return std::vector<TensorType>{TensorType{in, DataType::Float(32)}};
  };
  p.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{conv_grad_input(call, in[0], in[1], dot_bf16x2)};
  };
  p.sharding = replicated_rule();  // made after distribution, by use_bf16_dot
  register_op(std::move(p));
}

// kiln.ConvGradWeight(X [N, C, in...], dY [N, K, out...]) -> dW [K, C/group, kernel...].
void register_grad_weight() {
  OpDef d;
  d.name = "kiln.ConvGradWeight";
  d.doc = "the gradient of Conv's weights W from X and dY; attributes resolved by Conv's gradient";
  d.min_inputs = d.max_inputs = 2;
  d.attrs = window_grad_specs(false);
  d.attrs.push_back({"group", AttrKind::Int, int64_t(1)});
  d.pattern = Pattern::OutputFusable;
  auto shape_of = [](const OpCall& call) {
    const auto& x = call.input_types[0].shape;
    int64_t G = call.attrs.get_int("group");
    std::vector<int64_t> s{call.input_types[1].shape[1], x[1] / G};
    for (int64_t k : call.attrs.get_ints("kernel_shape")) s.push_back(k);
    return s;
  };
  d.infer = [shape_of](const OpCall& call) {
    grad_windows(call, spatial(call.input_types[0].shape), spatial(call.input_types[1].shape));
    return std::vector<TensorType>{TensorType{shape_of(call), call.input_types[0].dtype}};
  };
  d.compute = [shape_of](const OpCall& call, const std::vector<te::Tensor>& in) {
    te::Tensor X = in[0], dY = in[1];
    const auto& ys = call.input_types[1].shape;
    auto dims = grad_windows(call, spatial(call.input_types[0].shape), spatial(ys));
    std::vector<int64_t> ws = shape_of(call);
    int64_t Cg = ws[1], Kg = ws[0] / call.attrs.get_int("group");
    if (Kg == ws[0]) return std::vector<te::Tensor>{grad_weight_by_taps(X, dY, dims, ws)};
    WeightGradSum w = weight_grad_sum(X, ys, dims);
    return std::vector<te::Tensor>{te::compute(shape_exprs(ws), [&](const std::vector<Var>& i) {
      auto [h, inside] = forward_taps(w.unpadded, w.o, as_exprs(i, 2, i.size()));
      Expr n = w.axes[0].var(), k = i[0];
      Expr c = floordiv(k, index_imm(Kg)) * index_imm(Cg) + i[1];
      return guarded_sum(inside, dY(cat({n, k}, w.o)) * w.P(cat({n, c}, h)), w.axes);
    }, "conv_grad_weight")};
  };
  d.sharding = {"conv_grad_weight", grad_weight_propagate, nullptr};
  register_op(std::move(d));

  // The same over bfloat16 pairs along the batch (made by use_bf16_dot), group 1, float32 out.
  OpDef p;
  p.name = "kiln.ConvGradWeightBF16Pairs";
  p.doc = "kiln.ConvGradWeight of X [N/2, C, in...] and dY [N/2, K, out...], both bfloat16 pairs along the batch (group 1): dW in float32";
  p.min_inputs = p.max_inputs = 2;
  p.attrs = window_grad_specs(false);
  p.pattern = Pattern::OutputFusable;
  auto pair_shape = [](const OpCall& call) {
    std::vector<int64_t> s{call.input_types[1].shape[1], call.input_types[0].shape[1]};
    for (int64_t k : call.attrs.get_ints("kernel_shape")) s.push_back(k);
    return s;
  };
  p.infer = [pair_shape](const OpCall& call) {
    const TensorType &x = call.input_types[0], &dy = call.input_types[1];
    if (x.dtype != DataType::UInt(32) || dy.dtype != DataType::UInt(32) || x.shape[0] != dy.shape[0] || x.ndim() != dy.ndim())
      call.fail("X " + x.str() + " and dY " + dy.str() + " must be bfloat16 pairs (uint32) along the batch, [N/2, C, ...] and [N/2, K, ...]");
    grad_windows(call, spatial(x.shape), spatial(dy.shape));
    return std::vector<TensorType>{TensorType{pair_shape(call), DataType::Float(32)}};
  };
  p.compute = [pair_shape](const OpCall& call, const std::vector<te::Tensor>& in) {
    auto dims = grad_windows(call, spatial(call.input_types[0].shape), spatial(call.input_types[1].shape));
    return std::vector<te::Tensor>{grad_weight_by_taps(in[0], in[1], dims, pair_shape(call), dot_bf16x2)};
  };
  p.sharding = replicated_rule();  // made after distribution, by use_bf16_dot
  register_op(std::move(p));
}

const bool registered = [] {
  register_grad_input();
  register_grad_weight();
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
