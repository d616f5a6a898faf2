// The int8 depthwise convolution's compute (qdepthwise_nchwc.h).
#include "kiln/ops/qdepthwise_nchwc.h"

#include "kiln/arith/analyzer.h"
#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"
#include "kiln/support/error.h"

namespace kiln::ops {

namespace {

Expr E(int64_t v) { return index_imm(v); }

int64_t static_extent(const te::Tensor& t, size_t k) {
  const int64_t* c = k < t.shape().size() ? as_const_int(t.shape()[k]) : nullptr;
  KILN_USER_CHECK(c) << "qdepthwise_conv2d_nchwc: dimension " << k << " of '" << t.name() << "' " << extents_to_string(t.shape())
                     << " must be static (channels, taps); only the batch and spatial dims may be symbolic";
  return *c;
}

Expr plus(const Expr& e, int64_t v) {
  if (const int64_t* c = as_const_int(e)) return E(*c + v);
  return arith::simplify(e + E(v));
}

Expr out_extent(const Expr& padded, int64_t kernel, int dilation, int stride) {
  if (const int64_t* c = as_const_int(padded)) return E((*c - dilation * (kernel - 1) - 1) / stride + 1);
  return arith::simplify(floordiv(padded - E(dilation * (kernel - 1) + 1), E(stride)) + 1);
}

// X padded with pad_byte (the zero point: the padded taps' correction is then the same constant as the others').
te::Tensor pad_bytes(const te::Tensor& X, const Conv2dParams& p, int pad_byte, const std::string& name) {
  std::vector<Expr> shape = X.shape();
  Expr H = shape[2], W = shape[3];
  shape[2] = plus(H, p.pad_top + p.pad_bottom);
  shape[3] = plus(W, p.pad_left + p.pad_right);
  const bool padded = p.pad_top || p.pad_left || p.pad_bottom || p.pad_right;
  return te::compute(shape, [&](const std::vector<Var>& i) {
    Expr h = i[2] - p.pad_top, w = i[3] - p.pad_left;
    Expr v = X(std::vector<Expr>{i[0], i[1], h, w, i[4]});
    if (!padded) return v;
    return if_then_else(h >= 0 && h < H && w >= 0 && w < W, v, make_const(X.dtype(), static_cast<double>(pad_byte)));
  }, name, {"n", "c", "h", "w", "cb"});
}

}  // namespace

te::Tensor qdepthwise_conv2d_nchwc(const te::Tensor& X, const te::Tensor& Wd, const Conv2dParams& p, int pad_byte, const std::string& name) {
  const DataType t = X.dtype(), acc_t = Wd.dtype();
  KILN_USER_CHECK(X.ndim() == 5 && (t == DataType::UInt(8) || t == DataType::Int(8)))
      << "qdepthwise_conv2d_nchwc: '" << X.name() << "' must be uint8 or int8 [N, C/b, H, W, b], got " << t.str() << " " << extents_to_string(X.shape());
  KILN_USER_CHECK(Wd.ndim() == 4 && (acc_t == DataType::Int(32) || acc_t == DataType::Float(32)))
      << "qdepthwise_conv2d_nchwc: weights '" << Wd.name() << "' must be int32 or float32 [C/b, KH, KW, b], got " << acc_t.str() << " "
      << extents_to_string(Wd.shape());
  const int64_t lo = t.is_uint() ? 0 : -128, hi = t.is_uint() ? 255 : 127;
  KILN_USER_CHECK(pad_byte >= lo && pad_byte <= hi) << "qdepthwise_conv2d_nchwc: the padding value " << pad_byte << " is not a " << t.str();
  const int64_t blocks = static_extent(Wd, 0), KH = static_extent(Wd, 1), KW = static_extent(Wd, 2), b = static_extent(Wd, 3);
  KILN_USER_CHECK(static_extent(X, 1) == blocks && static_extent(X, 4) == b)
      << "qdepthwise_conv2d_nchwc: input " << extents_to_string(X.shape()) << " and weights " << extents_to_string(Wd.shape()) << " do not match";
  KILN_USER_CHECK(acc_t.is_int() || KH * KW * 255 * 128 < (int64_t{1} << 24))
      << "qdepthwise_conv2d_nchwc: " << KH << "x" << KW << " taps overflow float32's exact integers; use int32 weights";
  te::Tensor P = pad_bytes(X, p, pad_byte, name + ".pad");
  Expr OH = out_extent(P.shape()[2], KH, p.dilation_h, p.stride_h), OW = out_extent(P.shape()[3], KW, p.dilation_w, p.stride_w);
  const int64_t *oh = as_const_int(OH), *ow = as_const_int(OW);
  KILN_USER_CHECK((!oh || *oh > 0) && (!ow || *ow > 0)) << "qdepthwise_conv2d_nchwc: the kernel is larger than the padded input";
  IterVar ry = te::reduce_axis(Range(0, E(KH)), "ry"), rx = te::reduce_axis(Range(0, E(KW)), "rx");
  return te::compute({X.shape()[0], E(blocks), OH, OW, E(b)},
                     [&](const std::vector<Var>& i) {
                       Expr in = P(std::vector<Expr>{i[0], i[1], i[2] * p.stride_h + ry.var() * p.dilation_h, i[3] * p.stride_w + rx.var() * p.dilation_w, i[4]});
                       // A byte widens straight to float32 where the weights are float (uitofp/sitofp of i8).
                       return te::sum(cast(acc_t, in) * Wd(std::vector<Expr>{i[1], ry.var(), rx.var(), i[4]}), {ry, rx});
                     },
                     name, {"n", "co", "y", "x", "ci"});
}

}  // namespace kiln::ops
