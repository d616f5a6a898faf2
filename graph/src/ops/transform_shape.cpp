// Shape operators: Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Expand,
// and the shape-arithmetic sources Shape, ConstantOfShape and Range. The
// compile-time inputs (Reshape's shape, Squeeze's axes ...) are constants
// (OpDef::const_inputs); the computes are kiln/ops/transform.h's.
#include <cmath>
#include <limits>

#include "kiln/graph/autodiff.h"
#include "kiln/ops/broadcast.h"
#include "kiln/support/error.h"
#include "op_helpers.h"
#include "sharding_rules.h"
#include "transform_common.h"

namespace kiln::graph::ops_detail {
namespace {

const TensorType& in_type(const OpCall& call) { return call.input_types[0]; }

TensorType with_shape(const OpCall& call, Shape shape) { return TensorType{std::move(shape), in_type(call).dtype}; }

std::vector<TensorType> one(TensorType t) { return {std::move(t)}; }

// ---- gradients: a reshaping op's gradient is the output's reshaped back.

std::vector<Value> reshape_back(GradBuilder& b, const std::vector<Value>& g) { return {b.reshape(g[0], b.in_type(0).shape)}; }
std::vector<Value> expand_grad(GradBuilder& b, const std::vector<Value>& g) { return {b.sum_to(g[0], b.in_type(0).shape)}; }
std::vector<int> transpose_perm(const OpCall& call);
std::vector<Value> transpose_grad(GradBuilder& b, const std::vector<Value>& g) {
  std::vector<int> perm = transpose_perm(b.call());
  std::vector<int64_t> inverse(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inverse[perm[k]] = static_cast<int64_t>(k);
  return {b.transpose(g[0], inverse)};
}

// ---- Reshape -------------------------------------------------------------

// The dims' extents as IR expressions (ops/ computes take these; symbolic dims stay symbolic).
std::vector<Expr> dim_exprs(const Shape& s) {
  std::vector<Expr> e;
  for (const Dim& d : s) e.push_back(d.expr());
  return e;
}

// Reshape of a symbolic input: the -1 is the input's element count over the
// other entries' with common factors cancelled ([batch, seq, 768] to
// [0, 0, -1] gives 768). Counts that cannot be proven equal at compile time
// ([batch, n] to [0, 2, 3], or the -1 of [0, -1, 100]: seq * 768 / 100) are
// left to each run: compile records "input count == output count" as a
// shape constraint of the plan (shape_constraints.h), which a run checks and
// names. Counts that can never agree (a constant ratio other than 1) fail here.
Shape symbolic_reshape(const OpCall& call, Shape shape, int inferred) {
  const TensorType& in = in_type(call);
  if (inferred >= 0) {
    Shape known;
    for (size_t k = 0; k < shape.size(); ++k)
      if (static_cast<int>(k) != inferred) known.push_back(shape[k]);
    Expr q = ops::exact_quotient(dim_exprs(in.shape), dim_exprs(known));
    if (!q.defined()) {
      if (known.is_static() && known.numel().value() == 0)
        call.fail("cannot infer the -1 of " + shape_to_string(shape) + " for " + in.str() + ": the other entries hold no elements");
      q = floordiv(in.numel_dim().expr(), known.numel().expr());  // a run checks that it divides
    }
    shape[inferred] = Dim(q);
  }
  if (!ops::same_product(dim_exprs(in.shape), dim_exprs(shape))) {
    Expr ratio_in = ops::exact_quotient(dim_exprs(in.shape), dim_exprs(shape)), ratio_out = ops::exact_quotient(dim_exprs(shape), dim_exprs(in.shape));
    const int64_t* a = ratio_in.defined() ? as_const_int(ratio_in) : nullptr;
    const int64_t* b = ratio_out.defined() ? as_const_int(ratio_out) : nullptr;
    if ((a && *a != 1) || (b && *b != 1) || (in.shape.is_static() && shape.is_static()))
      call.fail("cannot reshape " + in.str() + " (" + in.numel_dim().str() + " elements) to " + shape_to_string(shape) + " (" + shape.numel().str() +
                " elements): the counts differ for every size but 0");
  }
  return shape;
}

// ONNX's shape rules: 0 copies the input's dimension (unless allowzero), -1 is inferred.
Shape reshape_shape(const OpCall& call) {
  const TensorType& in = in_type(call);
  // A target over shape variables that ONNX's 0/-1 cannot say ([batch*seq, 128] -> [seq, batch, 128]).
  if (const Shape& target = call.attrs.get_shape("target"); !target.empty()) return symbolic_reshape(call, target, -1);
  if (call.input_types[1].ndim() != 1) call.fail("the shape input must be 1-D, got " + call.input_types[1].str());
  std::vector<int64_t> entries = call.constant_ints(1, "shape");
  Shape shape(entries);
  bool allowzero = call.attrs.get_int("allowzero") != 0;
  int inferred = -1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (entries[k] == 0 && !allowzero) {
      if (static_cast<int>(k) >= in.ndim())
        call.fail("shape " + shape_to_string(shape) + ": entry " + std::to_string(k) + " is 0 (copy the input's dimension), but the input " +
                  in.str() + " has only " + std::to_string(in.ndim()) + " dimensions");
      shape[k] = in.shape[k];
    } else if (entries[k] == -1) {
      if (inferred >= 0) call.fail("shape " + shape_to_string(shape) + " has more than one -1 (at most one dimension can be inferred)");
      inferred = static_cast<int>(k);
    } else if (entries[k] < 0) {
      call.fail("shape " + shape_to_string(shape) + " has the invalid entry " + std::to_string(entries[k]) + " (entries are >= 0, or -1 to infer)");
    }
  }
  if (!in.is_static() || !shape.is_static()) return symbolic_reshape(call, shape, inferred);
  std::vector<int64_t> out = shape;
  if (inferred >= 0) {
    int64_t known = 1;
    for (size_t k = 0; k < out.size(); ++k)
      if (static_cast<int>(k) != inferred) known *= out[k];
    if (known == 0 || in.numel() % known != 0)
      call.fail("cannot reshape " + in.str() + " (" + std::to_string(in.numel()) + " elements) to " + shape_to_string(out) +
                ": the other dimensions hold " + std::to_string(known) + " elements, which do not divide " + std::to_string(in.numel()));
    out[inferred] = in.numel() / known;
  }
  if (numel_of(out) != in.numel())
    call.fail("cannot reshape " + in.str() + " (" + std::to_string(in.numel()) + " elements) to " + shape_to_string(out) + " (" +
              std::to_string(numel_of(out)) + " elements)");
  return out;
}

// Every reshaping op is the same index remap once its output shape is known.
ComputeFn reshape_to(std::function<Shape(const OpCall&)> shape_of) {
  return [shape_of](const OpCall& call, const std::vector<te::Tensor>& in) {
    // Inference checked the counts, or left them to a run's shape constraint (symbolic_reshape).
    return std::vector<te::Tensor>{ops::reshape(in[0], dim_exprs(shape_of(call)), call.op->name, true)};
  };
}

// Reshape-like ops. Dims of size > 1 are grouped where the element counts
// before them agree on both sides; a group of one input dim and one output
// dim keeps its split; one input dim cut into several output dims passes its
// split to the outer one (heads out of a hidden dim); several input dims
// merged into one pass the outer one's split (the others must be whole).
RuleOutput reshape_propagate(const RuleInput& r) {
  const auto& is = input_type(r, 0).shape;
  const auto& os = r.node.types[0].shape;
  ShardingSpec x = seen(r, 0), out = R(static_cast<int>(os.size()));
  RuleOutput o = with_inputs_default(r);
  std::vector<int> id, od;  // dims of size > 1
  for (int i = 0; i < static_cast<int>(is.size()); ++i)
    if (is[i] > 1) id.push_back(i);
  for (int j = 0; j < static_cast<int>(os.size()); ++j)
    if (os[j] > 1) od.push_back(j);
  size_t a = 0, b = 0;
  while (a < id.size() && b < od.size()) {
    size_t a1 = a + 1, b1 = b + 1;
    int64_t pi = is[id[a]], po = os[od[b]];
    while (pi != po) {
      if (pi < po && a1 < id.size()) pi *= is[id[a1++]];
      else if (po < pi && b1 < od.size()) po *= os[od[b1++]];
      else break;
    }
    if (pi != po) break;
    // One side is a single dim: the outer dim of the other side carries the split.
    const Axes& axes = x.dims[id[a]];
    if ((a1 - a == 1 || b1 - b == 1) && splits(os[od[b]], axes, r.mesh)) {
      out.dims[od[b]] = axes;
      o.in[0].dims[id[a]] = axes;
    }
    a = a1;
    b = b1;
  }
  o.out.push_back(out);
  return o;
}

ShardingRule reshape_rule() { return {"reshape", reshape_propagate, nullptr}; }

// The target shape holds global sizes: the rank's Reshape gets its block's.
Ref<OpNode> reshape_localize(const OpNode& g, std::vector<Value> ins, const std::vector<ShardingSpec>& outs, const Mesh& mesh) {
  ins[1] = int64_constant(g.name + ".local_shape", localized(op_call(g).constant_ints(1, "shape"), outs[0], mesh));
  return make_op(g.op, ins, g.attrs, g.name);
}

void register_reshape() {
  OpDef d;
  d.name = "Reshape";
  d.doc = "Reshape(data, shape): row-major reshape; in `shape`, 0 copies the input dimension (allowzero=0) and -1 is inferred";
  d.min_inputs = d.max_inputs = 2;
  // target: the output shape when it has symbolic dims ONNX's encoding cannot express (the importer sets it); empty: use `shape`.
  d.attrs = {{"allowzero", AttrKind::Int, AttrValue(int64_t(0))}, {"target", AttrKind::Shape, AttrValue(Shape{})}};
  d.pattern = Pattern::Injective;
  d.const_inputs = {1};
  d.infer = [](const OpCall& call) { return one(with_shape(call, reshape_shape(call))); };
  d.compute = reshape_to(reshape_shape);
  d.gradient = reshape_back;
  d.sharding = {"reshape", reshape_propagate, reshape_localize};
  register_op(std::move(d));
}

// ---- Flatten ------------------------------------------------------------

Shape flatten_shape(const OpCall& call) {
  const TensorType& in = in_type(call);
  int64_t axis = call.attrs.get_int("axis");
  if (axis < -in.ndim() || axis > in.ndim())
    call.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(in.ndim()) + " (Flatten takes -rank to rank)");
  if (axis < 0) axis += in.ndim();
  Dim outer = 1, inner = 1;
  for (int k = 0; k < in.ndim(); ++k) (k < axis ? outer : inner) *= in.shape[k];
  return {outer, inner};
}

void register_flatten() {
  OpDef d;
  d.name = "Flatten";
  d.doc = "Flatten(x): 2-D [prod(dims before axis), prod(dims from axis)]";
  d.attrs = {{"axis", AttrKind::Int, AttrValue(int64_t(1))}};
  d.pattern = Pattern::Injective;
  d.infer = [](const OpCall& call) { return one(with_shape(call, flatten_shape(call))); };
  d.compute = reshape_to(flatten_shape);
  d.gradient = reshape_back;
  d.sharding = reshape_rule();
  register_op(std::move(d));
}

// ---- Transpose -----------------------------------------------------------

std::vector<int> transpose_perm(const OpCall& call) {
  int rank = in_type(call).ndim();
  const std::vector<int64_t>& p = call.attrs.get_ints("perm");
  std::vector<int> perm;
  if (p.empty()) {  // ONNX's default: reverse the dimensions
    for (int k = rank - 1; k >= 0; --k) perm.push_back(k);
    return perm;
  }
  if (static_cast<int>(p.size()) != rank)
    call.fail("perm " + shape_to_string(p) + " has " + std::to_string(p.size()) + " entries for the input " + in_type(call).str() + " of rank " +
              std::to_string(rank));
  std::vector<bool> seen(rank, false);
  for (int64_t a : p) {
    if (a < 0 || a >= rank || seen[a])
      call.fail("perm " + shape_to_string(p) + " is not a permutation of 0.." + std::to_string(rank - 1) + " (each axis exactly once)");
    seen[a] = true;
    perm.push_back(static_cast<int>(a));
  }
  return perm;
}

// Splits move with their dims.
RuleOutput transpose_propagate(const RuleInput& r) {
  ShardingSpec x = seen(r, 0);
  int n = x.ndim();
  std::vector<int64_t> perm(n);
  if (r.node.attrs.has("perm") && !r.node.attrs.get_ints("perm").empty()) perm = r.node.attrs.get_ints("perm");
  else for (int i = 0; i < n; ++i) perm[i] = n - 1 - i;
  RuleOutput o = with_inputs_default(r);
  o.in[0] = x;
  ShardingSpec out = R(n);
  for (int j = 0; j < n; ++j) out.dims[j] = x.dims[perm[j]];
  o.out.push_back(out);
  return o;
}

void register_transpose() {
  OpDef d;
  d.name = "Transpose";
  d.doc = "Transpose(x): output dimension k is input dimension perm[k]; no perm reverses the dimensions";
  d.attrs = {{"perm", AttrKind::Ints, AttrValue(std::vector<int64_t>{})}};
  d.pattern = Pattern::Injective;
  d.infer = [](const OpCall& call) {
    Shape shape;
    for (int p : transpose_perm(call)) shape.push_back(in_type(call).shape[p]);
    return one(with_shape(call, shape));
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::permute_dims(in[0], transpose_perm(call), "transpose")};
  };
  d.gradient = transpose_grad;
  d.sharding = {"transpose", transpose_propagate, nullptr};
  register_op(std::move(d));
}

// ---- Squeeze / Unsqueeze -------------------------------------------------

std::vector<int> squeeze_axes(const OpCall& call) {
  const TensorType& in = in_type(call);
  std::vector<int> axes;
  if (input_given(call, 1)) {
    axes = normalize_axes(call, call.constant_ints(1, "axes"), in.ndim());
    for (int a : axes)
      if (!(in.shape[a] == 1))
        call.fail("cannot squeeze axis " + std::to_string(a) + " of " + in.str() + ": its extent is " + in.shape[a].str() + ", not 1");
  } else {
    for (int k = 0; k < in.ndim(); ++k)  // a symbolic dim is not taken for 1: it stays
      if (in.shape[k] == 1) axes.push_back(k);
  }
  return axes;
}

void register_squeeze() {
  OpDef d;
  d.name = "Squeeze";
  d.doc = "Squeeze(data, axes?): removes the given dimensions of extent 1 (all of them without axes)";
  d.min_inputs = 1;
  d.max_inputs = 2;
  d.pattern = Pattern::Injective;
  d.const_inputs = {1};
  d.infer = [](const OpCall& call) {
    std::vector<int> axes = squeeze_axes(call);
    Shape shape;
    for (int k = 0; k < in_type(call).ndim(); ++k)
      if (std::find(axes.begin(), axes.end(), k) == axes.end()) shape.push_back(in_type(call).shape[k]);
    return one(with_shape(call, shape));
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::squeeze(in[0], squeeze_axes(call), "squeeze")};
  };
  d.gradient = reshape_back;
  d.sharding = reshape_rule();
  register_op(std::move(d));
}

std::vector<int> unsqueeze_axes(const OpCall& call) {
  std::vector<int64_t> axes = call.constant_ints(1, "axes");
  return normalize_axes(call, axes, in_type(call).ndim() + static_cast<int>(axes.size()));
}

void register_unsqueeze() {
  OpDef d;
  d.name = "Unsqueeze";
  d.doc = "Unsqueeze(data, axes): inserts dimensions of extent 1 at `axes` of the output";
  d.min_inputs = d.max_inputs = 2;
  d.pattern = Pattern::Injective;
  d.const_inputs = {1};
  d.infer = [](const OpCall& call) {
    std::vector<int> axes = unsqueeze_axes(call);
    Shape shape;
    size_t next = 0;
    for (int k = 0; k < in_type(call).ndim() + static_cast<int>(axes.size()); ++k)
      shape.push_back(std::find(axes.begin(), axes.end(), k) != axes.end() ? Dim(1) : in_type(call).shape[next++]);
    return one(with_shape(call, shape));
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::expand_dims(in[0], unsqueeze_axes(call), "unsqueeze")};
  };
  d.gradient = reshape_back;
  d.sharding = reshape_rule();
  register_op(std::move(d));
}

// ---- Expand --------------------------------------------------------------

Shape expand_shape(const OpCall& call) {
  if (call.input_types[1].ndim() != 1) call.fail("the shape input must be 1-D, got " + call.input_types[1].str());
  std::vector<int64_t> shape = call.constant_ints(1, "shape");
  // A symbolic input broadcasts against the constant shape (its 1s keep the input's dim; a symbolic dim is never 1).
  if (!in_type(call).is_static()) return broadcast_dims(call, in_type(call).shape, Shape(shape));
  try {
    return ops::broadcast_shape(in_type(call).shape, shape);  // bidirectional, as ONNX's Expand
  } catch (const Error& e) {
    call.fail(std::string("cannot expand ") + in_type(call).str() + " to " + shape_to_string(shape) + ": " + e.what());
  }
}

// Expand: the input's whole (not broadcast) dims keep their splits.
RuleOutput expand_propagate(const RuleInput& r) {
  const auto& os = r.node.types[0].shape;
  const auto& is = input_type(r, 0).shape;
  ShardingSpec x = seen(r, 0), out = R(static_cast<int>(os.size()));
  int off = static_cast<int>(os.size() - is.size());
  for (int k = 0; k < x.ndim(); ++k)
    if (is[k] == os[k + off] && is[k] > 1) out.dims[k + off] = x.dims[k];
  RuleOutput o = with_inputs_default(r);
  o.in[0] = project(out, os, is);
  o.out.push_back(out);
  return o;
}

// The target shape aligns to the output's trailing dims; its global sizes become the rank's.
Ref<OpNode> expand_localize(const OpNode& g, std::vector<Value> ins, const std::vector<ShardingSpec>& outs, const Mesh& mesh) {
  std::vector<int64_t> shape = op_call(g).constant_ints(1, "shape");
  ShardingSpec tail = R(static_cast<int>(shape.size()));
  int off = outs[0].ndim() - tail.ndim();
  for (int k = 0; k < tail.ndim(); ++k)
    if (k + off >= 0) tail.dims[k] = outs[0].dims[k + off];
  ins[1] = int64_constant(g.name + ".local_shape", localized(shape, tail, mesh));
  return make_op(g.op, ins, g.attrs, g.name);
}

void register_expand() {
  OpDef d;
  d.name = "Expand";
  d.doc = "Expand(input, shape): broadcasts input and shape against each other (numpy rules)";
  d.min_inputs = d.max_inputs = 2;
  d.pattern = Pattern::Injective;
  d.const_inputs = {1};
  d.infer = [](const OpCall& call) { return one(with_shape(call, expand_shape(call))); };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::broadcast_to(in[0], dim_exprs(expand_shape(call)), "expand")};
  };
  d.gradient = expand_grad;
  d.sharding = {"expand", expand_propagate, expand_localize};
  register_op(std::move(d));
}

// ---- Shape, ConstantOfShape, Range ----------------------------------------

// Shape's [start, end) of the input's dimensions (opset 15: negative counts from the end, clamped).
std::pair<int, int> shape_bounds(const OpCall& call) {
  int64_t rank = in_type(call).ndim();
  auto clamp = [rank](int64_t v) { return static_cast<int>(std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank)); };
  int start = clamp(call.attrs.get_int("start")), end = clamp(call.attrs.get_int("end"));
  return {start, std::max(start, end)};
}

void register_shape() {
  OpDef d;
  d.name = "Shape";
  d.doc = "Shape(data): the int64 dimensions start..end of data's type; no kernel: constant folding replaces it (end's default, INT64_MAX, is the rank)";
  d.attrs = {{"start", AttrKind::Int, AttrValue(int64_t(0))}, {"end", AttrKind::Int, AttrValue(std::numeric_limits<int64_t>::max())}};
  d.pattern = Pattern::Opaque;
  d.infer = [](const OpCall& call) {
    auto [start, end] = shape_bounds(call);
    return one(TensorType{{end - start}, DataType::Int(64)});
  };
  d.evaluate = [](const OpCall& call, const std::vector<NDArray>&) {
    auto [start, end] = shape_bounds(call);
    NDArray out = NDArray::empty({end - start}, DataType::Int(64));
    for (int k = start; k < end; ++k) out.data_as<int64_t>()[k - start] = in_type(call).shape[k];
    return std::vector<NDArray>{out};
  };
  d.sharding = replicated_rule();
  register_op(std::move(d));
}

std::vector<int64_t> constant_of_shape_shape(const OpCall& call) {
  if (call.input_types[0].ndim() != 1) call.fail("the shape input must be 1-D, got " + call.input_types[0].str());
  std::vector<int64_t> shape = call.constant_ints(0, "shape");
  for (int64_t s : shape)
    if (s < 0) call.fail("shape " + shape_to_string(shape) + " has a negative dimension");
  return shape;
}

void register_constant_of_shape() {
  OpDef d;
  d.name = "ConstantOfShape";
  d.doc = "ConstantOfShape(shape): a tensor of `shape` filled with `value`. ONNX's one-element tensor attribute is split by the importer "
          "into `value` (a float) and `dtype` (the ONNX data type code: 1 float32, 6 int32, 7 int64, 9 bool, 11 float64 ...)";
  d.attrs = {{"value", AttrKind::Float, AttrValue(0.0)}, {"dtype", AttrKind::Int, AttrValue(int64_t(1))}};
  d.pattern = Pattern::Injective;
  d.const_inputs = {0};
  d.infer = [](const OpCall& call) {
    return one(TensorType{constant_of_shape_shape(call), onnx_dtype(call, call.attrs.get_int("dtype"))});
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>&) {
    DataType t = onnx_dtype(call, call.attrs.get_int("dtype"));
    return std::vector<te::Tensor>{ops::fill(constant_of_shape_shape(call), make_const(t, call.attrs.get_float("value")), "constant_of_shape")};
  };
  d.sharding = replicated_rule();
  register_op(std::move(d));
}

struct RangeSpec {
  double start, delta;
  int64_t n;
};

RangeSpec range_spec(const OpCall& call) {
  const char* names[3] = {"start", "limit", "delta"};
  double v[3];
  for (int i = 0; i < 3; ++i) {
    if (call.input_types[i].numel() != 1) call.fail(std::string(names[i]) + " must be a scalar, got " + call.input_types[i].str());
    if (call.input_types[i].dtype != call.input_types[0].dtype)
      call.fail(std::string("start and ") + names[i] + " have dtypes " + call.input_types[0].dtype.str() + " and " + call.input_types[i].dtype.str());
    v[i] = constant_floats(call, i, names[i])[0];
  }
  if (v[2] == 0) call.fail("delta is 0");
  return {v[0], v[2], std::max<int64_t>(0, static_cast<int64_t>(std::ceil((v[1] - v[0]) / v[2])))};
}

// A symbolic length (the importer's `length`, for a limit computed from a symbolic dim: arange(seq)).
const Dim* symbolic_length(const OpCall& call) {
  const Shape& length = call.attrs.get_shape("length");
  if (length.empty()) return nullptr;
  if (length.size() != 1) call.fail("length must hold one dimension, got " + shape_to_string(length));
  return &length[0];
}

void register_range() {
  OpDef d;
  d.name = "Range";
  d.doc = "Range(start, limit, delta): [start, start + delta, ...) up to limit (exclusive); all three constant scalars, "
          "or with `length` (a symbolic count: the importer's arange over a symbolic dim) limit is unused";
  d.min_inputs = d.max_inputs = 3;
  d.pattern = Pattern::Injective;
  d.const_inputs = {0, 1, 2};
  d.attrs = {{"length", AttrKind::Shape, AttrValue(Shape{})}};
  d.infer = [](const OpCall& call) {
    const Dim* n = symbolic_length(call);
    return one(TensorType{{n ? *n : Dim(range_spec(call).n)}, call.input_types[0].dtype});
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>&) {
    RangeSpec r = range_spec(call);
    DataType t = call.input_types[0].dtype;
    if (const Dim* n = symbolic_length(call)) {
      double start = r.start, delta = r.delta;
      return std::vector<te::Tensor>{te::compute({n->expr()}, [&](const std::vector<Var>& i) {
        return make_const(t, start) + cast(t, i[0]) * make_const(t, delta);
      }, "range")};
    }
    return std::vector<te::Tensor>{ops::arange(r.start, r.delta, r.n, t, "range")};
  };
  d.sharding = replicated_rule();
  register_op(std::move(d));
}

const bool registered = [] {
  register_reshape();
  register_flatten();
  register_transpose();
  register_squeeze();
  register_unsqueeze();
  register_expand();
  register_shape();
  register_constant_of_shape();
  register_range();
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
