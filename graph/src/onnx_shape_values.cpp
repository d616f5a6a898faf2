// Shape arithmetic of ONNX exporters over symbolic dimensions (onnx_internal.h:
// ShapeValues). Exporters compute a Reshape's target as Shape -> Gather ->
// Unsqueeze -> Concat; with static shapes the importer folds those to
// constants. With a symbolic dimension the chain's values are dims ("batch",
// 12, 64): they are tracked here element by element, and a Reshape or Expand
// reading one gets a constant target that says the same thing in ONNX's own
// terms (0: "this input dimension", -1: "what is left", 1 for Expand: "keep").
#include <algorithm>

#include "kiln/graph/op_registry.h"
#include "kiln/support/error.h"
#include "onnx_internal.h"

namespace kiln::graph::onnx_detail {

namespace {

constexpr int64_t kMaxShapeElems = 64;  // longer integer tensors are data, not shapes

Value int64_array(const std::string& name, const std::vector<int64_t>& values, bool scalar) {
  NDArray a = scalar ? NDArray::empty({}, DataType::Int(64)) : NDArray::empty({static_cast<int64_t>(values.size())}, DataType::Int(64));
  std::copy(values.begin(), values.end(), a.data_as<int64_t>());
  return make_constant(name, a)->output();
}

bool all_static(const std::vector<Dim>& dims) {
  return std::all_of(dims.begin(), dims.end(), [](const Dim& d) { return d.is_static(); });
}

std::string dims_text(const std::vector<Dim>& dims) { return shape_to_string(Shape(dims)); }

}  // namespace

std::optional<std::vector<Dim>> ShapeValues::elements(const Value& v) const {
  if (!v.defined()) return std::nullopt;
  auto it = known_.find(v);
  if (it != known_.end()) return it->second;
  if (v.node->kind != NodeKind::Constant) return std::nullopt;
  const NDArray& a = static_cast<const ConstantNode&>(*v.node).data;
  if (!a.dtype().is_int() || a.shape().size() > 1 || a.numel() > kMaxShapeElems) return std::nullopt;
  std::vector<Dim> dims;
  for (int64_t i = 0; i < a.numel(); ++i)
    dims.push_back(a.dtype().bits() == 64 ? a.data_as<int64_t>()[i] : static_cast<int64_t>(a.data_as<int32_t>()[i]));
  return dims;
}

bool ShapeValues::reads_symbolic(const OnnxNode& n) const {
  return std::any_of(n.inputs.begin(), n.inputs.end(), [&](const Value& v) { return v.defined() && known_.count(v); });
}

// The node's result as dims, when this file knows how to compute it.
std::optional<std::vector<Dim>> ShapeValues::compute(const OnnxNode& n) const {
  auto in = [&](size_t i) { return i < n.inputs.size() ? elements(n.inputs[i]) : std::nullopt; };
  const std::string& op = n.op_type;
  if (op == "Identity" || op == "Squeeze" || op == "Unsqueeze" || (op == "Cast" && n.attrs.get_int_or("to", 7) == 7)) return in(0);
  if (op == "Concat") {
    std::vector<Dim> out;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      auto e = in(i);
      if (!e) return std::nullopt;
      out.insert(out.end(), e->begin(), e->end());
    }
    return out;
  }
  if (op == "Gather") {
    auto data = in(0), idx = in(1);
    if (!data || !idx || !all_static(*idx) || n.attrs.get_int_or("axis", 0) != 0) return std::nullopt;
    std::vector<Dim> out;
    int64_t size = static_cast<int64_t>(data->size());
    for (const Dim& i : *idx) {
      int64_t k = i.value() < 0 ? i.value() + size : i.value();
      if (k < 0 || k >= size) return std::nullopt;
      out.push_back((*data)[k]);
    }
    return out;
  }
  if (op == "Slice") {
    auto data = in(0), starts = in(1), ends = in(2);
    if (!data || !starts || !ends || starts->size() != 1 || ends->size() != 1 || !all_static(*starts) || !all_static(*ends)) return std::nullopt;
    if (n.inputs.size() > 4 && n.inputs[4].defined()) {
      auto steps = in(4);
      if (!steps || steps->size() != 1 || !((*steps)[0] == 1)) return std::nullopt;
    }
    int64_t size = static_cast<int64_t>(data->size());
    auto clamp = [&](int64_t k) { return std::clamp(k < 0 ? k + size : k, int64_t{0}, size); };
    int64_t b = clamp((*starts)[0].value()), e = clamp((*ends)[0].value());
    return std::vector<Dim>(data->begin() + b, data->begin() + std::max(b, e));
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    auto a = in(0), b = in(1);
    if (!a || !b || (a->size() != b->size() && a->size() != 1 && b->size() != 1)) return std::nullopt;
    size_t count = std::max(a->size(), b->size());
    std::vector<Dim> out;
    for (size_t k = 0; k < count; ++k) {
      const Dim& x = (*a)[a->size() == 1 ? 0 : k];
      const Dim& y = (*b)[b->size() == 1 ? 0 : k];
      if (op == "Add") out.push_back(dim_add(x, y));
      if (op == "Sub") out.push_back(dim_sub(x, y));
      if (op == "Mul") out.push_back(dim_mul(x, y));
      // Shapes are non-negative, where ONNX's truncating division is floor division.
      if (op == "Div") out.push_back(dim_floordiv(x, y));
    }
    return out;
  }
  return std::nullopt;
}

std::optional<std::vector<Value>> ShapeValues::emit(OnnxNode& n, const std::function<std::vector<Value>(OnnxNode)>& emit_plain) {
  // Shape of a value with a symbolic dimension: its dims, from `start` to `end`.
  if (n.op_type == "Shape" && !n.inputs.empty() && n.inputs[0].defined() && !n.inputs[0].type().is_static()) {
    const Shape& s = n.inputs[0].type().shape;
    int64_t rank = static_cast<int64_t>(s.size());
    auto clamp = [&](int64_t k) { return std::clamp(k < 0 ? k + rank : k, int64_t{0}, rank); };
    int64_t b = clamp(n.attrs.get_int_or("start", 0)), e = clamp(n.attrs.get_int_or("end", rank));
    std::vector<Value> out = emit_plain(n);
    known_[out[0]] = std::vector<Dim>(s.begin() + b, s.begin() + std::max(b, e));
    return out;
  }
  if (!reads_symbolic(n)) return std::nullopt;
  if (n.op_type == "Range") return emit_range(n, emit_plain);
  if (n.op_type == "Reshape" || n.op_type == "Expand") {
    n.inputs[1] = target_constant(n);
    return std::nullopt;  // the node itself is emitted as usual
  }
  std::optional<std::vector<Dim>> dims = compute(n);
  KILN_USER_CHECK(dims) << n.op_type << " node '" << n.name
                        << "' computes on a shape with symbolic dimensions, which kiln cannot follow there yet (it follows Shape, Gather, "
                           "Slice, Concat, Squeeze, Unsqueeze, Cast, Add, Sub, Mul and Div into Reshape and Expand); give the symbolic "
                           "dimensions sizes (shapes={...}) to import this model";
  std::vector<Value> out = emit_plain(n);
  if (all_static(*dims)) {
    std::vector<int64_t> values;
    for (const Dim& d : *dims) values.push_back(d.value());
    return std::vector<Value>{int64_array(n.name + "/value", values, out[0].type().ndim() == 0)};
  }
  known_[out[0]] = *dims;
  return out;
}

// Range over a symbolic limit (torch.arange(x.shape[1])): an integer start and
// delta > 0, as constants; the count max(0, ceil((limit - start) / delta)), a
// length the graph's Range takes as its `length`.
std::optional<std::vector<Value>> ShapeValues::emit_range(OnnxNode& n, const std::function<std::vector<Value>(OnnxNode)>& emit_plain) const {
  auto start = elements(n.inputs[0]), limit = elements(n.inputs[1]), delta = elements(n.inputs[2]);
  bool ok = start && limit && delta && start->size() == 1 && limit->size() == 1 && delta->size() == 1 && (*start)[0].is_static() &&
            (*delta)[0].is_static() && (*delta)[0].value() > 0 && n.inputs[0].type().dtype == DataType::Int(64);
  KILN_USER_CHECK(ok) << "Range node '" << n.name << "' counts to a symbolic limit with a start or delta kiln cannot follow (it takes a "
                      << "constant int64 start and a positive constant delta); give the symbolic dimensions sizes (shapes={...}) to import this model";
  int64_t s = (*start)[0].value(), d = (*delta)[0].value();
  Dim length = dim_floordiv(dim_add(dim_sub((*limit)[0], s), d - 1), d);
  // ONNX counts none when limit <= start; a size from 0 (arange(seq)) cannot be below it, and stays the plain size.
  if (s > 0 || !(*limit)[0].as_var().defined()) length = dim_max(Dim(0), length);
  n.attrs.set("length", Shape({length}));
  // The op takes constants (start and delta may come from shape arithmetic; limit is unused with `length`).
  n.inputs[0] = int64_array(n.name + "/start", {s}, true);
  n.inputs[1] = int64_array(n.name + "/limit", {s}, true);
  n.inputs[2] = int64_array(n.name + "/delta", {d}, true);
  return emit_plain(n);
}

// Reshape's or Expand's target as a constant: static entries as they are,
// and each symbolic one as ONNX's word for "the input's dimension here".
Value ShapeValues::target_constant(OnnxNode& n) const {
  std::vector<Dim> target = *elements(n.inputs[1]);
  const Shape& in = n.inputs[0].type().shape;
  std::vector<int64_t> encoded;
  bool reshape = n.op_type == "Reshape", used_rest = false;
  size_t lead = target.size() >= in.size() ? target.size() - in.size() : 0;  // Expand aligns from the right
  for (size_t k = 0; k < target.size(); ++k) {
    const Dim& t = target[k];
    if (t.is_static()) {
      encoded.push_back(t.value());
      continue;
    }
    if (reshape && k < in.size() && in[k] == t && n.attrs.get_int_or("allowzero", 0) == 0) {
      encoded.push_back(0);
    } else if (!reshape && k >= lead && in[k - lead] == t) {
      encoded.push_back(1);
    } else if (reshape && !used_rest) {
      encoded.push_back(-1);
      used_rest = true;
    } else if (reshape) {
      // Beyond ONNX's words: the node carries the whole target as dims (Reshape's `target`).
      n.attrs.set("target", Shape(target));
      return int64_array(n.name + "/target", std::vector<int64_t>(target.size(), -1), false);
    } else {
      KILN_USER_ERROR() << n.op_type << " node '" << n.name << "' expands " << n.inputs[0].type().str() << " to "
                        << dims_text(target) << ", whose symbolic dimension '" << t.str()
                        << "' kiln cannot express yet (only dims equal to the input's at the same axis); give the "
                           "symbolic dimensions sizes (shapes={...}) to import this model";
    }
  }
  return int64_array(n.name + "/target", encoded, false);
}

}  // namespace kiln::graph::onnx_detail
