// Pooling, reductions, softmax and layer normalisation for the graph
// compiler's operators (graph_nn.h).
#include <algorithm>

#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/broadcast.h"
#include "kiln/ops/graph_nn.h"
#include "kiln/runtime/ndarray.h"
#include "kiln/support/error.h"

namespace kiln::ops {

using te::compute;
using te::reduce_axis;

namespace {

Expr imm(int64_t v) { return index_imm(v); }
std::vector<Expr> dims_of(const std::vector<int64_t>& shape) { return shape_exprs(shape); }

std::vector<Expr> as_exprs(const std::vector<Var>& i) { return std::vector<Expr>(i.begin(), i.end()); }

// The pooled shape [N, C, out...], checking X's rank against the window.
std::vector<Expr> pooled_shape(const Tensor& X, const std::vector<WindowDim>& dims, const char* what) {
  std::vector<Expr> s = X.shape();
  // [N, C, spatial...], or blocked [N, C/b, spatial..., b]: the trailing block passes through.
  KILN_USER_CHECK(!dims.empty() && (s.size() == dims.size() + 2 || s.size() == dims.size() + 3))
      << what << ": X of rank " << s.size() << " for a window of " << dims.size() << " dims";
  for (size_t j = 0; j < dims.size(); ++j) {
    KILN_USER_CHECK(dims[j].is_symbolic() || dims[j].out >= 1) << what << ": the window is larger than the padded input in spatial dim " << j;
    s[j + 2] = dims[j].out_extent();
  }
  return s;
}

// One window of a pool: its reduce axes (extent-1 ones left out) and, per
// output position, the input indices and whether they are inside X.
struct PoolWindow {
  std::vector<IterVar> axes;
  std::vector<Expr> r;  // per spatial dim: the reduce variable or 0

  PoolWindow(const std::vector<WindowDim>& dims) {
    const char* names[3] = {"rz", "ry", "rx"};
    for (size_t j = 0; j < dims.size(); ++j) {
      if (dims[j].kernel > 1) {
        axes.push_back(reduce_axis(Range(0, imm(dims[j].kernel)), dims.size() <= 3 ? names[3 - dims.size() + j] : "r" + std::to_string(j)));
        r.push_back(axes.back().var());
      } else {
        r.push_back(imm(0));
      }
    }
  }

  // X's indices at output i and whether they are inside X (undefined: always).
  std::pair<std::vector<Expr>, Expr> read(const std::vector<WindowDim>& dims, const std::vector<Var>& i) const {
    std::vector<Expr> idx = {i[0], i[1]};
    Expr inside;
    for (size_t j = 0; j < dims.size(); ++j) {
      const WindowDim& d = dims[j];
      Expr h = d.stride == 1 ? Expr(i[j + 2]) : i[j + 2] * imm(d.stride);
      if (!is_zero(r[j])) h = h + (d.dilation == 1 ? r[j] : r[j] * imm(d.dilation));
      if (d.pad_begin > 0) h = h - imm(d.pad_begin);
      // Conditions only where a window can leave X.
      Expr c;
      if (d.pad_begin > 0) c = h >= 0;
      // A symbolic extent with floor rounding can overhang only into a positive end pad; with ceil rounding, past it.
      bool overhang = d.is_symbolic() ? d.pad_end > 0 || d.ceil_symbolic : (d.out - 1) * d.stride + d.span() - d.pad_begin > d.in;
      if (overhang) c = c.defined() ? (c && h < d.in_extent()) : (h < d.in_extent());
      if (c.defined()) inside = inside.defined() ? (inside && c) : c;
      idx.push_back(h);
    }
    for (size_t k = dims.size() + 2; k < i.size(); ++k) idx.push_back(i[k]);  // a channel block
    return {idx, inside};
  }
};

// Reduces `body` over axes, or returns it plain when there is no axis (a 1x1 window).
Expr reduce_or_plain(ReduceOp op, Expr body, const std::vector<IterVar>& axes) {
  if (axes.empty()) return body;
  switch (op) {
    case ReduceOp::Max: return te::max(body, axes);
    case ReduceOp::Min: return te::min(body, axes);
    default: return te::sum(body, axes);
  }
}

std::vector<std::string> nc_names(size_t r, bool blocked = false) {
  std::vector<std::string> n = {"n", "c"};
  const char* s[3] = {"z", "y", "x"};
  for (size_t j = 0; j < r; ++j) n.push_back(r <= 3 ? s[3 - r + j] : "s" + std::to_string(j));
  if (blocked) n.push_back("cb");
  return n;
}

}  // namespace

Tensor max_pool(const Tensor& X, const std::vector<WindowDim>& dims, const std::string& name) {
  std::vector<Expr> out = pooled_shape(X, dims, "max_pool");
  PoolWindow w(dims);
  Expr lowest = reduce_identity(ReduceKind::Max, X.dtype());
  return compute(out, [&](const std::vector<Var>& i) {
    auto [idx, inside] = w.read(dims, i);
    Expr v = inside.defined() ? if_then_else(inside, X(idx), lowest) : X(idx);
    return reduce_or_plain(ReduceOp::Max, v, w.axes);
  }, name, nc_names(dims.size(), out.size() > dims.size() + 2));
}

Tensor avg_pool(const Tensor& X, const std::vector<WindowDim>& dims, bool count_include_pad, const std::string& name) {
  std::vector<Expr> out = pooled_shape(X, dims, "avg_pool");
  for (const WindowDim& d : dims) KILN_USER_CHECK(d.dilation == 1) << "avg_pool: dilations are not supported";
  PoolWindow w(dims);
  Tensor S = compute(out, [&](const std::vector<Var>& i) {
    auto [idx, inside] = w.read(dims, i);
    Expr v = inside.defined() ? if_then_else(inside, X(idx), make_zero(X.dtype())) : X(idx);
    return reduce_or_plain(ReduceOp::Sum, v, w.axes);
  }, name + ".sum", nc_names(dims.size(), out.size() > dims.size() + 2));
  return compute(S.shape(), [&](const std::vector<Var>& i) {
    // The divisor: per dim, the window [start, start + kernel) clipped to X
    // (or to the padded X); a constant factor where no window is clipped.
    int64_t constant = 1;
    Expr varying;
    for (size_t j = 0; j < dims.size(); ++j) {
      const WindowDim& d = dims[j];
      int64_t lo_limit = count_include_pad ? -d.pad_begin : 0;
      Expr hi_limit = count_include_pad ? (d.is_symbolic() ? d.in_symbolic + imm(d.pad_end) : imm(d.in + d.pad_end)) : d.in_extent();
      // A symbolic extent (floor rounding) clips at the end only into a positive end pad that is not counted.
      bool clip_lo = -d.pad_begin < lo_limit;
      bool clip_hi = d.is_symbolic() ? (!count_include_pad && d.pad_end > 0) || d.ceil_symbolic
                                     : (d.out - 1) * d.stride - d.pad_begin + d.kernel > d.in + (count_include_pad ? d.pad_end : 0);
      if (!clip_lo && !clip_hi) {
        constant *= d.kernel;
        continue;
      }
      Expr start = i[j + 2] * imm(d.stride) - imm(d.pad_begin);
      Expr hi = clip_hi ? min(start + imm(d.kernel), hi_limit) : start + imm(d.kernel);
      Expr lo = clip_lo ? max(start, imm(lo_limit)) : start;
      varying = varying.defined() ? varying * (hi - lo) : hi - lo;
    }
    Expr s = S(as_exprs(i));
    if (!varying.defined()) return s * make_const(X.dtype(), 1.0 / static_cast<double>(constant));
    return s / cast(X.dtype(), constant == 1 ? varying : varying * imm(constant));
  }, name, nc_names(dims.size(), out.size() > dims.size() + 2));
}

Tensor reduce(const Tensor& X, ReduceOp op, const std::vector<int>& axes, bool keepdims, const std::string& name) {
  const std::vector<Expr>& s = X.shape();
  int rank = static_cast<int>(s.size());
  std::vector<bool> reduced(rank, false);
  for (int a : axes) {
    KILN_USER_CHECK(a >= 0 && a < rank && !reduced[a]) << "reduce: axes must be distinct and in [0, " << rank << "), got " << a;
    reduced[a] = true;
  }
  if (axes.empty()) return compute(X.shape(), [&](const std::vector<Var>& i) { return X(as_exprs(i)); }, name);
  std::vector<Expr> out, counted;
  std::vector<IterVar> raxes(rank);
  std::vector<IterVar> order;
  for (int d = 0; d < rank; ++d) {
    if (reduced[d]) {
      raxes[d] = reduce_axis(Range(0, s[d]), axes.size() == 1 ? "k" : "k" + std::to_string(order.size()));
      order.push_back(raxes[d]);
      counted.push_back(s[d]);
      if (keepdims) out.push_back(imm(1));
    } else {
      out.push_back(s[d]);
    }
  }
  Tensor R = compute(out, [&](const std::vector<Var>& i) {
    std::vector<Expr> idx;
    size_t o = 0;
    for (int d = 0; d < rank; ++d) {
      if (reduced[d]) {
        idx.push_back(raxes[d].var());
        if (keepdims) ++o;
      } else {
        idx.push_back(i[o++]);
      }
    }
    return reduce_or_plain(op, X(idx), order);
  }, op == ReduceOp::Mean ? name + ".sum" : name);
  if (op != ReduceOp::Mean) return R;
  Expr count = extent_product(counted);
  const int64_t* c = as_const_int(count);
  // A static count multiplies by its reciprocal; a symbolic one (known at run time) divides.
  Expr n = !c ? cast(X.dtype(), count)
              : X.dtype().is_float() ? make_const(X.dtype(), 1.0 / static_cast<double>(*c)) : make_const(X.dtype(), static_cast<double>(*c));
  return compute(R.shape(), [&](const std::vector<Var>& i) {
    Expr v = R(as_exprs(i));
    return X.dtype().is_float() && c ? v * n : v / n;
  }, name);
}

Tensor softmax_axis(const Tensor& X, int axis, const std::string& name) {
  const std::vector<Expr>& s = X.shape();
  int rank = static_cast<int>(s.size());
  KILN_USER_CHECK(axis >= 0 && axis < rank) << "softmax: axis " << axis << " out of range for rank " << rank;
  std::vector<Expr> rows = s;
  rows.erase(rows.begin() + axis);
  // X's indices at a row position `r` (the axis left out) and position k along the axis.
  auto at = [&](const std::vector<Var>& r, Expr k) {
    std::vector<Expr> idx(r.begin(), r.end());
    idx.insert(idx.begin() + axis, k);
    return idx;
  };
  auto row_of = [&](const std::vector<Var>& i) {
    std::vector<Expr> r(i.begin(), i.end());
    r.erase(r.begin() + axis);
    return r;
  };
  IterVar k1 = reduce_axis(Range(0, s[axis]), "k");
  Tensor mx = compute(rows, [&](const std::vector<Var>& r) { return te::max(X(at(r, k1.var())), {k1}); }, name + ".max");
  Tensor ex = compute(X.shape(), [&](const std::vector<Var>& i) { return exp(X(as_exprs(i)) - mx(row_of(i))); }, name + ".exp");
  IterVar k2 = reduce_axis(Range(0, s[axis]), "k");
  Tensor sm = compute(rows, [&](const std::vector<Var>& r) { return te::sum(ex(at(r, k2.var())), {k2}); }, name + ".sum");
  // Times the row's reciprocal, not divided by its sum: one division a row
  // (hoisted out of the row's vector loop) instead of a vector division per
  // element, the slowest vector instruction there is.
  return compute(X.shape(), [&](const std::vector<Var>& i) { return ex(as_exprs(i)) * (make_const(X.dtype(), 1.0) / sm(row_of(i))); }, name);
}

Tensor layer_norm_axes(const Tensor& X, const Tensor& scale, const Tensor& bias, int axis, double eps, const std::string& name) {
  const std::vector<Expr>& s = X.shape();
  int rank = static_cast<int>(s.size());
  KILN_USER_CHECK(axis >= 0 && axis < rank) << "layer_norm: axis " << axis << " out of range for rank " << rank;
  std::vector<Expr> rows(s.begin(), s.begin() + axis), normalized(s.begin() + axis, s.end());
  for (const Tensor& t : {scale, bias}) {
    if (!t.defined()) continue;
    const std::vector<Expr>& ts = t.shape();
    bool fits = ts.size() <= normalized.size();
    for (size_t k = 0; fits && k < ts.size(); ++k) fits = is_one(ts[k]) || same_extent(ts[k], normalized[normalized.size() - ts.size() + k]);
    KILN_USER_CHECK(fits) << "layer_norm: '" << t.name() << "' of shape " << extents_to_string(ts) << " does not broadcast to the normalised shape "
                          << extents_to_string(normalized);
  }
  Expr count = extent_product(normalized);
  const int64_t* c = as_const_int(count);
  // 1 / count: a constant when static, computed once per element from the run-time extents otherwise.
  Expr inv_n = c ? make_const(X.dtype(), 1.0 / static_cast<double>(*c)) : make_const(X.dtype(), 1.0) / cast(X.dtype(), count);
  // Reads of X at row r and reduce axes ks.
  auto reduce_axes = [&]() {
    std::vector<IterVar> ks;
    for (int d = axis; d < rank; ++d) ks.push_back(reduce_axis(Range(0, s[d]), rank - axis == 1 ? "k" : "k" + std::to_string(d - axis)));
    return ks;
  };
  auto at = [&](const std::vector<Var>& r, const std::vector<IterVar>& ks) {
    std::vector<Expr> idx(r.begin(), r.end());
    for (const IterVar& k : ks) idx.push_back(k.var());
    return idx;
  };
  auto row_of = [&](const std::vector<Var>& i) { return std::vector<Expr>(i.begin(), i.begin() + axis); };
  std::vector<IterVar> k1 = reduce_axes();
  Tensor sum = compute(rows, [&](const std::vector<Var>& r) { return te::sum(X(at(r, k1)), k1); }, name + ".sum");
  std::vector<IterVar> k2 = reduce_axes();
  Tensor var = compute(rows, [&](const std::vector<Var>& r) {
    Expr d = X(at(r, k2)) - sum(as_exprs(r)) * inv_n;
    return te::sum(d * d, k2);
  }, name + ".var");
  Expr epsilon = make_const(X.dtype(), eps);
  return compute(X.shape(), [&](const std::vector<Var>& i) {
    std::vector<Expr> r = row_of(i);
    Expr y = (X(as_exprs(i)) - sum(r) * inv_n) * rsqrt(var(r) * inv_n + epsilon);
    if (scale.defined()) y = y * scale(broadcast_index(scale, i));
    if (bias.defined()) y = y + bias(broadcast_index(bias, i));
    return y;
  }, name);
}

}  // namespace kiln::ops
