#include "kiln/ops/nn.h"

#include <algorithm>

#include "kiln/ir/op.h"
#include "kiln/ops/register_tile.h"
#include "kiln/support/error.h"

namespace kiln::ops {

using te::compute;
using te::reduce_axis;

static int64_t dim(const Tensor& t, int d) {
  const int64_t* v = as_const_int(t.shape()[d]);
  KILN_USER_CHECK(v) << "tensor '" << t.name() << "' needs a constant dimension " << d << " for this op";
  return *v;
}

Tensor matmul(const Tensor& A, const Tensor& B, const std::string& name) {
  KILN_USER_CHECK(A.ndim() == 2 && B.ndim() == 2) << "matmul needs 2-D tensors, got '" << A.name() << "' (" << A.ndim() << "-D) and '" << B.name() << "' (" << B.ndim() << "-D)";
  KILN_USER_CHECK(dim(A, 1) == dim(B, 0)) << "matmul: '" << A.name() << "' has " << dim(A, 1) << " columns but '" << B.name() << "' has " << dim(B, 0) << " rows";
  IterVar k = reduce_axis(Range(0, A.shape()[1]), "k");
  return compute({A.shape()[0], B.shape()[1]}, [&](const std::vector<Var>& i) { return te::sum(A(i[0], k.var()) * B(k.var(), i[1]), {k}); }, name);
}

Tensor batch_matmul(const Tensor& A, const Tensor& B, const std::string& name) {
  KILN_USER_CHECK(A.ndim() == 3 && B.ndim() == 3 && dim(A, 0) == dim(B, 0) && dim(A, 2) == dim(B, 1)) << "batch_matmul needs [b, m, k] x [b, k, n] tensors";
  IterVar k = reduce_axis(Range(0, A.shape()[2]), "k");
  return compute({A.shape()[0], A.shape()[1], B.shape()[2]},
                 [&](const std::vector<Var>& i) { return te::sum(A(i[0], i[1], k.var()) * B(i[0], k.var(), i[2]), {k}); }, name, {"b", "i", "j"});
}

Tensor pad2d(const Tensor& X, int ph, int pw, const std::string& name) {
  KILN_USER_CHECK(X.ndim() == 4 || X.ndim() == 5) << "pad2d needs an NCHW or NCHWc tensor, got '" << X.name() << "' (" << X.ndim() << "-D)";
  KILN_USER_CHECK(ph >= 0 && pw >= 0) << "pad2d: the padding must be non-negative, got " << ph << " and " << pw;
  int64_t H = dim(X, 2), W = dim(X, 3);
  std::vector<Expr> shape = X.shape();
  shape[2] = Expr(static_cast<int>(H + 2 * ph));
  shape[3] = Expr(static_cast<int>(W + 2 * pw));
  std::vector<std::string> names = {"n", "c", "h", "w", "cb"};
  names.resize(X.ndim());
  return compute(shape,
                 [&](const std::vector<Var>& i) {
                   Expr h = i[2] - ph, w = i[3] - pw;
                   Expr inside = h >= 0 && h < static_cast<int>(H) && w >= 0 && w < static_cast<int>(W);
                   std::vector<Expr> idx(i.begin(), i.end());
                   idx[2] = h;
                   idx[3] = w;
                   return if_then_else(inside, X(idx), make_zero(X.dtype()));
                 },
                 name, names);
}

Tensor conv2d_nchw(const Tensor& X, const Tensor& Wt, int stride, int pad, int dilation, const std::string& name, Tensor* padded) {
  KILN_USER_CHECK(X.ndim() == 4 && Wt.ndim() == 4) << "conv2d_nchw needs NCHW input and OIHW weights";
  KILN_USER_CHECK(dim(X, 1) == dim(Wt, 1)) << "conv2d: input has " << dim(X, 1) << " channels but weights expect " << dim(Wt, 1);
  KILN_USER_CHECK(stride > 0 && dilation > 0 && pad >= 0) << "conv2d: stride and dilation must be positive, padding non-negative";
  Tensor P = pad > 0 ? pad2d(X, pad, pad, name + ".pad") : X;
  if (padded) *padded = P;
  int64_t KH = dim(Wt, 2), KW = dim(Wt, 3);
  int64_t OH = (dim(P, 2) - dilation * (KH - 1) - 1) / stride + 1, OW = (dim(P, 3) - dilation * (KW - 1) - 1) / stride + 1;
  KILN_USER_CHECK(OH > 0 && OW > 0) << "conv2d: the kernel is larger than the padded input";
  IterVar rc = reduce_axis(Range(0, X.shape()[1]), "rc"), ry = reduce_axis(Range(0, Wt.shape()[2]), "ry"), rx = reduce_axis(Range(0, Wt.shape()[3]), "rx");
  return compute({X.shape()[0], Wt.shape()[0], Expr(static_cast<int>(OH)), Expr(static_cast<int>(OW))},
                 [&](const std::vector<Var>& i) {
                   return te::sum(P(i[0], rc.var(), i[2] * stride + ry.var() * dilation, i[3] * stride + rx.var() * dilation) * Wt(i[1], rc.var(), ry.var(), rx.var()), {rc, ry, rx});
                 },
                 name, {"n", "f", "y", "x"});
}

int channel_block(int channels, int preferred) {
  KILN_USER_CHECK(channels > 0 && preferred > 0) << "channel_block: channels and the preferred block must be positive";
  int best = 1;
  for (int b = 1; b <= std::min(channels, preferred); ++b)
    if (channels % b == 0) best = b;
  return best;
}

NchwcBlocks nchwc_blocks(int in_channels, int out_channels, const Target& target) {
  int lanes = register_budget(target).lanes;
  return {channel_block(in_channels, lanes), channel_block(out_channels, 2 * lanes)};
}

NchwcBlocks nchwc_blocks(int in_channels, int out_channels) { return nchwc_blocks(in_channels, out_channels, host_target()); }

Tensor conv2d_nchwc(const Tensor& X, const Tensor& Wt, int stride, int pad, const std::string& name, Tensor* padded) {
  KILN_USER_CHECK(X.ndim() == 5 && Wt.ndim() == 6) << "conv2d_nchwc needs an [N, C/cb, H, W, cb] input and [K/kb, C/cb, KH, KW, cb, kb] weights, got '" << X.name()
                                                   << "' (" << X.ndim() << "-D) and '" << Wt.name() << "' (" << Wt.ndim() << "-D)";
  KILN_USER_CHECK(dim(X, 1) == dim(Wt, 1) && dim(X, 4) == dim(Wt, 4))
      << "conv2d_nchwc: the input has " << dim(X, 1) << " blocks of " << dim(X, 4) << " channels but the weights expect " << dim(Wt, 1) << " blocks of " << dim(Wt, 4);
  KILN_USER_CHECK(stride > 0 && pad >= 0) << "conv2d_nchwc: the stride must be positive and the padding non-negative";
  Tensor P = pad > 0 ? pad2d(X, pad, pad, name + ".pad") : X;
  if (padded) *padded = P;
  int64_t KH = dim(Wt, 2), KW = dim(Wt, 3);
  int64_t OH = (dim(P, 2) - KH) / stride + 1, OW = (dim(P, 3) - KW) / stride + 1;
  KILN_USER_CHECK(dim(P, 2) >= KH && dim(P, 3) >= KW) << "conv2d_nchwc: the kernel is larger than the padded input";
  IterVar rco = reduce_axis(Range(0, X.shape()[1]), "rco"), ry = reduce_axis(Range(0, Wt.shape()[2]), "ry"), rx = reduce_axis(Range(0, Wt.shape()[3]), "rx"),
          rci = reduce_axis(Range(0, X.shape()[4]), "rci");
  return compute({X.shape()[0], Wt.shape()[0], Expr(static_cast<int>(OH)), Expr(static_cast<int>(OW)), Wt.shape()[5]},
                 [&](const std::vector<Var>& i) {
                   Expr in = P(i[0], rco.var(), i[2] * stride + ry.var(), i[3] * stride + rx.var(), rci.var());
                   return te::sum(in * Wt(i[1], rco.var(), ry.var(), rx.var(), rci.var(), i[4]), {rco, ry, rx, rci});
                 },
                 name, {"n", "fo", "y", "x", "fi"});
}

Tensor depthwise_conv2d_nchw(const Tensor& X, const Tensor& Wt, int stride, int pad, const std::string& name, Tensor* padded) {
  KILN_USER_CHECK(X.ndim() == 4 && Wt.ndim() == 4 && dim(Wt, 1) == 1 && dim(Wt, 0) == dim(X, 1)) << "depthwise_conv2d needs NCHW input and [C, 1, KH, KW] weights";
  Tensor P = pad > 0 ? pad2d(X, pad, pad, name + ".pad") : X;
  if (padded) *padded = P;
  int64_t KH = dim(Wt, 2), KW = dim(Wt, 3);
  int64_t OH = (dim(P, 2) - KH) / stride + 1, OW = (dim(P, 3) - KW) / stride + 1;
  IterVar ry = reduce_axis(Range(0, Wt.shape()[2]), "ry"), rx = reduce_axis(Range(0, Wt.shape()[3]), "rx");
  return compute({X.shape()[0], X.shape()[1], Expr(static_cast<int>(OH)), Expr(static_cast<int>(OW))},
                 [&](const std::vector<Var>& i) { return te::sum(P(i[0], i[1], i[2] * stride + ry.var(), i[3] * stride + rx.var()) * Wt(i[1], 0, ry.var(), rx.var()), {ry, rx}); },
                 name, {"n", "c", "y", "x"});
}

Tensor max_pool2d(const Tensor& X, int kernel, int stride, int pad, const std::string& name) {
  KILN_USER_CHECK(X.ndim() == 4 && kernel > 0 && stride > 0 && pad >= 0) << "max_pool2d needs an NCHW tensor, a positive kernel and stride";
  int64_t H = dim(X, 2), W = dim(X, 3);
  int64_t OH = (H + 2 * pad - kernel) / stride + 1, OW = (W + 2 * pad - kernel) / stride + 1;
  IterVar ry = reduce_axis(Range(0, kernel), "ry"), rx = reduce_axis(Range(0, kernel), "rx");
  Expr lowest = reduce_identity(ReduceKind::Max, X.dtype());
  return compute({X.shape()[0], X.shape()[1], Expr(static_cast<int>(OH)), Expr(static_cast<int>(OW))},
                 [&](const std::vector<Var>& i) {
                   Expr h = i[2] * stride + ry.var() - pad, w = i[3] * stride + rx.var() - pad;
                   Expr inside = h >= 0 && h < static_cast<int>(H) && w >= 0 && w < static_cast<int>(W);
                   return te::max(if_then_else(inside, X(i[0], i[1], h, w), lowest), {ry, rx});
                 },
                 name, {"n", "c", "y", "x"});
}

Tensor avg_pool2d(const Tensor& X, int kernel, int stride, const std::string& name) {
  KILN_USER_CHECK(X.ndim() == 4 && kernel > 0 && stride > 0) << "avg_pool2d needs an NCHW tensor, a positive kernel and stride";
  int64_t OH = (dim(X, 2) - kernel) / stride + 1, OW = (dim(X, 3) - kernel) / stride + 1;
  IterVar ry = reduce_axis(Range(0, kernel), "ry"), rx = reduce_axis(Range(0, kernel), "rx");
  Tensor s = compute({X.shape()[0], X.shape()[1], Expr(static_cast<int>(OH)), Expr(static_cast<int>(OW))},
                     [&](const std::vector<Var>& i) { return te::sum(X(i[0], i[1], i[2] * stride + ry.var(), i[3] * stride + rx.var()), {ry, rx}); }, name + ".sum",
                     {"n", "c", "y", "x"});
  float inv = 1.0f / static_cast<float>(kernel * kernel);
  return compute(s.shape(), [&](const std::vector<Var>& i) { return s(i[0], i[1], i[2], i[3]) * cast(X.dtype(), Expr(inv)); }, name, {"n", "c", "y", "x"});
}

Tensor softmax(const Tensor& X, const std::string& name) {
  KILN_USER_CHECK(X.ndim() == 2) << "softmax needs a 2-D tensor";
  IterVar k1 = reduce_axis(Range(0, X.shape()[1]), "k");
  Tensor mx = compute({X.shape()[0]}, [&](const std::vector<Var>& i) { return te::max(X(i[0], k1.var()), {k1}); }, name + ".max");
  Tensor ex = compute(X.shape(), [&](const std::vector<Var>& i) { return exp(X(i[0], i[1]) - mx(i[0])); }, name + ".exp");
  IterVar k2 = reduce_axis(Range(0, X.shape()[1]), "k");
  Tensor sm = compute({X.shape()[0]}, [&](const std::vector<Var>& i) { return te::sum(ex(i[0], k2.var()), {k2}); }, name + ".sum");
  return compute(X.shape(), [&](const std::vector<Var>& i) { return ex(i[0], i[1]) / sm(i[0]); }, name);
}

Tensor layer_norm(const Tensor& X, const Tensor& gamma, const Tensor& beta, float eps, const std::string& name) {
  KILN_USER_CHECK(X.ndim() == 2 && gamma.ndim() == 1 && beta.ndim() == 1) << "layer_norm needs a 2-D input and 1-D gamma, beta";
  Expr n = cast(X.dtype(), X.shape()[1]);
  IterVar k1 = reduce_axis(Range(0, X.shape()[1]), "k");
  Tensor mean = compute({X.shape()[0]}, [&](const std::vector<Var>& i) { return te::sum(X(i[0], k1.var()), {k1}); }, name + ".sum");
  IterVar k2 = reduce_axis(Range(0, X.shape()[1]), "k");
  Tensor sq = compute({X.shape()[0]}, [&](const std::vector<Var>& i) {
    Expr d = X(i[0], k2.var()) - mean(i[0]) / n;
    return te::sum(d * d, {k2});
  }, name + ".var");
  return compute(X.shape(), [&](const std::vector<Var>& i) {
    Expr mu = mean(i[0]) / n;
    Expr inv = rsqrt(sq(i[0]) / n + cast(X.dtype(), Expr(eps)));
    return (X(i[0], i[1]) - mu) * inv * gamma(i[1]) + beta(i[1]);
  }, name);
}

Tensor transpose(const Tensor& X, const std::string& name) {
  KILN_USER_CHECK(X.ndim() == 2) << "transpose needs a 2-D tensor";
  return compute({X.shape()[1], X.shape()[0]}, [&](const std::vector<Var>& i) { return X(i[1], i[0]); }, name);
}

Tensor add(const Tensor& A, const Tensor& B, const std::string& name) {
  KILN_USER_CHECK(A.ndim() == B.ndim()) << "add of tensors of different ranks";
  return compute(A.shape(), [&](const std::vector<Var>& i) { return A(std::vector<Expr>(i.begin(), i.end())) + B(std::vector<Expr>(i.begin(), i.end())); }, name);
}

Tensor relu(const Tensor& X, const std::string& name) {
  return compute(X.shape(), [&](const std::vector<Var>& i) { return max(X(std::vector<Expr>(i.begin(), i.end())), make_zero(X.dtype())); }, name);
}

Tensor gelu(const Tensor& X, const std::string& name) {
  return compute(X.shape(), [&](const std::vector<Var>& i) {
    Expr x = X(std::vector<Expr>(i.begin(), i.end()));
    return x * cast(X.dtype(), Expr(0.5f)) * (cast(X.dtype(), Expr(1.0f)) + erf(x * cast(X.dtype(), Expr(0.70710678f))));
  }, name);
}

Tensor bias_add(const Tensor& X, const Tensor& bias, const std::string& name) {
  KILN_USER_CHECK(bias.ndim() == 1) << "bias_add needs a 1-D bias";
  return compute(X.shape(), [&](const std::vector<Var>& i) { return X(std::vector<Expr>(i.begin(), i.end())) + bias(i.back()); }, name);
}

}  // namespace kiln::ops
