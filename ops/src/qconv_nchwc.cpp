// The int8 blocked convolution's compute (qconv_nchwc.h).
#include "kiln/ops/qconv_nchwc.h"

#include "kiln/arith/analyzer.h"
#include "kiln/ops/broadcast.h"
#include "kiln/ir/op.h"
#include "kiln/support/error.h"

namespace kiln::ops {

namespace {

Expr E(int64_t v) { return index_imm(v); }

Expr plus(const Expr& e, int64_t v) {
  if (const int64_t* c = as_const_int(e)) return E(*c + v);
  return arith::simplify(e + E(v));
}

int64_t static_extent(const te::Tensor& t, size_t k, const char* what) {
  const int64_t* c = k < t.shape().size() ? as_const_int(t.shape()[k]) : nullptr;
  KILN_USER_CHECK(c) << what << ": dimension " << k << " of '" << t.name() << "' " << extents_to_string(t.shape())
                     << " must be static (channels); only the batch and spatial dims may be symbolic";
  return *c;
}

Expr out_extent(const Expr& padded, int64_t kernel, int dilation, int stride) {
  if (const int64_t* c = as_const_int(padded)) return E((*c - dilation * (kernel - 1) - 1) / stride + 1);
  return arith::simplify(floordiv(padded - E(dilation * (kernel - 1) + 1), E(stride)) + 1);
}

}  // namespace

te::Tensor pad_quads_nchwc(const te::Tensor& X, const Conv2dParams& p, int pad_byte, const std::string& name) {
  DataType t = X.dtype();
  KILN_USER_CHECK(X.ndim() == 5 && (t == DataType::UInt(8) || t == DataType::Int(8)))
      << "pad_quads_nchwc: '" << X.name() << "' must be uint8 or int8 [N, C/cb, H, W, cb], got " << t.str() << " " << extents_to_string(X.shape());
  const int64_t cb = static_extent(X, 4, "pad_quads_nchwc");
  KILN_USER_CHECK(cb % 4 == 0) << "pad_quads_nchwc: the channel block " << cb << " of '" << X.name() << "' is not a multiple of 4 (byte quads)";
  KILN_USER_CHECK(pad_byte >= 0 && pad_byte <= 255) << "pad_quads_nchwc: the padding byte " << pad_byte << " is not in [0, 255]";
  const DataType u32 = DataType::UInt(32), i32 = DataType::Int(32);
  std::vector<Expr> shape = X.shape();
  Expr H = shape[2], W = shape[3];
  shape[2] = plus(H, p.pad_top + p.pad_bottom);
  shape[3] = plus(W, p.pad_left + p.pad_right);
  shape[4] = E(cb / 4);
  const bool padded = p.pad_top || p.pad_left || p.pad_bottom || p.pad_right;
  const uint32_t pad_word = 0x01010101u * static_cast<uint32_t>(pad_byte);
  return te::compute(shape, [&](const std::vector<Var>& i) {
    Expr h = i[2] - p.pad_top, w = i[3] - p.pad_left;
    Expr word;
    for (int j = 0; j < 4; ++j) {
      Expr v = X(std::vector<Expr>{i[0], i[1], h, w, i[4] * E(4) + E(j)});
      // int8 moves to uint8 by +128 (the byte's top bit flips).
      Expr byte = t.is_uint() ? cast(u32, v) : cast(u32, cast(DataType::UInt(8), cast(i32, v) + make_const(i32, 128)));
      if (j) byte = byte * make_const(u32, double(uint32_t{1} << (8 * j)));
      word = j ? word + byte : byte;
    }
    if (!padded) return word;
    Expr inside = h >= 0 && h < H && w >= 0 && w < W;
    return if_then_else(inside, word, make_const(u32, static_cast<double>(pad_word)));
  }, name, {"n", "c", "h", "w", "q"});
}

te::Tensor qconv2d_nchwc(const te::Tensor& X, const te::Tensor& W4, const Conv2dParams& p, int pad_byte, const std::string& name) {
  KILN_USER_CHECK(W4.ndim() == 6 && W4.dtype() == DataType::Int(32))
      << "qconv2d_nchwc: weights '" << W4.name() << "' must be int32 byte quads [K/kb, C/cb, KH, KW, cb/4, kb], got " << W4.dtype().str() << " "
      << extents_to_string(W4.shape());
  std::vector<int64_t> ws;
  for (size_t k = 0; k < 6; ++k) ws.push_back(static_extent(W4, k, "qconv2d_nchwc"));
  te::Tensor P = pad_quads_nchwc(X, p, pad_byte, name + ".quads");
  KILN_USER_CHECK(static_extent(X, 1, "qconv2d_nchwc") == ws[1] && static_extent(P, 4, "qconv2d_nchwc") == ws[4])
      << "qconv2d_nchwc: input " << extents_to_string(X.shape()) << " and weights " << extents_to_string(W4.shape()) << " do not match";
  Expr OH = out_extent(P.shape()[2], ws[2], p.dilation_h, p.stride_h), OW = out_extent(P.shape()[3], ws[3], p.dilation_w, p.stride_w);
  const int64_t *oh = as_const_int(OH), *ow = as_const_int(OW);
  KILN_USER_CHECK((!oh || *oh > 0) && (!ow || *ow > 0)) << "qconv2d_nchwc: the kernel is larger than the padded input";
  IterVar rco = te::reduce_axis(Range(0, E(ws[1])), "rco"), ry = te::reduce_axis(Range(0, E(ws[2])), "ry"),
          rx = te::reduce_axis(Range(0, E(ws[3])), "rx"), rci = te::reduce_axis(Range(0, E(ws[4])), "rci");
  return te::compute({X.shape()[0], E(ws[0]), OH, OW, E(ws[5])},
                     [&](const std::vector<Var>& i) {
                       Expr in = P(std::vector<Expr>{i[0], rco.var(), i[2] * p.stride_h + ry.var() * p.dilation_h,
                                                     i[3] * p.stride_w + rx.var() * p.dilation_w, rci.var()});
                       Expr w = W4(std::vector<Expr>{i[1], rco.var(), ry.var(), rx.var(), rci.var(), i[4]});
                       return te::sum(dot_i8x4(in, w), {rco, ry, rx, rci});
                     },
                     name, {"n", "fo", "y", "x", "fi"});
}

}  // namespace kiln::ops
