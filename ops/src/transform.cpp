// Shape and index-remapping computes (kiln/ops/transform.h).
#include "kiln/ops/transform.h"

#include <algorithm>
#include <cmath>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/broadcast.h"
#include "kiln/runtime/ndarray.h"
#include "kiln/support/error.h"

namespace kiln::ops {

using te::compute;
using te::Tensor;

namespace {

std::vector<Expr> as_exprs(const std::vector<Var>& i) { return std::vector<Expr>(i.begin(), i.end()); }

Expr int_imm(int64_t v) { return index_imm(v); }

// Row-major strides of a shape.
std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int k = static_cast<int>(shape.size()) - 2; k >= 0; --k) s[k] = s[k + 1] * shape[k + 1];
  return s;
}

// A run of reshape's: output axes [out_begin, out_end) hold the elements of input axes [in_begin, in_end).
struct ReshapeRun {
  size_t out_begin, out_end, in_begin, in_end;
};

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Expr clamp_index(Expr i, int64_t n) { return max(min(i, int_imm(n - 1)), Expr(0)); }

}  // namespace

Tensor reshape(const Tensor& X, const std::vector<int64_t>& shape, const std::string& name) {
  if (!all_const(X.shape())) return reshape(X, shape_exprs(shape), name);
  std::vector<int64_t> in = const_shape(X);
  KILN_USER_CHECK(numel_of(in) == numel_of(shape)) << "reshape of '" << X.name() << "' from " << shape_to_string(in) << " ("
                                                  << numel_of(in) << " elements) to " << shape_to_string(shape) << " (" << numel_of(shape)
                                                  << " elements)";
  // Runs of axes with equal element counts on both sides ([8, 128, 3072] ->
  // [1024, 3072]: {8, 128} and {1024}, then {3072} and {3072}) map to each
  // other alone, so an axis both sides keep is indexed as itself and only a
  // merged or split run pays a division (what a vector load along it needs).
  struct Run {
    size_t out_begin, out_end, in_begin, in_end;
  };
  std::vector<Run> runs;
  if (numel_of(in) == 0) {
    runs.push_back({0, shape.size(), 0, in.size()});  // nothing is read: one run
  } else {
    for (size_t o = 0, i = 0; o < shape.size() || i < in.size(); o = runs.back().out_end, i = runs.back().in_end) {
      Run r{o, o, i, i};
      int64_t no = 1, ni = 1;
      if (r.out_end < shape.size()) no *= shape[r.out_end++];
      if (r.in_end < in.size()) ni *= in[r.in_end++];
      // The side with the smaller count takes its next axis; the counts left stay equal, so it has one.
      while (no != ni) {
        if (no < ni) no *= shape[r.out_end++];
        else ni *= in[r.in_end++];
      }
      runs.push_back(r);
    }
  }
  return compute(shape_exprs(shape), [&](const std::vector<Var>& i) {
    std::vector<Expr> idx;
    for (const Run& r : runs) {
      // The row-major position within the run, decomposed in X's axes of the run.
      std::vector<int64_t> out_run(shape.begin() + r.out_begin, shape.begin() + r.out_end), in_run(in.begin() + r.in_begin, in.begin() + r.in_end);
      std::vector<int64_t> out_strides = strides_of(out_run), in_strides = strides_of(in_run);
      Expr flat;  // written plainly: an axis kept as it is stays a bare variable (transposed_read_axis looks for one)
      for (size_t k = 0; k < out_run.size(); ++k) {
        if (out_run[k] == 1) continue;
        Expr term = out_strides[k] == 1 ? Expr(i[r.out_begin + k]) : i[r.out_begin + k] * int_imm(out_strides[k]);
        flat = flat.defined() ? flat + term : term;
      }
      if (!flat.defined()) flat = Expr(0);
      for (size_t k = 0; k < in_run.size(); ++k) {
        if (in_run[k] == 1) {
          idx.push_back(Expr(0));
          continue;
        }
        Expr q = in_strides[k] == 1 ? flat : floordiv(flat, int_imm(in_strides[k]));
        idx.push_back(k == 0 ? q : floormod(q, int_imm(in_run[k])));  // a run's leading index never wraps
      }
    }
    return X(idx);
  }, name);
}

// Runs of axes whose extent products are provably equal, each as short as
// it can be (the symbolic form of the static runs above), the rest one run.
static std::vector<ReshapeRun> symbolic_runs(const std::vector<Expr>& out, const std::vector<Expr>& in) {
  auto part = [](const std::vector<Expr>& v, size_t b, size_t e) { return std::vector<Expr>(v.begin() + b, v.begin() + e); };
  std::vector<ReshapeRun> runs;
  size_t o = 0, i = 0;
  while (o < out.size() || i < in.size()) {
    bool found = false;
    for (size_t len = 1; !found && len <= out.size() - o + in.size() - i; ++len) {
      for (size_t a = 0; !found && a <= len; ++a) {
        size_t b = len - a;
        if (o + a > out.size() || i + b > in.size() || !same_product(part(out, o, o + a), part(in, i, i + b))) continue;
        runs.push_back({o, o + a, i, i + b});
        o += a, i += b, found = true;
      }
    }
    if (!found) {
      runs.push_back({o, out.size(), i, in.size()});
      break;
    }
  }
  return runs;
}

Tensor reshape(const Tensor& X, const std::vector<Expr>& shape, const std::string& name, bool counts_checked_at_run_time) {
  std::vector<int64_t> static_shape;
  if (all_const(X.shape()) && all_const(shape, &static_shape)) return reshape(X, static_shape, name);
  const std::vector<Expr>& in = X.shape();
  KILN_USER_CHECK(counts_checked_at_run_time || same_product(in, shape)) << "reshape of '" << X.name() << "' from " << extents_to_string(in) << " to " << extents_to_string(shape)
                                           << ": the element counts cannot be proven equal (a symbolic dimension must appear on both sides)";
  std::vector<ReshapeRun> runs = symbolic_runs(shape, in);
  auto product_after = [](const std::vector<Expr>& v, size_t k, size_t end) { return extent_product(std::vector<Expr>(v.begin() + k + 1, v.begin() + end)); };
  return compute(shape, [&](const std::vector<Var>& i) {
    std::vector<Expr> idx;
    for (const ReshapeRun& r : runs) {
      Expr flat;  // the row-major position within the run
      for (size_t k = r.out_begin; k < r.out_end; ++k) {
        if (is_one(shape[k])) continue;
        Expr stride = product_after(shape, k, r.out_end);
        Expr term = is_one(stride) ? Expr(i[k]) : i[k] * stride;
        flat = flat.defined() ? flat + term : term;
      }
      if (!flat.defined()) flat = Expr(0);
      for (size_t k = r.in_begin; k < r.in_end; ++k) {
        if (is_one(in[k])) {
          idx.push_back(Expr(0));
          continue;
        }
        Expr stride = product_after(in, k, r.in_end);
        Expr q = is_one(stride) ? flat : floordiv(flat, stride);
        idx.push_back(k == r.in_begin ? q : floormod(q, in[k]));
      }
    }
    return X(idx);
  }, name);
}

Tensor permute_dims(const Tensor& X, const std::vector<int>& perm, const std::string& name) {
  const std::vector<Expr>& in = X.shape();
  KILN_USER_CHECK(perm.size() == in.size()) << "transpose of the " << in.size() << "-D tensor '" << X.name() << "' with " << perm.size() << " axes";
  std::vector<Expr> out;
  for (int p : perm) out.push_back(in.at(p));
  return compute(out, [&](const std::vector<Var>& i) {
    std::vector<Expr> idx(in.size());
    for (size_t k = 0; k < perm.size(); ++k) idx[perm[k]] = i[k];
    return X(idx);
  }, name);
}

Tensor squeeze(const Tensor& X, const std::vector<int>& axes, const std::string& name) {
  const std::vector<Expr>& in = X.shape();
  std::vector<Expr> out;
  for (size_t k = 0; k < in.size(); ++k)
    if (std::find(axes.begin(), axes.end(), static_cast<int>(k)) == axes.end()) out.push_back(in[k]);
  return compute(out, [&](const std::vector<Var>& i) {
    std::vector<Expr> idx;
    size_t o = 0;
    for (size_t k = 0; k < in.size(); ++k) idx.push_back(std::find(axes.begin(), axes.end(), static_cast<int>(k)) != axes.end() ? Expr(0) : Expr(i[o++]));
    return X(idx);
  }, name);
}

Tensor expand_dims(const Tensor& X, const std::vector<int>& axes, const std::string& name) {
  const std::vector<Expr>& in = X.shape();
  std::vector<Expr> out;
  size_t rank = in.size() + axes.size(), next = 0;
  for (size_t k = 0; k < rank; ++k) out.push_back(std::find(axes.begin(), axes.end(), static_cast<int>(k)) != axes.end() ? int_imm(1) : in.at(next++));
  return compute(out, [&](const std::vector<Var>& i) {
    std::vector<Expr> idx;
    for (size_t k = 0; k < rank; ++k)
      if (std::find(axes.begin(), axes.end(), static_cast<int>(k)) == axes.end()) idx.push_back(i[k]);
    return X(idx);
  }, name);
}

Tensor concat(const std::vector<Tensor>& Xs, int axis, const std::string& name) {
  KILN_USER_CHECK(!Xs.empty()) << "concat of no tensors";
  std::vector<Expr> out = Xs[0].shape();
  KILN_USER_CHECK(axis >= 0 && axis < static_cast<int>(out.size())) << "concat: axis " << axis << " of rank " << out.size();
  // Inputs of extent 0 on the axis add nothing; the others start at offsets[k]
  // (a sum of the extents before, symbolic when one of them is: a KV cache's past + 1).
  std::vector<Tensor> parts;
  std::vector<Expr> offsets;
  Expr total = int_imm(0);
  for (const Tensor& X : Xs) {
    const std::vector<Expr>& s = X.shape();
    KILN_USER_CHECK(X.dtype() == Xs[0].dtype() && s.size() == out.size()) << "concat: '" << X.name() << "' differs from '" << Xs[0].name() << "' in rank or dtype";
    if (is_const_int(s[axis], 0)) continue;
    parts.push_back(X);
    offsets.push_back(total);
    const int64_t *a = as_const_int(total), *b = as_const_int(s[axis]);
    total = a && b ? int_imm(*a + *b) : arith::simplify(total + s[axis]);
  }
  out[axis] = total;
  if (parts.empty()) parts.push_back(Xs[0]), offsets.push_back(int_imm(0));
  return compute(out, [&](const std::vector<Var>& i) {
    auto read = [&](size_t k) {
      std::vector<Expr> idx = as_exprs(i);
      idx[axis] = is_const_int(offsets[k], 0) ? idx[axis] : idx[axis] - offsets[k];
      return parts[k](idx);
    };
    // if_then_else, not select: each branch reads only inside its own input.
    Expr v = read(parts.size() - 1);
    for (size_t k = parts.size() - 1; k-- > 0;) v = if_then_else(Expr(i[axis]) < offsets[k + 1], read(k), v);
    return v;
  }, name);
}

std::vector<Tensor> split(const Tensor& X, int axis, const std::vector<int64_t>& sizes, const std::string& name) {
  const std::vector<Expr>& in = X.shape();  // the other dims may be symbolic; the split axis is static
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  KILN_USER_CHECK(axis >= 0 && axis < static_cast<int>(in.size()) && is_const_int(in[axis], total))
      << "split of '" << X.name() << "' " << extents_to_string(in) << " on axis " << axis << " into " << shape_to_string(sizes);
  std::vector<Tensor> outs;
  int64_t offset = 0;
  for (size_t p = 0; p < sizes.size(); ++p) {
    std::vector<SliceExtent> ranges;
    for (size_t k = 0; k < in.size(); ++k)
      ranges.push_back(static_cast<int>(k) == axis ? SliceExtent{int_imm(offset), 1, int_imm(sizes[p])} : SliceExtent{int_imm(0), 1, in[k]});
    outs.push_back(strided_slice(X, ranges, name + std::to_string(p)));
    offset += sizes[p];
  }
  return outs;
}

SliceRange slice_range(int64_t dim, int64_t start, int64_t end, int64_t step) {
  KILN_USER_CHECK(step != 0) << "slice step must not be 0";
  if (dim == 0) return {0, step, 0};
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return {start, step, end > start ? (end - start + step - 1) / step : 0};
  }
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  return {start, step, start > end ? (start - end - step - 1) / -step : 0};
}

Tensor strided_slice(const Tensor& X, const std::vector<SliceRange>& ranges, const std::string& name) {
  KILN_USER_CHECK(static_cast<int>(ranges.size()) == X.ndim()) << "slice of the " << X.ndim() << "-D '" << X.name() << "' with " << ranges.size() << " ranges";
  std::vector<int64_t> out;
  for (const SliceRange& r : ranges) out.push_back(r.count);
  return compute(shape_exprs(out), [&](const std::vector<Var>& i) {
    std::vector<Expr> idx;
    for (size_t k = 0; k < ranges.size(); ++k) {
      Expr e = ranges[k].step == 1 ? Expr(i[k]) : i[k] * int_imm(ranges[k].step);
      idx.push_back(ranges[k].start == 0 ? e : e + int_imm(ranges[k].start));
    }
    return X(idx);
  }, name);
}

Tensor strided_slice(const Tensor& X, const std::vector<SliceExtent>& ranges, const std::string& name) {
  KILN_USER_CHECK(static_cast<int>(ranges.size()) == X.ndim()) << "slice of the " << X.ndim() << "-D '" << X.name() << "' with " << ranges.size() << " ranges";
  std::vector<Expr> out;
  for (const SliceExtent& r : ranges) out.push_back(r.count);
  return compute(out, [&](const std::vector<Var>& i) {
    std::vector<Expr> idx;
    for (size_t k = 0; k < ranges.size(); ++k) {
      Expr e = ranges[k].step == 1 ? Expr(i[k]) : i[k] * int_imm(ranges[k].step);
      idx.push_back(is_const_int(ranges[k].start, 0) ? e : e + ranges[k].start);
    }
    return X(idx);
  }, name);
}

Tensor gather(const Tensor& X, const Tensor& I, int axis, const std::string& name) {
  const std::vector<Expr>&xs = X.shape(), &is = I.shape();
  KILN_USER_CHECK(axis >= 0 && axis < static_cast<int>(xs.size())) << "gather: axis " << axis << " of the " << xs.size() << "-D '" << X.name() << "'";
  KILN_USER_CHECK(I.dtype().is_integer()) << "gather: indices '" << I.name() << "' must be integers, not " << I.dtype().str();
  std::vector<Expr> out(xs.begin(), xs.begin() + axis);
  out.insert(out.end(), is.begin(), is.end());
  out.insert(out.end(), xs.begin() + axis + 1, xs.end());
  int q = static_cast<int>(is.size());
  Expr n = xs[axis];
  return compute(out, [&](const std::vector<Var>& i) {
    Expr j = I(std::vector<Expr>(i.begin() + axis, i.begin() + axis + q));
    const int64_t* c = as_const_int(n);
    j = select(j < make_zero(j.dtype()), j + (c ? make_const(j.dtype(), static_cast<double>(*c)) : cast(j.dtype(), n)), j);
    std::vector<Expr> idx(i.begin(), i.begin() + axis);
    Expr k = cast(DataType::Int(32), j);
    idx.push_back(c ? clamp_index(k, *c) : max(min(k, n - 1), Expr(0)));
    idx.insert(idx.end(), i.begin() + axis + q, i.end());
    return X(idx);
  }, name);
}

Tensor broadcast_to(const Tensor& X, const std::vector<int64_t>& shape, const std::string& name) {
  KILN_USER_CHECK(broadcast_shape(const_shape(X), shape) == shape)
      << "'" << X.name() << "' " << shape_to_string(const_shape(X)) << " does not broadcast to " << shape_to_string(shape);
  return compute(shape_exprs(shape), [&](const std::vector<Var>& i) { return X(broadcast_index(X, i)); }, name);
}

Tensor broadcast_to(const Tensor& X, const std::vector<Expr>& shape, const std::string& name) {
  std::vector<int64_t> s;
  if (all_const(X.shape()) && all_const(shape, &s)) return broadcast_to(X, s, name);
  std::vector<Expr> b = broadcast_shape(X.shape(), shape);
  bool same = b.size() == shape.size();
  for (size_t k = 0; same && k < b.size(); ++k) same = same_extent(b[k], shape[k]);
  KILN_USER_CHECK(same) << "'" << X.name() << "' " << extents_to_string(X.shape()) << " does not broadcast to " << extents_to_string(shape);
  return compute(shape, [&](const std::vector<Var>& i) { return X(broadcast_index(X, i)); }, name);
}

Tensor pad(const Tensor& X, const std::vector<int64_t>& before, const std::vector<int64_t>& after, PadMode mode, Expr value,
           const std::string& name) {
  const std::vector<Expr>& in = X.shape();  // symbolic extents allowed; the pads are static
  std::vector<Expr> out;
  KILN_USER_CHECK(before.size() == in.size() && after.size() == in.size()) << "pad of the " << in.size() << "-D '" << X.name() << "' needs "
                                                                          << in.size() << " pads per side";
  for (size_t k = 0; k < in.size(); ++k) {
    const int64_t* n = as_const_int(in[k]);
    if (!n) {  // a crop below zero or an empty reflected axis is the run's to refuse
      out.push_back(before[k] + after[k] == 0 ? in[k] : arith::simplify(in[k] + int_imm(before[k] + after[k])));
      continue;
    }
    out.push_back(int_imm(*n + before[k] + after[k]));
    KILN_USER_CHECK(*n + before[k] + after[k] >= 0) << "pad of '" << X.name() << "' crops dimension " << k << " below zero";
    KILN_USER_CHECK(mode == PadMode::Constant || *n > 0 || *n + before[k] + after[k] == 0) << "pad: reflect and edge modes cannot pad the empty dimension " << k;
  }
  if (mode == PadMode::Constant) value = cast(X.dtype(), value);
  return compute(out, [&](const std::vector<Var>& i) {
    std::vector<Expr> idx;
    Expr inside;
    for (size_t k = 0; k < in.size(); ++k) {
      Expr n = in[k];
      const int64_t* c = as_const_int(n);
      Expr j = before[k] == 0 ? Expr(i[k]) : i[k] - int_imm(before[k]);
      bool can_leave = before[k] > 0 || after[k] > 0;
      if (!can_leave || mode == PadMode::Constant) {
        if (can_leave) {
          Expr in_range = before[k] > 0 ? (after[k] > 0 ? j >= 0 && j < n : j >= 0) : j < n;
          inside = inside.defined() ? inside && in_range : in_range;
        }
      } else if (mode == PadMode::Edge || (c && *c == 1)) {
        j = c ? clamp_index(j, *c) : max(min(j, n - 1), Expr(0));
      } else {  // reflect: period 2(n - 1), mirrored in its second half; symbolic: at least 1, so n = 1 reads index 0
        Expr p = c ? int_imm(2 * (*c - 1)) : max(n * 2 - 2, Expr(1));
        Expr m = floormod(j, p);
        j = select(m < n, m, p - m);
      }
      idx.push_back(j);
    }
    return inside.defined() ? if_then_else(inside, X(idx), value) : X(idx);
  }, name);
}

Expr resize_source_coord(Expr x, int64_t in_len, int64_t out_len, double scale, CoordMode mode) {
  // In float64, as the ONNX reference computes: rounding ties must land where it lands.
  x = cast(DataType::Float(64), x);
  auto f = [](double v) { return make_const(DataType::Float(64), v); };
  switch (mode) {
    case CoordMode::HalfPixel: return (x + f(0.5)) / f(scale) - f(0.5);
    case CoordMode::PytorchHalfPixel: return out_len > 1 ? (x + f(0.5)) / f(scale) - f(0.5) : f(0);
    case CoordMode::AlignCorners: return out_len > 1 ? x * f(static_cast<double>(in_len - 1)) / f(static_cast<double>(out_len - 1)) : f(0);
    case CoordMode::Asymmetric: return x / f(scale);
  }
  return x;
}

Tensor resize_nearest(const Tensor& X, const std::vector<int64_t>& out_shape, const std::vector<double>& scales, CoordMode coord,
                      NearestMode nearest, const std::string& name) {
  std::vector<int64_t> in = const_shape(X);
  KILN_USER_CHECK(out_shape.size() == in.size() && scales.size() == in.size()) << "resize of the " << in.size() << "-D '" << X.name() << "'";
  return compute(shape_exprs(out_shape), [&](const std::vector<Var>& i) {
    std::vector<Expr> idx;
    for (size_t k = 0; k < in.size(); ++k) {
      if (in[k] == out_shape[k] && scales[k] == 1.0) {
        idx.push_back(i[k]);
        continue;
      }
      Expr x = resize_source_coord(i[k], in[k], out_shape[k], scales[k], coord);
      Expr half = make_const(DataType::Float(64), 0.5);
      switch (nearest) {
        case NearestMode::RoundPreferFloor: x = ceil(x - half); break;  // ties go down
        case NearestMode::RoundPreferCeil: x = floor(x + half); break;
        case NearestMode::Floor: x = floor(x); break;
        case NearestMode::Ceil: x = ceil(x); break;
      }
      idx.push_back(clamp_index(cast(DataType::Int(32), x), in[k]));
    }
    return X(idx);
  }, name);
}

Tensor resize_bilinear(const Tensor& X, const std::vector<int64_t>& out_shape, const std::vector<double>& scales, CoordMode coord,
                       const std::string& name) {
  std::vector<int64_t> in = const_shape(X);
  int r = static_cast<int>(in.size());
  KILN_USER_CHECK(r >= 2 && out_shape.size() == in.size() && scales.size() == in.size()) << "bilinear resize of the " << r << "-D '" << X.name() << "'";
  KILN_USER_CHECK(X.dtype().is_float()) << "bilinear resize of '" << X.name() << "' needs a float tensor, not " << X.dtype().str();
  for (int k = 0; k < r - 2; ++k)
    KILN_USER_CHECK(in[k] == out_shape[k]) << "bilinear resize of '" << X.name() << "' changes dimension " << k << "; only the last two may change";
  DataType t = X.dtype();
  return compute(shape_exprs(out_shape), [&](const std::vector<Var>& i) {
    // Per resized axis: the two neighbours (clamped: edge padding) and the weight of the second.
    Expr lo[2], hi[2], w[2];
    for (int a = 0; a < 2; ++a) {
      int k = r - 2 + a;
      Expr x = resize_source_coord(i[k], in[k], out_shape[k], scales[k], coord);
      Expr fl = floor(x);
      Expr x0 = cast(DataType::Int(32), fl);
      lo[a] = clamp_index(x0, in[k]);
      hi[a] = clamp_index(x0 + 1, in[k]);
      w[a] = cast(t, x - fl);
    }
    auto at = [&](Expr y, Expr x) {
      std::vector<Expr> idx(i.begin(), i.end() - 2);
      idx.push_back(y);
      idx.push_back(x);
      return X(idx);
    };
    Expr one = make_const(t, 1.0);
    Expr top = at(lo[0], lo[1]) * (one - w[1]) + at(lo[0], hi[1]) * w[1];
    Expr bottom = at(hi[0], lo[1]) * (one - w[1]) + at(hi[0], hi[1]) * w[1];
    return top * (one - w[0]) + bottom * w[0];
  }, name);
}

Tensor fill(const std::vector<int64_t>& shape, Expr value, const std::string& name) {
  return compute(shape_exprs(shape), [&](const std::vector<Var>&) { return value; }, name);
}

Tensor arange(double start, double delta, int64_t n, DataType dtype, const std::string& name) {
  return compute(shape_exprs({n}), [&](const std::vector<Var>& i) {
    return make_const(dtype, start) + cast(dtype, i[0]) * make_const(dtype, delta);
  }, name);
}

}  // namespace kiln::ops
