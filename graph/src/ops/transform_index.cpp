// Index-selecting operators: Concat, Split, Slice, Gather, Pad. Concat,
// Slice, Gather on int64 are the shape arithmetic of exported models (mostly
// constant-folded, through the same computes and a plain kernel).
#include <limits>

#include "kiln/graph/autodiff.h"
#include "kiln/ir/op.h"
#include "kiln/support/error.h"
#include "op_helpers.h"
#include "sharding_rules.h"
#include "transform_common.h"

namespace kiln::graph::ops_detail {
namespace {

const TensorType& in_type(const OpCall& call) { return call.input_types[0]; }

// ---- Concat ---------------------------------------------------------------

int concat_axis(const OpCall& call) {
  const TensorType& first = in_type(call);
  if (first.ndim() == 0) call.fail("cannot concatenate scalars (input 0 is " + first.str() + "); Unsqueeze them first");
  int axis = normalize_axis(call, call.attrs.get_int("axis"), first.ndim());
  for (int i = 1; i < call.num_inputs(); ++i) {
    if (!call.has_input(i)) call.fail("input " + std::to_string(i) + " is missing");
    const TensorType& t = call.input_types[i];
    if (t.dtype != first.dtype) call.fail("input " + std::to_string(i) + " is " + t.str() + " but input 0 is " + first.str() + "; dtypes must agree");
    bool same = t.ndim() == first.ndim();
    int k = 0;
    for (; same && k < t.ndim(); ++k) same = k == axis || t.shape[k] == first.shape[k];
    if (!same)
      call.fail("input " + std::to_string(i) + " is " + t.str() + " but input 0 is " + first.str() + "; all dimensions but axis " +
                std::to_string(axis) + " must agree" + (t.ndim() == first.ndim() ? same_name_hint(t.shape[k - 1], first.shape[k - 1]) : ""));
  }
  return axis;
}

// Each input's gradient is its slice of the output's.
std::vector<Value> concat_grad(GradBuilder& b, const std::vector<Value>& g) {
  int axis = concat_axis(b.call());
  std::vector<Value> out;
  int64_t at = 0;
  for (int i = 0; i < b.num_inputs(); ++i) {
    int64_t n = b.in_type(i).shape[axis];
    out.push_back(b.wants(i) ? b.op("Slice", {g[0], b.ints({at}), b.ints({at + n}), b.ints({axis})}) : Value());
    at += n;
  }
  return out;
}

void register_concat() {
  OpDef d;
  d.name = "Concat";
  d.doc = "Concat(inputs...): joins the inputs along `axis`";
  d.min_inputs = 1;
  d.max_inputs = std::numeric_limits<int>::max();
  d.attrs = {{"axis", AttrKind::Int, std::nullopt}};
  d.pattern = Pattern::Injective;
  d.infer = [](const OpCall& call) {
    int axis = concat_axis(call);
    TensorType t = in_type(call);
    for (int i = 1; i < call.num_inputs(); ++i) t.shape[axis] += call.input_types[i].shape[axis];
    return std::vector<TensorType>{t};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::concat(in, concat_axis(call), "concat")};
  };
  d.gradient = concat_grad;
  d.sharding = replicated_rule();
  register_op(std::move(d));
}

// ---- Split ----------------------------------------------------------------

std::vector<int64_t> split_sizes(const OpCall& call, int* axis_out) {
  const TensorType& in = in_type(call);
  int axis = *axis_out = normalize_axis(call, call.attrs.get_int("axis"), in.ndim());
  int64_t dim = in.shape[axis], n = call.attrs.get_int("num_outputs");
  if (input_given(call, 1)) {
    std::vector<int64_t> sizes = call.constant_ints(1, "split");
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) call.fail("split " + shape_to_string(sizes) + " has a negative size");
      total += s;
    }
    if (total != dim)
      call.fail("split " + shape_to_string(sizes) + " sums to " + std::to_string(total) + " but axis " + std::to_string(axis) + " of " + in.str() +
                " has " + std::to_string(dim));
    if (n != 0 && n != static_cast<int64_t>(sizes.size()))
      call.fail("num_outputs is " + std::to_string(n) + " but split " + shape_to_string(sizes) + " makes " + std::to_string(sizes.size()));
    return sizes;
  }
  if (n <= 0)
    call.fail("without the split input, the number of outputs must be given by the attribute num_outputs (the importer sets it from the node's outputs)");
  // Equal parts; when they do not divide, ceil-sized parts and a smaller last one (opset 18's rule).
  int64_t part = (dim + n - 1) / n, last = dim - part * (n - 1);
  if (last < 0)
    call.fail("cannot split axis " + std::to_string(axis) + " of " + in.str() + " into " + std::to_string(n) + " parts of " + std::to_string(part));
  std::vector<int64_t> sizes(n, part);
  sizes.back() = last;
  return sizes;
}

// The pieces' gradients joined back (zeros for a piece the loss does not reach).
std::vector<Value> split_grad(GradBuilder& b, const std::vector<Value>& g) {
  int axis;
  split_sizes(b.call(), &axis);
  std::vector<Value> parts;
  for (int k = 0; k < b.node().num_outputs(); ++k) {
    if (g[k].defined()) {
      parts.push_back(g[k]);
      continue;
    }
    const TensorType& t = b.node().types[k];
    parts.push_back(b.expand(b.scalar(0, t.dtype), t.shape));
  }
  return {parts.size() == 1 ? parts[0] : b.op("Concat", parts, Attrs({{"axis", int64_t(axis)}}))};
}

void register_split() {
  OpDef d;
  d.name = "Split";
  d.doc = "Split(input, split?): pieces along `axis` of the sizes in `split`; without it, `num_outputs` equal pieces. num_outputs is kiln's "
          "attribute (ONNX's from opset 18), set by the importer from the node's output count; 0 means the split input must be given";
  d.min_inputs = 1;
  d.max_inputs = 2;
  d.attrs = {{"axis", AttrKind::Int, AttrValue(int64_t(0))}, {"num_outputs", AttrKind::Int, AttrValue(int64_t(0))}};
  d.pattern = Pattern::Injective;
  d.const_inputs = {1};
  d.infer = [](const OpCall& call) {
    int axis;
    std::vector<TensorType> out;
    for (int64_t s : split_sizes(call, &axis)) {
      out.push_back(in_type(call));
      out.back().shape[axis] = s;
    }
    return out;
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    int axis;
    std::vector<int64_t> sizes = split_sizes(call, &axis);
    return ops::split(in[0], axis, sizes, "split");
  };
  d.gradient = split_grad;
  d.sharding = replicated_rule();
  register_op(std::move(d));
}

// ---- Slice ----------------------------------------------------------------

// One axis of a slice whose extent may be symbolic; the bounds are constants.
struct DimSlice {
  Dim start;
  int64_t step = 1;
  Dim count;
};

// A constant bound on an axis of symbolic extent n, as ONNX's rules resolve
// it: negative counts from the end, then clamped to [lo, n + hi_offset].
// Bounds past int32 (INT64_MAX as "to the end") are the end: dims are int32.
Dim clamp_bound(int64_t b, const Dim& n, int64_t lo, int64_t hi_offset) {
  constexpr int64_t kBig = std::numeric_limits<int32_t>::max();
  Dim hi = dim_add(n, hi_offset);
  if (b >= kBig) return hi;
  if (b <= -kBig) return Dim(lo);
  // With a step > 0 (lo 0, hi n) one side of the clamp always holds, as n >= 0: min(b, n) or max(0, n + b).
  if (lo == 0 && hi_offset == 0) return b == 0 ? Dim(0) : b > 0 ? dim_min(Dim(b), n) : dim_max(Dim(0), dim_add(n, b));
  Dim v = b < 0 ? dim_add(n, b) : Dim(b);
  return dim_max(Dim(lo), dim_min(v, hi));
}

// slice_range on a symbolic axis (step != 0): the count is max(0, ceil(span / |step|)).
DimSlice symbolic_slice(const Dim& n, int64_t start, int64_t end, int64_t step) {
  constexpr int64_t kBig = std::numeric_limits<int32_t>::max();
  if (step > 0) {
    Dim s = clamp_bound(start, n, 0, 0), e = clamp_bound(end, n, 0, 0);
    // The elements in [s, e), in closed forms where one is known (n >= 0): to the end from start >= 0,
    // max(n - start, 0); the last -start, min(n, -start); from 0 to end >= 0, min(end, n).
    Dim span = end >= kBig && start == 0 ? n
               : end >= kBig && start > 0 ? dim_max(dim_sub(n, start), 0)
               : end >= kBig              ? dim_min(n, -start)
               : start == 0 && end >= 0   ? dim_min(Dim(end), n)
                                          : dim_max(Dim(0), dim_sub(e, s));
    return {s, step, step == 1 ? span : dim_floordiv(dim_add(span, step - 1), step)};
  }
  Dim s = clamp_bound(start, n, 0, -1), e = clamp_bound(end, n, -1, -1);
  // min with n: an empty axis (n = 0) clamps s to 0 and e to -1, which would count 1.
  return {s, step, dim_min(n, dim_max(Dim(0), dim_floordiv(dim_add(dim_sub(s, e), -step - 1), -step)))};
}

std::vector<DimSlice> slice_ranges(const OpCall& call) {
  const TensorType& in = in_type(call);
  std::vector<int64_t> starts = call.constant_ints(1, "starts"), ends = call.constant_ints(2, "ends");
  if (starts.size() != ends.size())
    call.fail("starts " + shape_to_string(starts) + " and ends " + shape_to_string(ends) + " differ in length");
  std::vector<int64_t> axes, steps(starts.size(), 1);
  if (call.has_input(3)) {
    axes = call.constant_ints(3, "axes");
  } else {
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  }
  if (call.has_input(4)) steps = call.constant_ints(4, "steps");
  if (axes.size() != starts.size() || steps.size() != starts.size())
    call.fail("starts, ends, axes and steps must have one entry per sliced axis; got " + std::to_string(starts.size()) + ", " +
              std::to_string(ends.size()) + ", " + std::to_string(axes.size()) + " and " + std::to_string(steps.size()));
  std::vector<DimSlice> ranges;
  for (const Dim& d : in.shape) ranges.push_back({0, 1, d});
  normalize_axes(call, axes, in.ndim());  // checks range and repeats; it sorts, so pair axes and bounds one at a time
  for (size_t k = 0; k < axes.size(); ++k) {
    int a = normalize_axis(call, axes[k], in.ndim());
    if (steps[k] == 0) call.fail("steps " + shape_to_string(steps) + " has a 0 (axis " + std::to_string(a) + ")");
    if (in.shape[a].is_symbolic()) {
      ranges[a] = symbolic_slice(in.shape[a], starts[k], ends[k], steps[k]);
      continue;
    }
    ops::SliceRange r = ops::slice_range(in.shape[a], starts[k], ends[k], steps[k]);
    ranges[a] = {r.start, r.step, r.count};
  }
  return ranges;
}

// kiln.SliceGrad(dY): zeros of input_shape with dY written where the slice read
// (starts and steps per dim, resolved); an index map, so it fuses like Slice.
void register_slice_grad() {
  OpDef d;
  d.name = "kiln.SliceGrad";
  d.doc = "Slice's input gradient: dY placed at the sliced elements of zeros of input_shape";
  d.attrs = {{"input_shape", AttrKind::Ints, std::nullopt}, {"starts", AttrKind::Ints, std::nullopt}, {"steps", AttrKind::Ints, std::nullopt}};
  d.pattern = Pattern::Injective;
  d.infer = [](const OpCall& call) {
    const auto& in = call.attrs.get_ints("input_shape");
    if (in.size() != call.input_types[0].shape.size() || call.attrs.get_ints("starts").size() != in.size() || call.attrs.get_ints("steps").size() != in.size())
      call.fail("input_shape, starts, steps and dY " + call.input_types[0].str() + " differ in rank");
    return std::vector<TensorType>{TensorType{in, call.input_types[0].dtype}};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    const auto &shape = call.attrs.get_ints("input_shape"), &starts = call.attrs.get_ints("starts"), &steps = call.attrs.get_ints("steps");
    const auto& counts = call.input_types[0].shape;
    te::Tensor dY = in[0];
    return std::vector<te::Tensor>{te::compute(ops::shape_exprs(shape), [&](const std::vector<Var>& i) {
      std::vector<Expr> at;
      Expr hit;
      for (size_t k = 0; k < shape.size(); ++k) {
        if (starts[k] == 0 && steps[k] == 1 && counts[k] == shape[k]) {
          at.push_back(i[k]);
          continue;
        }
        Expr num = i[k] - ops::index_imm(starts[k]);
        Expr idx = steps[k] == 1 ? num : floordiv(num, ops::index_imm(steps[k]));
        Expr c = idx >= 0 && idx < ops::index_imm(counts[k]);
        if (steps[k] != 1) c = c && floormod(num, ops::index_imm(steps[k])) == 0;
        hit = hit.defined() ? (hit && c) : c;
        at.push_back(idx);
      }
      return hit.defined() ? if_then_else(hit, dY(at), make_zero(dY.dtype())) : dY(at);
    }, "slice_grad")};
  };
  d.sharding = replicated_rule();
  register_op(std::move(d));
}

std::vector<Value> slice_grad(GradBuilder& b, const std::vector<Value>& g) {
  std::vector<int64_t> starts, steps;
  for (const DimSlice& r : slice_ranges(b.call())) {
    starts.push_back(r.start);
    steps.push_back(r.step);
  }
  return {b.op("kiln.SliceGrad", {g[0]}, Attrs({{"input_shape", b.in_type(0).shape}, {"starts", starts}, {"steps", steps}}))};
}

void register_slice() {
  OpDef d;
  d.name = "Slice";
  d.doc = "Slice(data, starts, ends, axes?, steps?): numpy slicing; negative indices count from the end, bounds clamp, steps may be negative";
  d.min_inputs = 3;
  d.max_inputs = 5;
  d.pattern = Pattern::Injective;
  d.const_inputs = {1, 2, 3, 4};
  d.infer = [](const OpCall& call) {
    TensorType t = in_type(call);
    std::vector<DimSlice> r = slice_ranges(call);
    for (size_t k = 0; k < r.size(); ++k) t.shape[k] = r[k].count;
    return std::vector<TensorType>{t};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    std::vector<DimSlice> r = slice_ranges(call);
    if (in_type(call).is_static()) {
      std::vector<ops::SliceRange> ranges;
      for (const DimSlice& s : r) ranges.push_back({s.start, s.step, s.count});
      return std::vector<te::Tensor>{ops::strided_slice(in[0], ranges, "slice")};
    }
    std::vector<ops::SliceExtent> ranges;
    for (const DimSlice& s : r) ranges.push_back({s.start.expr(), s.step, s.count.expr()});
    return std::vector<te::Tensor>{ops::strided_slice(in[0], ranges, "slice")};
  };
  d.gradient = slice_grad;
  d.sharding = replicated_rule();
  register_op(std::move(d));
}

// ---- Gather ---------------------------------------------------------------

int gather_axis(const OpCall& call) {
  const TensorType& data = in_type(call);
  const TensorType& idx = call.input_types[1];
  if (data.ndim() == 0) call.fail("cannot gather from the scalar " + data.str());
  int axis = normalize_axis(call, call.attrs.get_int("axis"), data.ndim());
  if (!idx.dtype.is_integer()) call.fail("indices are " + idx.str() + "; they must be int32 or int64");
  if (call.constants[1] && data.shape[axis].is_static()) {  // constant indices: check them now (a kernel cannot report them; a symbolic axis clamps)
    int64_t n = data.shape[axis];
    for (int64_t i : call.constant_ints(1, "indices"))
      if (i < -n || i >= n)
        call.fail("index " + std::to_string(i) + " is out of range for axis " + std::to_string(axis) + " of " + data.str() + " (valid: " +
                  std::to_string(-n) + " to " + std::to_string(n - 1) + ")");
  }
  return axis;
}

// The data's gradient is kiln.GatherGrad (gather_grad.cpp): a scatter-add.
std::vector<Value> gather_grad(GradBuilder& b, const std::vector<Value>& g) {
  int axis = gather_axis(b.call());
  return {b.op("kiln.GatherGrad", {b.in(1), g[0]}, Attrs({{"axis", int64_t(axis)}, {"data_shape", b.in_type(0).shape}}))};
}

// Gather on axis 0 of a table (embedding): the indices' splits carry; the
// table keeps a split of its last dim. Other gathers: replicated.
RuleOutput gather_propagate(const RuleInput& r) {
  if (r.node.attrs.get_int_or("axis", 0) != 0 || input_type(r, 0).ndim() != 2) return replicated_rule().propagate(r);
  ShardingSpec table = seen(r, 0), idx = seen(r, 1);
  ShardingSpec out{idx.dims, {}};
  Axes last = table.dims[1];
  std::vector<Axes*> groups;
  for (auto& d : out.dims) groups.push_back(&d);
  groups.push_back(&last);
  dedupe(groups);
  out.dims.push_back(last);
  RuleOutput o = with_inputs_default(r);
  o.in[0].dims[1] = last;
  o.in[1] = ShardingSpec{std::vector<Axes>(out.dims.begin(), out.dims.end() - 1), {}};
  o.out.push_back(out);
  return o;
}

void register_gather() {
  OpDef d;
  d.name = "Gather";
  d.doc = "Gather(data, indices): numpy's take along `axis`; negative indices count from the end (out-of-range runtime indices clamp)";
  d.min_inputs = d.max_inputs = 2;
  d.attrs = {{"axis", AttrKind::Int, AttrValue(int64_t(0))}};
  d.pattern = Pattern::Injective;
  d.infer = [](const OpCall& call) {
    int axis = gather_axis(call);
    const TensorType& data = in_type(call);
    Shape shape(data.shape.begin(), data.shape.begin() + axis);
    shape.insert(shape.end(), call.input_types[1].shape.begin(), call.input_types[1].shape.end());
    shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
    return std::vector<TensorType>{TensorType{shape, data.dtype}};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::gather(in[0], in[1], gather_axis(call), "gather")};
  };
  d.gradient = gather_grad;
  d.sharding = {"gather", gather_propagate, nullptr};
  register_op(std::move(d));
}

// ---- Pad ------------------------------------------------------------------

struct PadSpec {
  std::vector<int64_t> before, after;
  ops::PadMode mode;
  double value = 0;
};

PadSpec pad_spec(const OpCall& call) {
  const TensorType& in = in_type(call);
  PadSpec p;
  const std::string& mode = call.attrs.get_string("mode");
  if (mode == "constant") p.mode = ops::PadMode::Constant;
  else if (mode == "reflect") p.mode = ops::PadMode::Reflect;
  else if (mode == "edge") p.mode = ops::PadMode::Edge;
  else call.fail("mode '" + mode + "' is not supported (constant, reflect or edge)");
  std::vector<int64_t> pads = call.constant_ints(1, "pads");
  std::vector<int> axes;
  if (input_given(call, 3)) {
    std::vector<int64_t> raw = call.constant_ints(3, "axes");
    normalize_axes(call, raw, in.ndim());  // checks range and repeats; pads follow the order given, so keep it
    for (int64_t a : raw) axes.push_back(normalize_axis(call, a, in.ndim()));
  } else {
    for (int k = 0; k < in.ndim(); ++k) axes.push_back(k);
  }
  if (pads.size() != 2 * axes.size())
    call.fail("pads " + shape_to_string(pads) + " has " + std::to_string(pads.size()) + " entries; " + in.str() + " needs " +
              std::to_string(2 * axes.size()) + " (all begins, then all ends)");
  p.before.assign(in.ndim(), 0);
  p.after.assign(in.ndim(), 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    p.before[axes[k]] = pads[k];
    p.after[axes[k]] = pads[k + axes.size()];
  }
  for (int k = 0; k < in.ndim(); ++k) {
    if (in.shape[k].is_symbolic()) continue;  // a symbolic extent is padded as it comes (the pads are static)
    if (in.shape[k] + p.before[k] + p.after[k] < 0) call.fail("pads " + shape_to_string(pads) + " crop dimension " + std::to_string(k) + " of " + in.str() + " below zero");
    if (p.mode != ops::PadMode::Constant && in.shape[k] == 0 && (p.before[k] > 0 || p.after[k] > 0))
      call.fail(mode + " padding of the empty dimension " + std::to_string(k) + " of " + in.str());
  }
  if (input_given(call, 2)) {
    if (call.input_types[2].numel() != 1) call.fail("constant_value must be a scalar, got " + call.input_types[2].str());
    p.value = constant_floats(call, 2, "constant_value")[0];
  }
  return p;
}

std::vector<Value> pad_grad(GradBuilder& b, const std::vector<Value>& g) {
  OpCall call = b.call();
  PadSpec p = pad_spec(call);
  if (p.mode != ops::PadMode::Constant) call.fail("has no gradient in " + call.attrs.get_string("mode") + " mode (only constant padding is differentiated)");
  std::vector<int64_t> starts, ends, axes;
  for (int k = 0; k < b.in_type(0).ndim(); ++k) {
    if (p.before[k] < 0 || p.after[k] < 0) call.fail("has no gradient with negative pads (cropping); use Slice");
    starts.push_back(p.before[k]);
    ends.push_back(p.before[k] + b.in_type(0).shape[k]);
    axes.push_back(k);
  }
  return {b.op("Slice", {g[0], b.ints(starts), b.ints(ends), b.ints(axes)})};
}

void register_pad() {
  OpDef d;
  d.name = "Pad";
  d.doc = "Pad(data, pads, constant_value?, axes?): pads [begins..., ends...] (negative crops); mode constant, reflect or edge";
  d.min_inputs = 2;
  d.max_inputs = 4;
  d.attrs = {{"mode", AttrKind::String, AttrValue(std::string("constant"))}};
  d.pattern = Pattern::Injective;
  d.const_inputs = {1, 2, 3};
  d.infer = [](const OpCall& call) {
    PadSpec p = pad_spec(call);
    TensorType t = in_type(call);
    for (int k = 0; k < t.ndim(); ++k) t.shape[k] += p.before[k] + p.after[k];
    return std::vector<TensorType>{t};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    PadSpec p = pad_spec(call);
    return std::vector<te::Tensor>{ops::pad(in[0], p.before, p.after, p.mode, make_const(in_type(call).dtype, p.value), "pad")};
  };
  d.gradient = pad_grad;
  d.sharding = replicated_rule();
  register_op(std::move(d));
}

const bool registered = [] {
  register_concat();
  register_split();
  register_slice();
  register_slice_grad();
  register_gather();
  register_pad();
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
