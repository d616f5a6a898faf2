// Window attributes and tap arithmetic of the gradient ops (window_grad.h).
#include "window_grad.h"

#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"

namespace kiln::graph::ops_detail {

Attrs window_grad_attrs(const std::vector<ops::WindowDim>& dims) {
  std::vector<int64_t> kernel, strides, dilations, pads(2 * dims.size());
  for (size_t j = 0; j < dims.size(); ++j) {
    kernel.push_back(dims[j].kernel);
    strides.push_back(dims[j].stride);
    dilations.push_back(dims[j].dilation);
    pads[j] = dims[j].pad_begin;
    pads[j + dims.size()] = dims[j].pad_end;
  }
  return Attrs({{"kernel_shape", kernel}, {"strides", strides}, {"dilations", dilations}, {"pads", pads}});
}

std::vector<AttrSpec> window_grad_specs(bool input_shape) {
  std::vector<AttrSpec> s;
  for (const char* n : {"kernel_shape", "strides", "dilations", "pads"}) s.push_back({n, AttrKind::Ints, std::nullopt});
  if (input_shape) s.push_back({"input_shape", AttrKind::Ints, std::nullopt});
  return s;
}

std::vector<ops::WindowDim> grad_windows(const OpCall& call, const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  const auto &k = call.attrs.get_ints("kernel_shape"), &s = call.attrs.get_ints("strides"), &d = call.attrs.get_ints("dilations"),
             &p = call.attrs.get_ints("pads");
  size_t n = k.size();
  if (s.size() != n || d.size() != n || p.size() != 2 * n || in.size() != n || out.size() != n)
    call.fail("kernel_shape, strides, dilations, pads and the tensors' spatial dims disagree in number");
  std::vector<ops::WindowDim> dims(n);
  for (size_t j = 0; j < n; ++j) dims[j] = ops::WindowDim{in[j], k[j], s[j], d[j], p[j], p[j + n], out[j]};
  return dims;
}

Taps::Taps(const std::vector<ops::WindowDim>& dims) {
  for (size_t j = 0; j < dims.size(); ++j) {
    axes.push_back(te::reduce_axis(Range(0, ops::index_imm(dims[j].kernel)), "t" + std::to_string(j)));
    t.push_back(axes.back().var());
  }
}

Expr Taps::flat(const std::vector<ops::WindowDim>& dims) const {
  Expr f = t[0];
  for (size_t j = 1; j < dims.size(); ++j) f = f * ops::index_imm(dims[j].kernel) + t[j];
  return f;
}

Expr and_maybe(const Expr& a, const Expr& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return a && b;
}

std::pair<std::vector<Expr>, Expr> forward_taps(const std::vector<ops::WindowDim>& dims, const std::vector<Expr>& o, const std::vector<Expr>& t) {
  std::vector<Expr> h;
  Expr inside;
  for (size_t j = 0; j < dims.size(); ++j) {
    const ops::WindowDim& d = dims[j];
    Expr x = o[j] * ops::index_imm(d.stride) + t[j] * ops::index_imm(d.dilation) - ops::index_imm(d.pad_begin);
    if (d.pad_begin > 0) inside = and_maybe(inside, x >= 0);
    if ((d.out - 1) * d.stride + d.span() - d.pad_begin > d.in) inside = and_maybe(inside, x < ops::index_imm(d.in));
    h.push_back(x);
  }
  return {h, inside};
}

std::pair<std::vector<Expr>, Expr> reverse_taps(const std::vector<ops::WindowDim>& dims, const std::vector<Expr>& h, const std::vector<Expr>& t) {
  std::vector<Expr> o;
  Expr valid;
  for (size_t j = 0; j < dims.size(); ++j) {
    const ops::WindowDim& d = dims[j];
    // h = o * stride + t * dilation - pad_begin, solved for o.
    Expr num = h[j] + ops::index_imm(d.pad_begin) - t[j] * ops::index_imm(d.dilation);
    Expr c = num >= 0 && num < ops::index_imm(d.out * d.stride);
    if (d.stride > 1) c = c && floormod(num, ops::index_imm(d.stride)) == 0;
    valid = and_maybe(valid, c);
    o.push_back(d.stride > 1 ? floordiv(num, ops::index_imm(d.stride)) : num);
  }
  return {o, valid};
}

}  // namespace kiln::graph::ops_detail
