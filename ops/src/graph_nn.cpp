// Sliding-window geometry, convolution, Gemm and numpy matmul for the graph
// compiler's operators (graph_nn.h).
#include "kiln/ops/graph_nn.h"

#include <algorithm>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/broadcast.h"
#include "kiln/runtime/ndarray.h"
#include "kiln/support/error.h"

namespace kiln::ops {

using te::compute;
using te::reduce_axis;

namespace {

Expr imm(int64_t v) { return index_imm(v); }
std::vector<Expr> dims_of(const std::vector<int64_t>& shape) { return shape_exprs(shape); }

// e * c and e + c without the no-op terms, so the loops the tuner sees stay plain.
Expr times(Expr e, int64_t c) { return c == 1 ? e : e * imm(c); }

// Spatial axis names for 1 to 3 dims, outputs then reduce axes.
std::vector<std::string> spatial_names(size_t r, const char* const names[3]) { return std::vector<std::string>(names + 3 - r, names + 3); }
const char* const kOutNames[3] = {"z", "y", "x"};
const char* const kReduceNames[3] = {"rz", "ry", "rx"};

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

}  // namespace

AutoPad parse_auto_pad(const std::string& s) {
  if (s == "NOTSET" || s.empty()) return AutoPad::NotSet;
  if (s == "SAME_UPPER") return AutoPad::SameUpper;
  if (s == "SAME_LOWER") return AutoPad::SameLower;
  if (s == "VALID") return AutoPad::Valid;
  KILN_USER_ERROR() << "auto_pad '" << s << "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID";
  return AutoPad::NotSet;  // not reached: the line above throws
}

Expr WindowDim::in_extent() const { return in_symbolic.defined() ? in_symbolic : index_imm(in); }
Expr WindowDim::out_extent() const { return out_symbolic.defined() ? out_symbolic : index_imm(out); }

namespace {

// resolve_window of a symbolic input extent: the static pads give out = floor(room / stride) + 1,
// or with ceil_mode, as resolve_window's static rule, c + 1 for c = ceil(room / stride), less one
// when the last window would start in the end pad (c * stride >= in + pad_begin).
void resolve_symbolic_window(WindowDim* d, AutoPad mode, bool ceil_mode) {
  if (mode == AutoPad::SameUpper || mode == AutoPad::SameLower) {
    KILN_USER_CHECK(d->stride == 1) << "window: SAME padding with stride " << d->stride << " on the symbolic spatial dimension '" << d->in_symbolic
                                    << "' would pad by an amount known only at run time; give the dimension a size, or use explicit pads";
    int64_t total = d->span() - 1, small = total / 2;
    d->pad_begin = mode == AutoPad::SameUpper ? small : total - small;
    d->pad_end = total - d->pad_begin;
  } else if (mode == AutoPad::Valid) {
    d->pad_begin = d->pad_end = 0;
  }
  Expr room = d->in_symbolic + index_imm(d->pad_begin + d->pad_end - d->span());
  Expr s = index_imm(d->stride);
  if (!ceil_mode || mode != AutoPad::NotSet || d->stride == 1) {  // ceil of room / 1 is the floor
    d->out_symbolic = arith::simplify(floordiv(room, s) + 1);
    return;
  }
  d->ceil_symbolic = true;
  Expr c = floordiv(room + index_imm(d->stride - 1), s);
  // 1 when the last window starts in the end pad: c * stride - (in + pad_begin) + 1 > 0.
  Expr in_end_pad = min(max(c * s - d->in_symbolic - index_imm(d->pad_begin - 1), index_imm(0)), index_imm(1));
  d->out_symbolic = arith::simplify(c + 1 - in_end_pad);
}

}  // namespace

void resolve_window(WindowDim* d, AutoPad mode, bool ceil_mode) {
  KILN_USER_CHECK(d->kernel >= 1 && d->stride >= 1 && d->dilation >= 1)
      << "window: kernel, stride and dilation must be positive, got " << d->kernel << ", " << d->stride << ", " << d->dilation;
  if (d->is_symbolic()) return resolve_symbolic_window(d, mode, ceil_mode);
  switch (mode) {
    case AutoPad::SameUpper:
    case AutoPad::SameLower: {
      d->out = ceil_div(d->in, d->stride);
      int64_t total = std::max<int64_t>(0, (d->out - 1) * d->stride + d->span() - d->in);
      int64_t small = total / 2;
      d->pad_begin = mode == AutoPad::SameUpper ? small : total - small;
      d->pad_end = total - d->pad_begin;
      return;
    }
    case AutoPad::Valid:
      d->pad_begin = d->pad_end = 0;
      [[fallthrough]];
    case AutoPad::NotSet: {
      int64_t room = d->in + d->pad_begin + d->pad_end - d->span();
      if (room < 0) {
        d->out = 0;
        return;
      }
      if (!ceil_mode || mode == AutoPad::Valid) {
        d->out = room / d->stride + 1;
        return;
      }
      d->out = ceil_div(room, d->stride) + 1;
      // A last window that would start inside the end padding is dropped.
      if ((d->out - 1) * d->stride >= d->in + d->pad_begin) --d->out;
      return;
    }
  }
}

Tensor pad_spatial(const Tensor& X, const std::vector<WindowDim>& dims, double value, const std::string& name) {
  std::vector<Expr> shape = X.shape();
  KILN_USER_CHECK(shape.size() == dims.size() + 2) << "pad_spatial: '" << X.name() << "' has rank " << shape.size() << " for " << dims.size() << " spatial dims";
  for (size_t j = 0; j < dims.size(); ++j) {
    int64_t pads = dims[j].pad_begin + dims[j].pad_end;
    const int64_t* c = as_const_int(shape[j + 2]);
    shape[j + 2] = c ? imm(*c + pads) : arith::simplify(shape[j + 2] + imm(pads));
  }
  Expr fill = make_const(X.dtype(), value);
  std::vector<std::string> names = {"n", "c"};
  for (const std::string& s : spatial_names(dims.size(), kOutNames)) names.push_back(s);
  return compute(shape, [&](const std::vector<Var>& i) {
    std::vector<Expr> idx(i.begin(), i.end());
    Expr inside;
    auto both = [&](Expr c) { inside = inside.defined() ? (inside && c) : c; };
    for (size_t j = 0; j < dims.size(); ++j) {
      const WindowDim& d = dims[j];
      if (d.pad_begin == 0 && d.pad_end == 0) continue;
      Expr h = i[j + 2] - imm(d.pad_begin);
      idx[j + 2] = h;
      if (d.pad_begin > 0) both(h >= 0);
      if (d.pad_end > 0) both(h < d.in_extent());
    }
    return inside.defined() ? if_then_else(inside, X(idx), fill) : X(idx);
  }, name, names);
}

namespace {

// The reduce axes of a convolution over `channels` input channels and the
// kernel extents ws[2..]: axes of extent 1 are left out (they would only add
// loops), rc alone stays when nothing else is left. Gives the axes, the
// channel index and one kernel index per spatial dimension.
struct ConvReduce {
  std::vector<IterVar> axes;
  Expr rc;
  std::vector<Expr> kidx;
};
// X's channel count: static (the weights fix it), while batch and spatial extents may be symbolic.
int64_t channels_of(const Tensor& X) {
  const int64_t* c = as_const_int(X.shape()[1]);
  KILN_USER_CHECK(c) << "conv: the channels of '" << X.name() << "' (" << X.shape()[1] << ") must be static; only the batch and spatial dims may be symbolic";
  return *c;
}

// [N, K, out...] of a convolution.
std::vector<Expr> conv_out_shape(const Tensor& X, int64_t K, const std::vector<WindowDim>& dims) {
  std::vector<Expr> out = {X.shape()[0], imm(K)};
  for (const WindowDim& d : dims) out.push_back(d.out_extent());
  return out;
}

ConvReduce conv_reduce_axes(int64_t channels, const std::vector<int64_t>& ws, size_t r) {
  ConvReduce c{{}, imm(0), std::vector<Expr>(r, imm(0))};
  if (channels > 1) {
    c.axes.push_back(reduce_axis(Range(0, imm(channels)), "rc"));
    c.rc = c.axes.back().var();
  }
  std::vector<std::string> rnames = spatial_names(r, kReduceNames);
  for (size_t j = 0; j < r; ++j)
    if (ws[j + 2] > 1) {
      c.axes.push_back(reduce_axis(Range(0, imm(ws[j + 2])), rnames[j]));
      c.kidx[j] = c.axes.back().var();
    }
  if (c.axes.empty()) {
    c.axes.push_back(reduce_axis(Range(0, imm(1)), "rc"));
    c.rc = c.axes.back().var();
  }
  return c;
}

}  // namespace

Tensor conv_nchw(const Tensor& X, const Tensor& Wt, const std::vector<WindowDim>& dims, int64_t group, const std::string& name, Tensor* padded) {
  size_t r = dims.size();
  KILN_USER_CHECK(r >= 1 && r <= 3 && X.ndim() == static_cast<int>(r) + 2 && Wt.ndim() == X.ndim())
      << "conv: needs X [N, C, spatial...] and W [K, C/group, kernel...] of 1 to 3 spatial dims, got ranks " << X.ndim() << " and " << Wt.ndim();
  std::vector<int64_t> ws = const_shape(Wt);
  int64_t C = channels_of(X), K = ws[0], cg = ws[1];
  KILN_USER_CHECK(group >= 1 && cg * group == C && K % group == 0)
      << "conv: X has " << C << " channels, W expects " << cg << " per group x " << group << " groups, and " << K << " output channels";
  bool any_pad = false;
  for (const WindowDim& d : dims) any_pad = any_pad || d.pad_begin > 0 || d.pad_end > 0;
  Tensor P = any_pad ? pad_spatial(X, dims, 0.0, name + ".pad") : X;
  if (padded) *padded = P;
  int64_t kg = K / group;
  // Reduce axes of extent 1 would only add loops; keep rc when nothing else is left.
  auto [axes, rc, kidx] = conv_reduce_axes(cg, ws, r);
  std::vector<Expr> out = conv_out_shape(X, K, dims);
  std::vector<std::string> names = {"n", "f"};
  for (const std::string& s : spatial_names(r, kOutNames)) names.push_back(s);
  return compute(out, [&](const std::vector<Var>& i) {
    // Input channel of (output channel k, rc): group g(k) = k / (K/group) starts at g(k) * C/group.
    Expr k = i[1];
    Expr ch = rc;
    if (group > 1) {
      Expr base = kg == 1 ? k : floordiv(k, imm(kg));
      ch = cg == 1 && is_zero(rc) ? base : times(base, cg) + rc;
    }
    std::vector<Expr> xi = {i[0], ch}, wi = {k, rc};
    for (size_t j = 0; j < r; ++j) {
      Expr pos = times(i[j + 2], dims[j].stride);
      if (!is_zero(kidx[j])) pos = pos + times(kidx[j], dims[j].dilation);
      xi.push_back(pos);
      wi.push_back(kidx[j]);
    }
    return te::sum(P(xi) * Wt(wi), axes);
  }, name, names);
}

bool prefer_channels_last(int64_t group, int64_t out_channels) { return group == 1 && out_channels >= 16 && out_channels % 8 == 0; }

Tensor conv_channels_last(const Tensor& X, const Tensor& Wt, const Tensor& B, const std::vector<WindowDim>& dims, const std::string& name,
                          const std::function<Expr(Expr, Expr)>& product) {
  size_t r = dims.size();
  KILN_USER_CHECK(r >= 1 && r <= 3 && X.ndim() == static_cast<int>(r) + 2 && Wt.ndim() == X.ndim())
      << "conv: needs X [N, C, spatial...] and W [K, C, kernel...] of 1 to 3 spatial dims, got ranks " << X.ndim() << " and " << Wt.ndim();
  std::vector<int64_t> ws = const_shape(Wt);
  int64_t C = channels_of(X), K = ws[0];
  KILN_USER_CHECK(ws[1] == C) << "conv: X has " << C << " channels but W expects " << ws[1];
  bool any_pad = false;
  for (const WindowDim& d : dims) any_pad = any_pad || d.pad_begin > 0 || d.pad_end > 0;
  Tensor P = any_pad ? pad_spatial(X, dims, 0.0, name + ".pad") : X;
  // W as [C, kernel..., K]. The tuner's rules inline every stage that is
  // neither an output nor a reduction, and inlined, this transposition would
  // gather each vector of weights across K rows; written as a sum over one
  // element it is stored once per call instead (C*K*kernel elements, small
  // beside the conv), and the tile reads contiguous vectors.
  std::vector<int64_t> wt_shape = {C};
  for (size_t j = 0; j < r; ++j) wt_shape.push_back(ws[j + 2]);
  wt_shape.push_back(K);
  IterVar one = reduce_axis(Range(0, imm(1)), "one");
  Tensor WT = compute(dims_of(wt_shape), [&](const std::vector<Var>& i) {
    std::vector<Expr> idx = {i.back() + one.var(), i[0]};
    for (size_t j = 0; j < r; ++j) idx.push_back(i[j + 1]);
    return te::sum(Wt(idx), {one});
  }, name + ".wT");
  auto [axes, rc, kidx] = conv_reduce_axes(C, ws, r);
  std::vector<Expr> tshape = {X.shape()[0]};
  for (const WindowDim& d : dims) tshape.push_back(d.out_extent());
  tshape.push_back(imm(K));
  std::vector<std::string> tnames = {"n"};
  for (const std::string& s : spatial_names(r, kOutNames)) tnames.push_back(s);
  tnames.push_back("f");
  Tensor T = compute(tshape, [&](const std::vector<Var>& i) {
    std::vector<Expr> xi = {i[0], rc}, wi = {rc};
    for (size_t j = 0; j < r; ++j) {
      Expr pos = times(i[j + 1], dims[j].stride);
      if (!is_zero(kidx[j])) pos = pos + times(kidx[j], dims[j].dilation);
      xi.push_back(pos);
      wi.push_back(kidx[j]);
    }
    wi.push_back(i.back());
    return te::sum(product ? product(P(xi), WT(wi)) : P(xi) * WT(wi), axes);
  }, name, tnames);
  std::vector<Expr> out = conv_out_shape(X, K, dims);
  std::vector<std::string> names = {"n", "f"};
  for (const std::string& s : spatial_names(r, kOutNames)) names.push_back(s);
  return compute(out, [&](const std::vector<Var>& i) {
    std::vector<Expr> ti = {i[0]};
    for (size_t j = 0; j < r; ++j) ti.push_back(i[j + 2]);
    ti.push_back(i[1]);
    Expr y = T(ti);
    return B.defined() ? y + B(i[1]) : y;
  }, name + (B.defined() ? ".bias" : ".nchw"), names);
}

Tensor add_channel_bias(const Tensor& Y, const Tensor& B, const std::string& name) {
  KILN_USER_CHECK(B.ndim() == 1 && Y.ndim() >= 2) << "add_channel_bias: needs a 1-D bias and an [N, C, ...] tensor";
  return compute(Y.shape(), [&](const std::vector<Var>& i) { return Y(std::vector<Expr>(i.begin(), i.end())) + B(i[1]); }, name);
}

std::vector<int64_t> matmul_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  KILN_USER_CHECK(!a.empty() && !b.empty()) << "matmul: operands must have rank 1 or more, got shapes " << shape_to_string(a) << " and " << shape_to_string(b);
  int64_t ka = a.back(), kb = b.size() == 1 ? b[0] : b[b.size() - 2];
  KILN_USER_CHECK(ka == kb) << "matmul: shapes " << shape_to_string(a) << " and " << shape_to_string(b) << " do not fit: A's last dimension is " << ka
                            << " but B's " << (b.size() == 1 ? "only" : "second-to-last") << " dimension is " << kb;
  std::vector<int64_t> ba(a.begin(), a.end() - std::min<size_t>(a.size(), 2)), bb(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
  std::vector<int64_t> out;
  try {
    out = broadcast_shape(ba, bb);
  } catch (const Error&) {
    KILN_USER_ERROR() << "matmul: the batch dimensions of " << shape_to_string(a) << " and " << shape_to_string(b) << " do not broadcast";
  }
  if (a.size() > 1) out.push_back(a[a.size() - 2]);
  if (b.size() > 1) out.push_back(b.back());
  return out;
}

std::vector<Expr> matmul_shape(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  KILN_USER_CHECK(!a.empty() && !b.empty()) << "matmul: operands must have rank 1 or more, got shapes " << extents_to_string(a) << " and "
                                            << extents_to_string(b);
  Expr ka = a.back(), kb = b.size() == 1 ? b[0] : b[b.size() - 2];
  KILN_USER_CHECK(same_extent(ka, kb)) << "matmul: shapes " << extents_to_string(a) << " and " << extents_to_string(b)
                                       << " do not fit: A's last dimension is " << ka << " but B's "
                                       << (b.size() == 1 ? "only" : "second-to-last") << " dimension is " << kb;
  std::vector<Expr> ba(a.begin(), a.end() - std::min<size_t>(a.size(), 2)), bb(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
  std::vector<Expr> out;
  try {
    out = broadcast_shape(ba, bb);
  } catch (const Error&) {
    KILN_USER_ERROR() << "matmul: the batch dimensions of " << extents_to_string(a) << " and " << extents_to_string(b) << " do not broadcast";
  }
  if (a.size() > 1) out.push_back(a[a.size() - 2]);
  if (b.size() > 1) out.push_back(b.back());
  return out;
}

Tensor matmul_nd(const Tensor& A, const Tensor& B, const std::string& name) {
  return matmul_nd(A, B, name, [](Expr a, Expr b) { return a * b; });
}

Tensor matmul_nd(const Tensor& A, const Tensor& B, const std::string& name, const std::function<Expr(Expr, Expr)>& product) {
  std::vector<Expr> as = A.shape(), bs = B.shape(), out = matmul_shape(as, bs);
  bool a1 = as.size() == 1, b1 = bs.size() == 1;
  size_t nb = out.size() - (a1 ? 0 : 1) - (b1 ? 0 : 1);
  IterVar k = reduce_axis(Range(0, as.back()), "k");
  std::vector<std::string> names;
  for (size_t t = 0; t < nb; ++t) names.push_back(nb == 1 ? "b" : "b" + std::to_string(t));
  if (!a1) names.push_back("i");
  if (!b1) names.push_back("j");
  // The batch indices of an operand with `rank - 2` batch dims, aligned at the last (numpy broadcasting).
  auto batch = [&](const std::vector<Expr>& s, const std::vector<Var>& i) {
    std::vector<Expr> idx;
    size_t own = s.size() - 2;
    for (size_t t = 0; t < own; ++t) idx.push_back(is_one(s[t]) ? imm(0) : Expr(i[nb - own + t]));  // a symbolic dim is never 1 (broadcast.h)
    return idx;
  };
  return compute(out, [&](const std::vector<Var>& i) {
    std::vector<Expr> ai, bi;
    if (!a1) {
      ai = batch(as, i);
      ai.push_back(i[nb]);
    }
    ai.push_back(k.var());
    if (!b1) bi = batch(bs, i);
    bi.push_back(k.var());
    if (!b1) bi.push_back(i.back());
    return te::sum(product(A(ai), B(bi)), {k});
  }, name, names);
}

Tensor gemm(const Tensor& A, const Tensor& B, const Tensor& C, double alpha, double beta, bool trans_a, bool trans_b, const std::string& name,
            const std::function<Expr(Expr, Expr)>& product) {
  KILN_USER_CHECK(A.ndim() == 2 && B.ndim() == 2) << "gemm: A and B must be 2-D, got ranks " << A.ndim() << " and " << B.ndim();
  const std::vector<Expr>&as = A.shape(), &bs = B.shape();
  Expr M = trans_a ? as[1] : as[0], K = trans_a ? as[0] : as[1];
  Expr K2 = trans_b ? bs[1] : bs[0], N = trans_b ? bs[0] : bs[1];
  KILN_USER_CHECK(same_extent(K, K2)) << "gemm: A" << (trans_a ? "^T" : "") << " is " << M << "x" << K << " but B" << (trans_b ? "^T" : "") << " is "
                                      << K2 << "x" << N;
  bool scale = alpha != 1.0, add_c = C.defined() && beta != 0.0;
  IterVar k = reduce_axis(Range(0, K), "k");
  Tensor S = compute({M, N}, [&](const std::vector<Var>& i) {
    Expr a = trans_a ? A(k.var(), i[0]) : A(i[0], k.var());
    Expr b = trans_b ? B(i[1], k.var()) : B(k.var(), i[1]);
    return te::sum(product ? product(a, b) : a * b, {k});
  }, scale || add_c ? name + ".mm" : name, {"i", "j"});
  if (!scale && !add_c) return S;
  if (add_c) {
    const std::vector<Expr>& cs = C.shape();
    bool fits = cs.size() <= 2;
    for (size_t t = 0; fits && t < cs.size(); ++t) fits = is_one(cs[t]) || same_extent(cs[t], t + cs.size() == 2 ? M : N);
    KILN_USER_CHECK(fits) << "gemm: C of shape " << extents_to_string(cs) << " does not broadcast to [" << M << ", " << N << "]";
  }
  Expr a = make_const(S.dtype(), alpha), b = make_const(S.dtype(), beta);
  return compute(S.shape(), [&](const std::vector<Var>& i) {
    Expr y = S(i[0], i[1]);
    if (scale) y = y * a;
    if (add_c) {
      Expr c = C(broadcast_index(C, i));
      y = y + (beta == 1.0 ? c : c * b);
    }
    return y;
  }, name, {"i", "j"});
}

}  // namespace kiln::ops
