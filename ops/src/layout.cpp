#include "kiln/ops/layout.h"

#include <algorithm>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"
#include "kiln/runtime/ndarray.h"
#include "kiln/support/error.h"

namespace kiln::ops {

namespace {

Expr E(int64_t v) { return index_imm(v); }

// The output extent of a kernel over a padded extent (floor rounding); symbolic when the extent is.
Expr out_extent(const Expr& padded, int64_t kernel, int dilation, int stride) {
  if (const int64_t* c = as_const_int(padded)) return E((*c - dilation * (kernel - 1) - 1) / stride + 1);
  return arith::simplify(floordiv(padded - E(dilation * (kernel - 1) + 1), E(stride)) + 1);
}

// Dimension k of X, which must be static (a channel count or block): batch and spatial dims may be symbolic, channels not.
int64_t static_dim(const te::Tensor& X, size_t k, const char* what) {
  const int64_t* c = k < X.shape().size() ? as_const_int(X.shape()[k]) : nullptr;
  KILN_USER_CHECK(c) << what << ": dimension " << k << " of '" << X.name() << "' " << extents_to_string(X.shape())
                     << " must be static (channels); only the batch and spatial dims may be symbolic";
  return *c;
}

// A blocked conv's zero-padded input and the output extents of a KH x KW
// kernel sliding over it; fails when the kernel does not fit (a static size).
struct PaddedInput {
  te::Tensor P;
  Expr OH, OW;
};
PaddedInput pad_for_kernel(const te::Tensor& X, const Conv2dParams& p, int64_t KH, int64_t KW, const std::string& name, const char* what) {
  te::Tensor P = pad_hw(X, p.pad_top, p.pad_left, p.pad_bottom, p.pad_right, name + ".pad");
  Expr OH = out_extent(P.shape()[2], KH, p.dilation_h, p.stride_h), OW = out_extent(P.shape()[3], KW, p.dilation_w, p.stride_w);
  const int64_t *oh = as_const_int(OH), *ow = as_const_int(OW);
  KILN_USER_CHECK((!oh || *oh > 0) && (!ow || *ow > 0)) << what << ": the kernel is larger than the padded input";
  return {P, OH, OW};
}

// An extent plus a static amount (a constant when the extent is).
Expr plus(const Expr& e, int64_t v) {
  if (const int64_t* c = as_const_int(e)) return E(*c + v);
  return arith::simplify(e + E(v));
}

// The input row (or column) that output o reads at kernel tap r.
Expr tap(const Expr& o, const IterVar& r, int stride, int dilation) { return o * stride + r.var() * dilation; }

}  // namespace

te::Tensor pad_hw(const te::Tensor& X, int top, int left, int bottom, int right, const std::string& name) {
  KILN_USER_CHECK(X.ndim() == 4 || X.ndim() == 5) << "pad_hw needs an NCHW or NCHWc tensor, got '" << X.name() << "' (" << X.ndim() << "-D)";
  KILN_USER_CHECK(top >= 0 && left >= 0 && bottom >= 0 && right >= 0) << "pad_hw: padding must be non-negative";
  if (top == 0 && left == 0 && bottom == 0 && right == 0) return X;
  std::vector<Expr> shape = X.shape();
  Expr H = shape[2], W = shape[3];
  shape[2] = plus(H, top + bottom);
  shape[3] = plus(W, left + right);
  return te::compute(shape, [&](const std::vector<Var>& i) {
    Expr h = i[2] - top, w = i[3] - left;
    Expr inside = h >= 0 && h < H && w >= 0 && w < W;
    std::vector<Expr> idx(i.begin(), i.end());
    idx[2] = h;
    idx[3] = w;
    return if_then_else(inside, X(idx), make_zero(X.dtype()));
  }, name, X.ndim() == 4 ? std::vector<std::string>{"n", "c", "h", "w"} : std::vector<std::string>{"n", "c", "h", "w", "cb"});
}

te::Tensor change_channel_block(const te::Tensor& X, int from, int to, const std::string& name, int64_t channels) {
  const std::vector<Expr>& s = X.shape();
  KILN_USER_CHECK((from == 0 && s.size() == 4) || (from > 0 && s.size() == 5 && is_const_int(s[4], from)))
      << "change_channel_block: '" << X.name() << "' " << extents_to_string(s) << " is not in the layout of block " << from;
  const int64_t held = from == 0 ? static_dim(X, 1, "change_channel_block") : static_dim(X, 1, "change_channel_block") * from;  // padding included
  const int64_t C = channels > 0 ? channels : held;
  KILN_USER_CHECK(to >= 0 && (to == 0 || channels > 0 || C % to == 0)) << "change_channel_block: " << C << " channels do not split into blocks of " << to;
  KILN_USER_CHECK(C <= held && (from > 0 || C == held) && held - C < std::max(from, 1))
      << "change_channel_block: '" << X.name() << "' " << extents_to_string(s) << " does not hold " << C << " channels in blocks of " << from;
  // The source element of channel c at pixel (n, h, w).
  auto read = [&](Expr n, Expr c, Expr h, Expr w) {
    if (from == 0) return X(n, c, h, w);
    return X(std::vector<Expr>{n, floordiv(c, from), h, w, floormod(c, from)});
  };
  if (to == 0)
    return te::compute({s[0], E(C), s[2], s[3]}, [&](const std::vector<Var>& i) { return read(i[0], i[1], i[2], i[3]); }, name, {"n", "c", "h", "w"});
  const int64_t blocks = (C + to - 1) / to;
  return te::compute({s[0], E(blocks), s[2], s[3], E(to)},
                     [&](const std::vector<Var>& i) {
                       Expr c = i[1] * to + i[4];
                       // The padded tail of the last block reads as zero (a padded source holds no more than C).
                       if (blocks * to == C) return read(i[0], c, i[2], i[3]);
                       return if_then_else(c < E(C), read(i[0], c, i[2], i[3]), make_zero(X.dtype()));
                     },
                     name, {"n", "co", "h", "w", "ci"});
}

te::Tensor conv2d_nchwc_general(const te::Tensor& X, const te::Tensor& Wt, const Conv2dParams& p, const std::string& name, int64_t group_blocks,
                                const std::function<Expr(Expr, Expr)>& product) {
  std::vector<int64_t> ws = const_shape(Wt);
  KILN_USER_CHECK(X.ndim() == 5) << "conv2d_nchwc: input '" << X.name() << "' must be [N, C/cb, H, W, cb]";
  const std::vector<int64_t> xs = {0, static_dim(X, 1, "conv2d_nchwc"), 0, 0, static_dim(X, 4, "conv2d_nchwc")};  // the channel dims
  // Grouped: every group_blocks output blocks read their own ws[1] input blocks.
  const int64_t chunks = group_blocks > 0 && ws.size() == 6 && ws[0] % group_blocks == 0 ? ws[0] / group_blocks : 1;
  KILN_USER_CHECK(group_blocks >= 0 && xs.size() == 5 && ws.size() == 6 && xs[4] % ws[4] == 0 && xs[1] * xs[4] == chunks * ws[1] * ws[4] &&
                  (group_blocks == 0 || ws[0] % group_blocks == 0))
      << "conv2d_nchwc: input " << extents_to_string(X.shape()) << " and weights " << shape_to_string(ws) << " do not match (group_blocks " << group_blocks
      << "; the input's block must be the weights' or a multiple of it, with the same channels)";
  const int64_t xb0 = xs[4], cb = ws[4];
  // An input in wider blocks than the weights' (a grouped conv reading the
  // block its producer wrote, no relayout before it) is padded in the
  // weights' block: the padding is a stage anyway, and a grouped conv's
  // hand schedule (cpu_grouped_conv.h) stages it per row of tiles, which
  // read half a 32-channel block per pixel otherwise (ResNeXt-50's 14 x 14 x
  // 512 convs 1.2x slower at 1 thread).
  const bool reblock = xb0 > cb && (p.pad_top || p.pad_left || p.pad_bottom || p.pad_right);
  te::Tensor src = X;
  if (reblock) {
    const int64_t r = xb0 / cb;  // weight blocks in an input block (a multiple: checked above)
    std::vector<Expr> shape = X.shape();
    shape[1] = E(xs[1] * r);
    shape[4] = E(cb);
    src = te::compute(shape, [&](const std::vector<Var>& i) {
      return X(std::vector<Expr>{i[0], floordiv(i[1], E(r)), i[2], i[3], floormod(i[1], E(r)) * E(cb) + i[4]});
    }, name + ".block", {"n", "c", "h", "w", "cb"});
  }
  const int64_t xb = reblock ? cb : xb0;
  auto [P, OH, OW] = pad_for_kernel(src, p, ws[2], ws[3], name, "conv2d_nchwc");
  IterVar rco = te::reduce_axis(Range(0, E(ws[1])), "rco"), ry = te::reduce_axis(Range(0, E(ws[2])), "ry"),
          rx = te::reduce_axis(Range(0, E(ws[3])), "rx"), rci = te::reduce_axis(Range(0, E(ws[4])), "rci");
  return te::compute({X.shape()[0], E(ws[0]), OH, OW, E(ws[5])},
                     [&](const std::vector<Var>& i) {
                       Expr block = group_blocks > 0 ? floordiv(i[1], E(group_blocks)) * E(ws[1]) + rco.var() : Expr(rco.var());
                       // Channel block*cb + rci, in the input's wider block where it has one.
                       Expr c = block * E(cb) + rci.var();
                       Expr outer = xb == cb ? block : floordiv(c, E(xb)), inner = xb == cb ? Expr(rci.var()) : floormod(c, E(xb));
                       Expr in = P(std::vector<Expr>{i[0], outer, tap(i[2], ry, p.stride_h, p.dilation_h), tap(i[3], rx, p.stride_w, p.dilation_w), inner});
                       Expr w = Wt(std::vector<Expr>{i[1], rco.var(), ry.var(), rx.var(), rci.var(), i[4]});
                       return te::sum(product ? product(in, w) : in * w, {rco, ry, rx, rci});
                     },
                     name, {"n", "fo", "y", "x", "fi"});
}

te::Tensor depthwise_conv2d_nchwc(const te::Tensor& X, const te::Tensor& Wt, const Conv2dParams& p, const std::string& name) {
  std::vector<int64_t> ws = const_shape(Wt);
  KILN_USER_CHECK(X.ndim() == 5) << "depthwise_conv2d_nchwc: input '" << X.name() << "' must be [N, C/b, H, W, b]";
  const std::vector<int64_t> xs = {0, static_dim(X, 1, "depthwise_conv2d_nchwc"), 0, 0, static_dim(X, 4, "depthwise_conv2d_nchwc")};
  KILN_USER_CHECK(ws.size() == 4 && xs[1] == ws[0] && xs[4] == ws[3])
      << "depthwise_conv2d_nchwc: input " << extents_to_string(X.shape()) << " and weights " << shape_to_string(ws) << " do not match";
  auto [P, OH, OW] = pad_for_kernel(X, p, ws[1], ws[2], name, "depthwise_conv2d_nchwc");
  IterVar ry = te::reduce_axis(Range(0, E(ws[1])), "ry"), rx = te::reduce_axis(Range(0, E(ws[2])), "rx");
  return te::compute({X.shape()[0], E(xs[1]), OH, OW, E(xs[4])},
                     [&](const std::vector<Var>& i) {
                       Expr in = P(std::vector<Expr>{i[0], i[1], tap(i[2], ry, p.stride_h, p.dilation_h), tap(i[3], rx, p.stride_w, p.dilation_w), i[4]});
                       return te::sum(in * Wt(std::vector<Expr>{i[1], ry.var(), rx.var(), i[4]}), {ry, rx});
                     },
                     name, {"n", "co", "y", "x", "ci"});
}

namespace {

// How many of the row (leading) extents are symbolic.
int symbolic_rows(const std::vector<Expr>& shape) {
  int n = 0;
  for (size_t d = 0; d + 1 < shape.size(); ++d) n += as_const_int(shape[d]) ? 0 : 1;
  return n;
}

}  // namespace

te::Tensor matmul_packed_b(const te::Tensor& A, const te::Tensor& Bp, const std::string& name, const std::function<Expr(Expr, Expr)>& product) {
  const std::vector<Expr>& as = A.shape();
  std::vector<int64_t> bs = const_shape(Bp);
  KILN_USER_CHECK(as.size() >= 2 && bs.size() == 3 && is_const_int(as.back(), bs[1]))
      << "matmul_packed_b: A " << extents_to_string(as) << " and panels " << shape_to_string(bs) << " do not match";
  int64_t nb = bs[2];
  IterVar k = te::reduce_axis(Range(0, as.back()), "k");
  auto b_at = [&](const Expr& j) { return Bp(std::vector<Expr>{floordiv(j, E(nb)), k.var(), floormod(j, E(nb))}); };
  auto mul = [&](const Expr& a, const Expr& b) { return product ? product(a, b) : a * b; };
  if (symbolic_rows(as) >= 2) {
    // Several symbolic row extents ([seq, batch, K]): the product runs over
    // one row axis of their product, so the schedule rules tile it as one
    // matrix of rows (a register tile of rows along any one of them would
    // leave the others, and a batch of 2, to the remainder); the result
    // reads it back at the rows' linear index.
    Expr rows = as[0];
    for (size_t d = 1; d + 1 < as.size(); ++d) rows = rows * as[d];
    te::Tensor flat = te::compute({arith::simplify(rows), E(bs[0] * nb)}, [&](const std::vector<Var>& i) {
      std::vector<Expr> ai(as.size());
      Expr r = i[0];
      for (size_t d = as.size() - 1; d-- > 0;) {
        ai[d] = d == 0 ? r : floormod(r, as[d]);
        r = floordiv(r, as[d]);
      }
      ai.back() = k.var();
      return te::sum(mul(A(ai), b_at(i[1])), {k});
    }, name + ".rows", {"r", "j"});
    std::vector<Expr> out(as.begin(), as.end() - 1);
    out.push_back(E(bs[0] * nb));
    return te::compute(out, [&](const std::vector<Var>& i) {
      Expr r = i[0];
      for (size_t d = 1; d + 1 < i.size(); ++d) r = r * as[d] + i[d];
      return flat(std::vector<Expr>{r, i.back()});
    }, name);
  }
  std::vector<Expr> out(as.begin(), as.end() - 1);  // the rows may be symbolic
  out.push_back(E(bs[0] * nb));
  std::vector<std::string> names;
  for (size_t d = 0; d + 2 < out.size(); ++d) names.push_back("b" + std::to_string(d));
  names.push_back("i");
  names.push_back("j");
  return te::compute(out, [&](const std::vector<Var>& i) {
    std::vector<Expr> ai(i.begin(), i.end() - 1);
    ai.push_back(k.var());
    return te::sum(mul(A(ai), b_at(i.back())), {k});
  }, name, names);
}

}  // namespace kiln::ops
