// use_int8_conv (passes.h): 2-D convolutions between quantized tensors run
// on kiln.QConvNCHWcI8 (graph/src/ops/qconv_nchwc.cpp), vpdpbusd over byte
// quads of the blocked layout, int32 accumulation, and the bias, zero-point
// correction, requantization and ReLU/Clip (a clamp of the codes) in the
// kernel's epilogue:
//   QuantizeLinear([Relu|Clip](Conv(DequantizeLinear(x), DequantizeLinear(W)[, bias])))
//     (as kiln.quantize and ONNX Runtime's quantizer emit them; bias a
//     DequantizeLinear of int32 or a float32 constant)
//   QLinearConv(x, ..., W, ...), ConvInteger(x, W, ...)
// with constant weights, scales and zero points (x and y per tensor, W per
// tensor or per output channel), group 1. Each becomes
//   LayoutTransform(NCHW -> cb) -> QConvNCHWcI8 -> LayoutTransform(kb -> NCHW)
// in uint8/int8, and alter_conv_layout collapses the transforms between two
// such convs: consecutive int8 convs pass blocked bytes, no dequantize and
// quantize between them. A MaxPool between two quantized convs pools the
// bytes (rewrite_pooled).
//
// The weights are packed here, once: w' = w - w_zero[k] (which must fit a
// signed byte: vpdpbusd multiplies unsigned activations by signed weights;
// otherwise the conv is left as it is), four input channels to an int32
// word, [K/kb, C/cb, KH, KW, cb/4, kb]. int8 activations move to uint8 by
// +128 and their zero point with them; the padding reads that zero point, so
//   sum (x - x_zero) w' = sum x w' - x_zero * sum w'
// over every tap, and offset[k] = bias[k] - x_zero * (sum of w'[k] over
// channels and taps) is one per-channel constant. Targets without VNNI keep
// the dense convs as they are (use_int8_dot measured the widening code
// slower than the plain integer matmul; for convs it was not tried).
//
// Depthwise convs (group = C = K, MobileNetV2's 3x3s) go to
// kiln.QDepthwiseNCHWcI8 on every x86 target: no channel sums to share a
// dot instruction, each byte widens to its channel's lane; in the block of
// the 1x1 convs around them, so a MobileNetV2 block passes bytes through.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"
#include "kiln/ops/layout.h"
#include "layout_helpers.h"
#include "match_helpers.h"

namespace kiln::graph {

namespace {

using match_detail::producer;
using match_detail::constant_of;

// The values of a constant array as doubles; nullopt for anything else.
std::optional<std::vector<double>> values_of(const Value& v) {
  const NDArray* a = constant_of(v);
  if (!a) return std::nullopt;
  std::vector<double> out;
  DataType t = a->dtype();
  for (int64_t k = 0; k < a->numel(); ++k) {
    if (t == DataType::Float(32)) out.push_back(a->data_as<float>()[k]);
    else if (t == DataType::UInt(8)) out.push_back(a->data_as<uint8_t>()[k]);
    else if (t == DataType::Int(8)) out.push_back(a->data_as<int8_t>()[k]);
    else if (t == DataType::Int(32)) out.push_back(a->data_as<int32_t>()[k]);
    else if (t == DataType::Int(64)) out.push_back(static_cast<double>(a->data_as<int64_t>()[k]));
    else return std::nullopt;
  }
  return out;
}

// Input i of n: a constant of 1 value (or `per_k` values where per_k > 0); absent gives `fallback`.
bool param(const OpNode& n, size_t i, int64_t per_k, std::vector<double> fallback, std::vector<double>* out) {
  if (i >= n.inputs.size() || !n.inputs[i].defined()) {
    if (fallback.empty()) return false;
    *out = std::move(fallback);
    return true;
  }
  auto v = values_of(n.inputs[i]);
  if (!v || v->empty() || (v->size() != 1 && static_cast<int64_t>(v->size()) != per_k)) return false;
  *out = std::move(*v);
  return true;
}

double at(const std::vector<double>& v, int64_t k) { return v.size() == 1 ? v[0] : v[k]; }

bool is_byte(DataType t) { return t == DataType::Int(8) || t == DataType::UInt(8); }

struct Requant {
  std::vector<double> multiplier;  // per output channel
  int64_t y_zero = 0;
  DataType y;
  int64_t lo = INT32_MIN, hi = INT32_MAX;  // the activation's clamp, in output codes
};

// What the kernel needs of one conv: its quantized input, weights and geometry.
struct QConv {
  std::string name;
  Value x;               // uint8/int8 NCHW
  double x_zero = 0;
  const NDArray* w;      // int8/uint8 [K, C, KH, KW] ([C, 1, KH, KW] depthwise)
  std::vector<double> w_zero;
  bool depthwise = false;  // group = C = K
  std::vector<int64_t> bias;  // int32 per output channel (empty: none)
  ops::Conv2dParams p;
};

// Whether a conv of x by w is depthwise (group = C = K, one input channel per filter); false for group 1.
bool depthwise_of(const OpNode& conv, const TensorType& x, const TensorType& w) {
  const int64_t group = conv.attrs.get_int_or("group", 1);
  return group > 1 && x.ndim() == 4 && w.ndim() == 4 && w.is_static() && x.shape[1].is_static() && x.shape[1].value() == group &&
         w.shape[0].value() == group && w.shape[1].value() == 1;
}

// The conv's window geometry (group 1 or depthwise, 2-D); nullopt where it is not one the kernels take.
std::optional<ops::Conv2dParams> conv_params(const OpNode& conv, const TensorType& x, const TensorType& w, const TensorType& y) {
  if (x.ndim() != 4 || w.ndim() != 4 || !w.is_static() || !x.shape[1].is_static()) return std::nullopt;
  if (conv.attrs.get_int_or("group", 1) != 1 && !depthwise_of(conv, x, w)) return std::nullopt;
  auto st = layout_detail::ints_or(conv.attrs, "strides", {1, 1}), dl = layout_detail::ints_or(conv.attrs, "dilations", {1, 1});
  auto pd = layout_detail::ints_or(conv.attrs, "pads", {0, 0, 0, 0});
  if (st.size() != 2 || dl.size() != 2 || pd.size() != 4) return std::nullopt;
  std::string autopad = conv.attrs.has("auto_pad") ? conv.attrs.get_string("auto_pad") : "NOTSET";
  if (autopad == "VALID") pd = {0, 0, 0, 0};
  if (autopad == "SAME_UPPER" || autopad == "SAME_LOWER") {
    if (!x.shape.is_static() || !y.shape.is_static()) return std::nullopt;
    for (int a = 0; a < 2; ++a) {
      int64_t total = std::max<int64_t>((y.shape[2 + a].value() - 1) * st[a] + (w.shape[2 + a].value() - 1) * dl[a] + 1 - x.shape[2 + a].value(), 0);
      int64_t small = total / 2, big = total - small;
      pd[a] = autopad == "SAME_UPPER" ? small : big;
      pd[a + 2] = autopad == "SAME_UPPER" ? big : small;
    }
  }
  return ops::Conv2dParams{int(st[0]), int(st[1]), int(pd[0]), int(pd[1]), int(pd[2]), int(pd[3]), int(dl[0]), int(dl[1])};
}

// Channels per block: two vectors of int32 where they divide C, else one (the last padded); small C in whole quads.
int64_t block_for(int64_t C, int64_t lanes) {
  if (C % (2 * lanes) == 0) return 2 * lanes;
  if (C < lanes) return (C + 3) / 4 * 4;
  return lanes;
}

Value constant_vec(const std::string& name, DataType t, const std::vector<double>& v) {
  NDArray a = NDArray::empty({static_cast<int64_t>(v.size())}, t);
  for (size_t k = 0; k < v.size(); ++k) {
    if (t == DataType::Float(32)) a.data_as<float>()[k] = static_cast<float>(v[k]);
    else a.data_as<int32_t>()[k] = static_cast<int32_t>(v[k]);
  }
  return make_constant(name, a)->output();
}

Value relayout(const Value& v, int64_t from, int64_t to, int64_t C, const std::string& name) {
  Attrs a;
  a.set("src_block", from);
  a.set("dst_block", to);
  if ((from > 0 && C % from != 0) || (to > 0 && C % to != 0)) a.set("channels", C);
  return make_op("kiln.LayoutTransform", {v}, a, name)->output();
}

Attrs qconv_attrs(const QConv& q, const std::optional<Requant>& rq, int64_t pad_byte) {
  Attrs a;
  a.set("strides", std::vector<int64_t>{q.p.stride_h, q.p.stride_w});
  a.set("pads", std::vector<int64_t>{q.p.pad_top, q.p.pad_left, q.p.pad_bottom, q.p.pad_right});
  a.set("dilations", std::vector<int64_t>{q.p.dilation_h, q.p.dilation_w});
  a.set("pad_byte", pad_byte);
  a.set("y_zero", rq ? rq->y_zero : int64_t(0));
  a.set("y_dtype", int64_t(!rq ? 6 : rq->y.is_uint() ? 2 : 3));
  a.set("y_lo", rq ? rq->lo : int64_t(INT32_MIN));
  a.set("y_hi", rq ? rq->hi : int64_t(INT32_MAX));
  return a;
}

int64_t weight_at(const NDArray& w, int64_t i) { return w.dtype().is_uint() ? int64_t(w.data_as<uint8_t>()[i]) : int64_t(w.data_as<int8_t>()[i]); }

// The depthwise conv (kiln.QDepthwiseNCHWcI8): weights w - w_zero [C/b, KH, KW, b], float32 where every
// sum of products is an integer float32 holds exactly (vcvtdq2ps + FMA), else int32 (vpmulld); the
// input stays in its dtype, padded with its zero point. The block is block_for's, as the 1x1 convs'
// around it, so that alter_conv_layout joins them without a transform.
Value int8_depthwise(const QConv& q, const std::optional<Requant>& rq, int64_t lanes) {
  const auto& ws = q.w->shape();
  const int64_t C = ws[0], taps = ws[2] * ws[3], b = block_for(C, lanes), Cp = (C + b - 1) / b * b;
  const int64_t x_zero = static_cast<int64_t>(q.x_zero);
  int64_t biggest = 0;
  for (int64_t i = 0; i < C * taps; ++i) biggest = std::max<int64_t>(biggest, std::llabs(weight_at(*q.w, i) - static_cast<int64_t>(at(q.w_zero, i / taps))));
  const bool exact_f32 = taps * 255 * biggest < (int64_t{1} << 24);
  NDArray packed = NDArray::empty({Cp / b, ws[2], ws[3], b}, exact_f32 ? DataType::Float(32) : DataType::Int(32));
  std::vector<double> offset(Cp, 0.0), mult(Cp, 0.0);
  std::memset(packed.data(), 0, static_cast<size_t>(packed.nbytes()));  // the padded channels' taps (0 and 0.0f alike)
  for (int64_t c = 0; c < C; ++c) {
    int64_t sum = 0;
    for (int64_t r = 0; r < taps; ++r) {
      int64_t w = weight_at(*q.w, c * taps + r) - static_cast<int64_t>(at(q.w_zero, c));
      sum += w;
      int64_t k = ((c / b) * taps + r) * b + c % b;
      if (exact_f32) packed.data_as<float>()[k] = static_cast<float>(w);
      else packed.data_as<int32_t>()[k] = static_cast<int32_t>(w);
    }
    offset[c] = static_cast<double>((q.bias.empty() ? 0 : q.bias[c]) - x_zero * sum);
    if (rq) mult[c] = at(rq->multiplier, c);
  }
  std::vector<Value> in = {relayout(q.x, 0, b, C, q.name + ".x_blocked"), make_constant(q.name + ".w_taps", packed)->output(),
                           constant_vec(q.name + ".offset", DataType::Int(32), offset)};
  if (rq) in.push_back(constant_vec(q.name + ".multiplier", DataType::Float(32), mult));
  Value y = make_op("kiln.QDepthwiseNCHWcI8", in, qconv_attrs(q, rq, x_zero), q.name)->output();
  return relayout(y, b, 0, C, q.name + ".layout");
}

// The packed conv and its epilogue; undefined where a weight minus its zero point does not fit a signed byte.
Value int8_conv(const QConv& q, const std::optional<Requant>& rq, int64_t lanes) {
  if (q.depthwise) return int8_depthwise(q, rq, lanes);
  const auto& ws = q.w->shape();
  const int64_t K = ws[0], C = ws[1], KH = ws[2], KW = ws[3], taps = KH * KW;
  const int64_t cb = block_for(C, lanes), kb = block_for(K, lanes);
  const int64_t Cp = (C + cb - 1) / cb * cb, Kp = (K + kb - 1) / kb * kb;
  const bool x_signed = q.x.type().dtype.is_int();
  const int64_t x_zero = static_cast<int64_t>(q.x_zero) + (x_signed ? 128 : 0);
  NDArray packed = NDArray::empty({Kp / kb, Cp / cb, KH, KW, cb / 4, kb}, DataType::Int(32));
  int32_t* out = packed.data_as<int32_t>();
  std::fill(out, out + packed.numel(), 0);
  std::vector<double> offset(Kp, 0.0), mult(Kp, 0.0);
  for (int64_t k = 0; k < K; ++k) {
    int64_t sum = 0;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = 0; r < taps; ++r) {
        int64_t i = (k * C + c) * taps + r;
        int64_t w = (q.w->dtype().is_uint() ? int64_t(q.w->data_as<uint8_t>()[i]) : int64_t(q.w->data_as<int8_t>()[i])) - static_cast<int64_t>(at(q.w_zero, k));
        if (w < -128 || w > 127) return Value();
        sum += w;
        int64_t word = ((((k / kb) * (Cp / cb) + c / cb) * taps + r) * (cb / 4) + (c % cb) / 4) * kb + k % kb;
        uint32_t bits = static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(w))) << (8 * (c % 4));
        out[word] = static_cast<int32_t>(static_cast<uint32_t>(out[word]) | bits);
      }
    offset[k] = static_cast<double>((q.bias.empty() ? 0 : q.bias[k]) - x_zero * sum);
    if (rq) mult[k] = at(rq->multiplier, k);
  }
  Attrs a = qconv_attrs(q, rq, x_zero);
  std::vector<Value> in = {relayout(q.x, 0, cb, C, q.name + ".x_blocked"), make_constant(q.name + ".w_quads", packed)->output(),
                           constant_vec(q.name + ".offset", DataType::Int(32), offset)};
  if (rq) in.push_back(constant_vec(q.name + ".multiplier", DataType::Float(32), mult));
  Value y = make_op("kiln.QConvNCHWcI8", in, a, q.name)->output();
  return relayout(y, kb, 0, K, q.name + ".layout");
}

// multiplier[k] = x_scale * w_scale[k] / y_scale in float32, as QLinearConv computes it.
std::vector<double> multipliers(double xs, const std::vector<double>& ws, double ys, int64_t K) {
  std::vector<double> m;
  for (int64_t k = 0; k < K; ++k) m.push_back(static_cast<double>(static_cast<float>(static_cast<float>(xs) * static_cast<float>(at(ws, k))) / static_cast<float>(ys)));
  return m;
}

// x, w and the geometry of QLinearConv / ConvInteger (input positions xi, wi; zero points xz, wz).
std::optional<QConv> onnx_qconv(const OpNode& n, size_t xi, size_t wi, size_t xz, size_t wz, bool dense) {
  QConv q;
  q.name = n.name;
  q.x = n.inputs[xi];
  q.w = constant_of(n.inputs[wi]);
  if (!q.w || !is_byte(q.x.type().dtype) || !is_byte(q.w->dtype())) return std::nullopt;
  auto p = conv_params(n, q.x.type(), n.inputs[wi].type(), n.types[0]);
  if (!p) return std::nullopt;
  q.p = *p;
  q.depthwise = depthwise_of(n, q.x.type(), n.inputs[wi].type());
  if (!dense && !q.depthwise) return std::nullopt;
  std::vector<double> zx;
  if (!param(n, xz, 0, {0.0}, &zx) || !param(n, wz, q.w->shape()[0], {0.0}, &q.w_zero)) return std::nullopt;
  q.x_zero = zx[0];
  return q;
}

std::vector<Value> rewrite_conv_integer(const OpNode& n, int64_t lanes, bool dense) {
  auto q = onnx_qconv(n, 0, 1, 2, 3, dense);
  if (!q) return {};
  Value y = int8_conv(*q, std::nullopt, lanes);
  return y.defined() ? std::vector<Value>{y} : std::vector<Value>{};
}

std::vector<Value> rewrite_qlinear_conv(const OpNode& n, int64_t lanes, bool dense) {
  auto q = onnx_qconv(n, 0, 3, 2, 5, dense);
  if (!q) return {};
  const int64_t K = q->w->shape()[0];
  std::vector<double> xs, ws, ys, yz, b;
  if (!param(n, 1, 0, {}, &xs) || !param(n, 4, K, {}, &ws) || !param(n, 6, 0, {}, &ys) || !param(n, 7, 0, {}, &yz)) return {};
  if (n.inputs.size() > 8 && n.inputs[8].defined()) {
    if (!param(n, 8, K, {}, &b) || static_cast<int64_t>(b.size()) != K) return {};
    for (double v : b) q->bias.push_back(static_cast<int64_t>(v));
  }
  Value y = int8_conv(*q, Requant{multipliers(xs[0], ws, ys[0], K), static_cast<int64_t>(yz[0]), n.types[0].dtype}, lanes);
  return y.defined() ? std::vector<Value>{y} : std::vector<Value>{};
}

struct Dequantized {
  Value x;
  std::vector<double> scale, zero;
};

// A DequantizeLinear's input and constant parameters; per channel only along `axis`.
std::optional<Dequantized> dequantized(const Value& v, int64_t per_k, int64_t axis) {
  const OpNode* dq = producer(v, "DequantizeLinear");
  if (!dq) return std::nullopt;
  Dequantized d{dq->inputs[0], {}, {}};
  if (!param(*dq, 1, per_k, {}, &d.scale) || !param(*dq, 2, per_k, {0.0}, &d.zero)) return std::nullopt;
  if ((d.scale.size() > 1 || d.zero.size() > 1) && dq->attrs.get_int_or("axis", 1) != axis) return std::nullopt;
  return d;
}

// The code QuantizeLinear gives v: saturate(round_half_even(float32(v) / scale) + zero).
int64_t quantized(double v, double scale, const Requant& rq) {
  double c = std::nearbyint(static_cast<double>(static_cast<float>(v) / static_cast<float>(scale))) + static_cast<double>(rq.y_zero);
  double lo = rq.y.is_uint() ? 0 : -128, hi = rq.y.is_uint() ? 255 : 127;
  return static_cast<int64_t>(std::min(std::max(c, lo), hi));
}

// A Relu or Clip between the conv and its QuantizeLinear as a clamp of the codes:
// Q(clip(v, a, b)) = clamp(Q(v), Q(a), Q(b)) since Q does not decrease. False where Clip's bounds are not constants.
bool activation_clamp(const OpNode& act, double scale, Requant* rq) {
  if (act.op->name == "Relu") {
    rq->lo = quantized(0.0, scale, *rq);
    return true;
  }
  for (size_t i : {size_t(1), size_t(2)}) {
    std::vector<double> v;
    if (i < act.inputs.size() && act.inputs[i].defined()) {
      if (!param(act, i, 0, {}, &v)) return false;
    } else if (act.attrs.has(i == 1 ? "min" : "max")) {  // opset 6
      v = {act.attrs.get_float(i == 1 ? "min" : "max")};
    } else {
      continue;
    }
    (i == 1 ? rq->lo : rq->hi) = quantized(v[0], scale, *rq);
  }
  return true;
}

std::vector<Value> rewrite_qdq(const OpNode& qn, int64_t lanes, bool dense) {
  std::vector<double> ys, yz;
  DataType y = qn.types[0].dtype;
  if (!is_byte(y) || !param(qn, 1, 0, {}, &ys) || !param(qn, 2, 0, {0.0}, &yz)) return {};
  const OpNode* act = producer(qn.inputs[0], "Relu");
  if (!act) act = producer(qn.inputs[0], "Clip");
  const OpNode* conv = producer(act ? act->inputs[0] : qn.inputs[0], "Conv");
  if (!conv || conv->inputs.size() < 2) return {};
  auto x = dequantized(conv->inputs[0], 0, 1);
  const TensorType& wt = conv->inputs[1].type();
  if (!x || wt.ndim() != 4 || !wt.shape[0].is_static()) return {};
  const int64_t K = wt.shape[0].value();
  auto w = dequantized(conv->inputs[1], K, 0);
  if (!w || !is_byte(x->x.type().dtype) || !constant_of(w->x)) return {};
  QConv q;
  q.name = qn.name;
  q.x = x->x;
  q.x_zero = x->zero[0];
  q.w = constant_of(w->x);
  q.w_zero = w->zero;
  if (!is_byte(q.w->dtype())) return {};
  auto p = conv_params(*conv, x->x.type(), wt, conv->types[0]);
  if (!p) return {};
  q.p = *p;
  q.depthwise = depthwise_of(*conv, x->x.type(), wt);
  if (!dense && !q.depthwise) return {};
  if (conv->inputs.size() > 2 && conv->inputs[2].defined()) {
    // The bias in units of x_scale * w_scale[k]: exact for kiln.quantize's int32 bias at that scale.
    std::vector<double> b;
    if (auto db = dequantized(conv->inputs[2], K, 0)) {
      auto raw = values_of(db->x);
      if (!raw || static_cast<int64_t>(raw->size()) != K) return {};
      for (int64_t k = 0; k < K; ++k) b.push_back(static_cast<float>(static_cast<float>((*raw)[k] - at(db->zero, k)) * static_cast<float>(at(db->scale, k))));
    } else if (!param(*conv, 2, K, {}, &b)) {
      return {};
    }
    if (static_cast<int64_t>(b.size()) != K) return {};
    for (int64_t k = 0; k < K; ++k) {
      double unit = static_cast<float>(static_cast<float>(x->scale[0]) * static_cast<float>(at(w->scale, k)));
      double v = std::nearbyint(b[k] / unit);
      if (!(std::fabs(v) < 2147483647.0)) return {};
      q.bias.push_back(static_cast<int64_t>(v));
    }
  }
  Requant rq{multipliers(x->scale[0], w->scale, ys[0], K), static_cast<int64_t>(yz[0]), y};
  if (act && !activation_clamp(*act, ys[0], &rq)) return {};
  Value out = int8_conv(q, rq, lanes);
  return out.defined() ? std::vector<Value>{out} : std::vector<Value>{};
}

// Q(MaxPool(DQ(x))) as Q(DQ(MaxPool(x))): a max commutes with the increasing
// DQ (a positive scale), and the pool then runs on the bytes, in the blocked
// layout of the int8 conv before it (alter_conv_layout), where the float pool
// ran in NCHW between the transforms (ResNet's stem: 4 ms of 15 at 2 threads).
std::vector<Value> rewrite_pooled(const OpNode& qn) {
  const OpNode* pool = producer(qn.inputs[0], "MaxPool");
  const OpNode* dq = pool ? producer(pool->inputs[0], "DequantizeLinear") : nullptr;
  std::vector<double> scale;
  if (!dq || !is_byte(dq->inputs[0].type().dtype) || !param(*dq, 1, 0, {}, &scale) || scale.size() != 1 || !(scale[0] > 0)) return {};
  Value pooled = make_op(pool->op, {dq->inputs[0]}, pool->attrs, pool->name)->output();
  std::vector<Value> dq_in = dq->inputs, q_in = qn.inputs;
  dq_in[0] = pooled;
  q_in[0] = make_op(dq->op, dq_in, dq->attrs, dq->name + ".pooled")->output();
  return {make_op(qn.op, q_in, qn.attrs, qn.name)->output()};
}

}  // namespace

Graph use_int8_conv(const Graph& g, const Target& target) {
  bool arm = target.triple.rfind("aarch64", 0) == 0 || target.triple.rfind("arm64", 0) == 0;
  if (arm) return g;
  // Dense convs need the dot instruction; a depthwise conv widens bytes to
  // 32-bit lanes (no channel sums), which every x86 vector unit does.
  const bool dense = target.has_feature("avx512vnni") || target.has_feature("avxvnni");
  const int64_t lanes = target.natural_lanes(DataType::Int(32));
  return rewrite_graph(g, [lanes, dense](const Ref<OpNode>& n) -> std::vector<Value> {
    if (n->num_outputs() != 1) return {};
    const std::string& op = n->op->name;
    if (op == "QuantizeLinear") {
      if (dense)
        if (auto out = rewrite_pooled(*n); !out.empty()) return out;
      return rewrite_qdq(*n, lanes, dense);
    }
    if (op == "QLinearConv") return rewrite_qlinear_conv(*n, lanes, dense);
    if (op == "ConvInteger") return rewrite_conv_integer(*n, lanes, dense);
    return {};
  });
}

}  // namespace kiln::graph
