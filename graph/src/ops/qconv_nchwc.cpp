// kiln.QConvNCHWcI8, the int8 blocked convolution that use_int8_conv makes
// (never imported; kiln/ops/qconv_nchwc.h):
//
//   kiln.QConvNCHWcI8(X, W4, offset, multiplier?; strides, pads, dilations, pad_byte, y_zero, y_dtype, y_lo, y_hi)
//     X [N, C/cb, H, W, cb] uint8/int8, W4 [K/kb, C/cb, KH, KW, cb/4, kb] int32
//     acc[n, k, ..] = sum_taps x' w + offset[k]    (x' the input moved to uint8,
//       the padding pad_byte; offset = bias - x_zero' sum w, folded at compile time)
//     y_dtype 6 (int32): acc; 2 (uint8) / 3 (int8): saturate(round(float32(acc) *
//       multiplier[k]) + y_zero) clamped to [y_lo, y_hi] (a ReLU or Clip before the
//       quantization: y_lo = y_zero for a ReLU); [N, K/kb, OH, OW, kb]
// offset and multiplier hold K/kb * kb values (the padded channels' zeros).
//
//   kiln.QDepthwiseNCHWcI8(X, Wd, offset, multiplier?; the same attributes)
//     X [N, C/b, H, W, b] uint8/int8, Wd [C/b, KH, KW, b] int32 or float32
//     (the weights minus their zero point; float32 sums are exact integers
//     below 2^24), a depthwise conv (group = channels), the padding pad_byte
//     (x_zero, in X's dtype), offset = bias - x_zero sum w; the same epilogue
//     as QConvNCHWcI8, [N, C/b, OH, OW, b] (kiln/ops/qdepthwise_nchwc.h).
#include "kiln/ops/qconv_nchwc.h"
#include "kiln/ops/qdepthwise_nchwc.h"

#include <cstdint>

#include "op_helpers.h"
#include "quantize_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

const DataType I32 = DataType::Int(32), F32 = DataType::Float(32);

ops::Conv2dParams qconv_params(const OpCall& c) {
  const auto& s = c.attrs.get_ints("strides");
  const auto& p = c.attrs.get_ints("pads");
  const auto& d = c.attrs.get_ints("dilations");
  if (s.size() != 2 || p.size() != 4 || d.size() != 2) c.fail("needs 2 strides, 4 pads and 2 dilations");
  ops::Conv2dParams q;
  q.stride_h = static_cast<int>(s[0]), q.stride_w = static_cast<int>(s[1]);
  q.pad_top = static_cast<int>(p[0]), q.pad_left = static_cast<int>(p[1]), q.pad_bottom = static_cast<int>(p[2]), q.pad_right = static_cast<int>(p[3]);
  q.dilation_h = static_cast<int>(d[0]), q.dilation_w = static_cast<int>(d[1]);
  return q;
}

DataType qconv_out(const OpCall& c) {
  int64_t code = c.attrs.get_int("y_dtype");
  if (code == 6) return I32;
  if (code != 2 && code != 3) c.fail("y_dtype " + std::to_string(code) + " is not 2 (uint8), 3 (int8) or 6 (int32)");
  if (!c.has_input(3)) c.fail("a uint8/int8 output needs the multiplier (input 3)");
  return code == 2 ? DataType::UInt(8) : DataType::Int(8);
}

Dim out_extent(const Dim& in, int64_t pad, int64_t kernel, int64_t dilation, int64_t stride) {
  return dim_add(dim_floordiv(dim_add(in, pad - dilation * (kernel - 1) - 1), stride), 1);
}

std::vector<TensorType> qconv_infer(const OpCall& c) {
  c.expect_rank(0, 5);
  c.expect_rank(1, 6);
  const TensorType &x = c.input_types[0], &w = c.input_types[1];
  if ((x.dtype != DataType::UInt(8) && x.dtype != DataType::Int(8)) || w.dtype != I32)
    c.fail("X " + x.str() + " must be uint8/int8 and W4 " + w.str() + " int32 byte quads");
  const auto& xs = x.shape;
  const auto& ws = w.shape;
  if (!(xs[1] == ws[1]) || !(xs[4] == Dim(ws[4].value() * 4))) c.fail("input " + x.str() + " and weights " + w.str() + " do not match");
  Dim K = dim_mul(ws[0], ws[5]);
  for (int i : {2, 3}) {
    if (!c.has_input(i)) continue;
    const TensorType& t = c.input_types[i];
    if (t.dtype != (i == 2 ? I32 : F32) || t.ndim() != 1 || !(t.shape[0] == K))
      c.fail(std::string(i == 2 ? "offset " : "multiplier ") + t.str() + " must be " + (i == 2 ? "int32" : "float32") + " [" + K.str() + "]");
  }
  ops::Conv2dParams p = qconv_params(c);
  Dim OH = out_extent(xs[2], p.pad_top + p.pad_bottom, ws[2].value(), p.dilation_h, p.stride_h);
  Dim OW = out_extent(xs[3], p.pad_left + p.pad_right, ws[3].value(), p.dilation_w, p.stride_w);
  if ((OH.is_static() && OH.value() <= 0) || (OW.is_static() && OW.value() <= 0)) c.fail("the kernel is larger than the padded input");
  return {TensorType{{xs[0], ws[0], OH, OW, ws[5]}, qconv_out(c)}};
}

// offset, then (for a byte output) requantization and the clamp, per channel k = block * kb + lane.
te::Tensor requantize(const OpCall& c, const te::Tensor& acc_in, const std::vector<te::Tensor>& in, int64_t kb) {
  te::Tensor offset = in[2], mult = c.has_input(3) ? in[3] : te::Tensor();
  DataType q = qconv_out(c);
  const QRange r = range_of(q);
  const int64_t lo = c.attrs.get_int("y_lo"), hi = c.attrs.get_int("y_hi");
  Expr y_zero = make_const(F32, static_cast<double>(c.attrs.get_int("y_zero")));
  return te::compute(acc_in.shape(), [&](const std::vector<Var>& i) {
    Expr k = i[1] * ops::index_imm(kb) + i[4];
    Expr acc = acc_in(std::vector<Expr>(i.begin(), i.end()));
    Expr a = (acc.dtype() == I32 ? acc : cast(I32, acc)) + offset(k);
    if (q == I32) return a;
    Expr y = saturate_to(q, cast(F32, a) * mult(k), y_zero);
    if (lo > r.lo) y = max(y, make_const(q, static_cast<double>(lo)));
    if (hi < r.hi) y = min(y, make_const(q, static_cast<double>(hi)));
    return y;
  }, "requantize_qconv");
}

te::Tensor qconv_compute(const OpCall& c, const std::vector<te::Tensor>& in) {
  te::Tensor acc = ops::qconv2d_nchwc(in[0], in[1], qconv_params(c), static_cast<int>(c.attrs.get_int("pad_byte")), "qconv");
  return requantize(c, acc, in, c.input_types[1].shape[5].value());
}

// The depthwise op's types: X [N, C/b, H, W, b] bytes, Wd [C/b, KH, KW, b] int32/float32, offset and multiplier [C/b * b].
std::vector<TensorType> qdepthwise_infer(const OpCall& c) {
  c.expect_rank(0, 5);
  c.expect_rank(1, 4);
  const TensorType &x = c.input_types[0], &w = c.input_types[1];
  if ((x.dtype != DataType::UInt(8) && x.dtype != DataType::Int(8)) || (w.dtype != I32 && w.dtype != F32))
    c.fail("X " + x.str() + " must be uint8/int8 and Wd " + w.str() + " int32 or float32");
  const auto& xs = x.shape;
  const auto& ws = w.shape;
  if (!w.is_static() || !(xs[1] == ws[0]) || !(xs[4] == ws[3])) c.fail("input " + x.str() + " and weights " + w.str() + " do not match");
  Dim C = dim_mul(ws[0], ws[3]);
  for (int i : {2, 3}) {
    if (!c.has_input(i)) continue;
    const TensorType& t = c.input_types[i];
    if (t.dtype != (i == 2 ? I32 : F32) || t.ndim() != 1 || !(t.shape[0] == C))
      c.fail(std::string(i == 2 ? "offset " : "multiplier ") + t.str() + " must be " + (i == 2 ? "int32" : "float32") + " [" + C.str() + "]");
  }
  ops::Conv2dParams p = qconv_params(c);
  Dim OH = out_extent(xs[2], p.pad_top + p.pad_bottom, ws[1].value(), p.dilation_h, p.stride_h);
  Dim OW = out_extent(xs[3], p.pad_left + p.pad_right, ws[2].value(), p.dilation_w, p.stride_w);
  if ((OH.is_static() && OH.value() <= 0) || (OW.is_static() && OW.value() <= 0)) c.fail("the kernel is larger than the padded input");
  return {TensorType{{xs[0], ws[0], OH, OW, ws[3]}, qconv_out(c)}};
}

te::Tensor qdepthwise_compute(const OpCall& c, const std::vector<te::Tensor>& in) {
  te::Tensor acc = ops::qdepthwise_conv2d_nchwc(in[0], in[1], qconv_params(c), static_cast<int>(c.attrs.get_int("pad_byte")), "qdwconv");
  return requantize(c, acc, in, c.input_types[1].shape[3].value());
}

const bool registered = [] {
  OpDef d;
  d.name = "kiln.QConvNCHWcI8";
  d.doc = "int8 conv2d of blocked bytes [N, C/cb, H, W, cb] by byte-quad weights [K/kb, C/cb, KH, KW, cb/4, kb], int32 accumulation, "
          "per-channel offset and optional requantization and clamp (ReLU, Clip; see qconv_nchwc.cpp)";
  d.min_inputs = 3;
  d.max_inputs = 4;
  d.attrs = {{"strides", AttrKind::Ints, std::vector<int64_t>{1, 1}},  {"pads", AttrKind::Ints, std::vector<int64_t>{0, 0, 0, 0}},
             {"dilations", AttrKind::Ints, std::vector<int64_t>{1, 1}}, {"pad_byte", AttrKind::Int, int64_t(0)},
             {"y_zero", AttrKind::Int, int64_t(0)},                        {"y_dtype", AttrKind::Int, int64_t(2)},
             {"y_lo", AttrKind::Int, int64_t(INT32_MIN)},                 {"y_hi", AttrKind::Int, int64_t(INT32_MAX)}};
  d.pattern = Pattern::OutputFusable;
  d.infer = qconv_infer;
  d.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{qconv_compute(c, in)}; };
  // Four byte products per word of the weights, for each output element.
  d.cost = [](const OpCall& c, const std::vector<TensorType>& out) {
    const auto& w = c.input_types[1].shape;
    const auto& y = out[0].shape;
    OpCost k;
    k.macs = 4.0 * static_cast<double>(out[0].numel()) * w[1] * w[2] * w[3] * w[4];
    k.flops = 2 * k.macs + 6.0 * static_cast<double>(out[0].numel());
    k.rows = static_cast<double>(y[0] * y[2] * y[3]);
    return k;
  };
  d.sharding = replicated_rule();
  register_op(d);

  OpDef dw = d;
  dw.name = "kiln.QDepthwiseNCHWcI8";
  dw.doc = "int8 depthwise conv2d of blocked bytes [N, C/b, H, W, b] by weights [C/b, KH, KW, b] (int32, or float32 exact integers), "
           "per-channel offset and optional requantization and clamp (ReLU, Clip; see qconv_nchwc.cpp)";
  dw.infer = qdepthwise_infer;
  dw.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{qdepthwise_compute(c, in)}; };
  // One widened product per tap and output element.
  dw.cost = [](const OpCall& c, const std::vector<TensorType>& out) {
    const auto& w = c.input_types[1].shape;
    const auto& y = out[0].shape;
    OpCost k;
    k.macs = static_cast<double>(out[0].numel()) * w[1] * w[2];
    k.flops = 2 * k.macs + 6.0 * static_cast<double>(out[0].numel());
    k.rows = static_cast<double>(y[0] * y[2] * y[3]);
    return k;
  };
  register_op(dw);
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
