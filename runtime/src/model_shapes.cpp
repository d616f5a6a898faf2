// The shapes of a dynamic plan at one call (model_shapes.h): binding,
// checking (each failure a ShapeError that names what to fix), evaluating,
// and the arena's layout at those values.
#include "kiln/runtime/model_shapes.h"

#include <algorithm>

namespace kiln {

namespace {

// "batch = 3 (from input 'x' dimension 0), seq = 5 (...)": the values an expression reads.
std::string bindings_of(const ModelPlan& plan, const ShapeExpr& e, const std::vector<int64_t>& values, const std::vector<std::string>& origins) {
  std::string out;
  std::vector<int64_t> seen;
  e.for_each_param([&](int64_t v) {
    if (std::find(seen.begin(), seen.end(), v) != seen.end()) return;
    seen.push_back(v);
    out += (out.empty() ? "" : ", ") + plan.shape_vars[v] + " = " + std::to_string(values[v]);
    if (static_cast<size_t>(v) < origins.size()) out += " (from " + origins[v] + ")";
  });
  return out;
}

// The expression's value, or a ShapeError when it overflows or divides by zero.
int64_t eval_or_throw(const ModelPlan& plan, const ShapeExpr& e, const std::vector<int64_t>& values, const std::vector<std::string>& origins,
                      const std::string& what) {
  std::optional<int64_t> v = e.eval(values.data(), values.size());
  if (!v) {
    throw ShapeError(what + " is " + e.str(plan.shape_vars) + ", which overflows or divides by zero with " + bindings_of(plan, e, values, origins) +
                     "; pass smaller shapes");
  }
  return *v;
}

// How a message names buffer b.
std::string describe_buffer(const ModelPlan& plan, size_t b) {
  const ModelBuffer& pb = plan.buffers[b];
  switch (pb.kind) {
    case ModelBuffer::Kind::Input:
      return "input '" + plan.inputs[pb.index].name + "'";
    case ModelBuffer::Kind::Output:
      return "output '" + plan.outputs[pb.index].name + "'";
    case ModelBuffer::Kind::Constant:
      return "constant " + std::to_string(pb.index);
    case ModelBuffer::Kind::Arena:
      break;
  }
  for (const ModelStep& s : plan.steps)
    if (std::find(s.args.begin(), s.args.end(), static_cast<int>(b)) != s.args.end())
      return "intermediate buffer " + std::to_string(b) + " (of step '" + s.name + "')";
  return "intermediate buffer " + std::to_string(b);
}

void check_ranges(const ModelPlan& plan, const std::vector<int64_t>& values, const std::vector<std::string>& origins) {
  for (size_t v = 0; v < plan.shape_vars.size(); ++v) {
    const std::string& name = plan.shape_vars[v];
    std::string where = v < origins.size() ? origins[v] + " gives shape variable '" + name + "' = " : "shape variable '" + name + "' = ";
    if (values[v] < 0) throw ShapeError(where + std::to_string(values[v]) + ", which is negative; pass a size of at least 0");
    if (v >= plan.shape_ranges.size() || !plan.shape_ranges[v]) continue;
    const ShapeRange& r = *plan.shape_ranges[v];
    if (values[v] < r.lo || values[v] > r.hi) {
      throw ShapeError(where + std::to_string(values[v]) + ", outside its range [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]; pass a " + name +
                       " between " + std::to_string(r.lo) + " and " + std::to_string(r.hi) + ", or compile the model for a wider range");
    }
  }
}

void check_constraints(const ModelPlan& plan, const std::vector<int64_t>& values, const std::vector<std::string>& origins) {
  for (const ShapeConstraint& c : plan.constraints) {
    std::string head = "the input shapes break the model's constraint '" + c.text + "': ";
    int64_t lhs = eval_or_throw(plan, c.lhs, values, origins, head + "its left side");
    if (c.kind == ShapeConstraint::Kind::Divisible) {
      if (c.divisor != 0 && lhs % c.divisor == 0) continue;
      throw ShapeError(head + c.lhs.str(plan.shape_vars) + " = " + std::to_string(lhs) + " is not a multiple of " + std::to_string(c.divisor) + " with " +
                       bindings_of(plan, c.lhs, values, origins) + "; pass shapes that satisfy it");
    }
    int64_t rhs = eval_or_throw(plan, c.rhs, values, origins, head + "its right side");
    if (lhs == rhs) continue;
    // Each variable once: those of the right side that the left does not read.
    std::string all = bindings_of(plan, ShapeExpr::binary(ShapeExpr::Op::Add, c.lhs, c.rhs), values, origins);
    std::string rhs_text = c.rhs.str(plan.shape_vars) + (c.rhs.is_const() ? "" : " = " + std::to_string(rhs));
    throw ShapeError(head + c.lhs.str(plan.shape_vars) + " = " + std::to_string(lhs) + " differs from " + rhs_text + (all.empty() ? "" : " with " + all) +
                     "; pass shapes that satisfy it");
  }
}

// Checks one input's shape against its declared dims once the variables are bound.
void check_input_dims(const ModelPlan& plan, size_t i, const std::vector<int64_t>& shape, const std::vector<int64_t>& values,
                      const std::vector<std::string>& origins) {
  const ModelTensor& t = plan.inputs[i];
  std::string who = "input '" + t.name + "'";
  if (t.dims.empty()) {
    if (shape != t.shape) {
      throw ShapeError(who + " has shape " + shape_to_string(shape) + "; the model expects " + shape_to_string(t.shape) + " (its dimensions are fixed)");
    }
    return;
  }
  for (size_t d = 0; d < t.dims.size(); ++d) {
    const ShapeExpr& e = t.dims[d];
    int64_t want = eval_or_throw(plan, e, values, origins, who + " dimension " + std::to_string(d));
    if (want == shape[d]) continue;
    std::string expr = e.str(plan.shape_vars);
    std::string msg =
        who + " has " + std::to_string(shape[d]) + " in dimension " + std::to_string(d) + " (shape " + shape_to_string(shape) + "); the model expects " + expr;
    if (!e.is_const()) msg += " = " + std::to_string(want) + " there, with " + bindings_of(plan, e, values, origins);
    throw ShapeError(msg + "; pass inputs whose shapes agree");
  }
}

int64_t storage_bytes(DataType dtype, const std::vector<int64_t>& shape) {
  int64_t n = dtype_storage_bytes(dtype);
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

// A view takes its source's offset (following views of views); it must fit in the source's bytes.
void place_view(const ModelPlan& plan, size_t b, const std::vector<int>& value_of, const std::vector<PlannedValue>& arena, BoundShapes* out) {
  const ModelBuffer& pb = plan.buffers[b];
  if (pb.kind != ModelBuffer::Kind::Arena || pb.view_of < 0) return;
  int src = pb.view_of;
  while (plan.buffers[src].view_of >= 0) src = plan.buffers[src].view_of;
  out->offsets[b] = out->offsets[src];
  int64_t bytes = storage_bytes(pb.dtype, out->shapes[b]);
  if (bytes > arena[value_of[src]].bytes) {
    throw ShapeError("at these shapes, " + describe_buffer(plan, b) + " of shape " + shape_to_string(out->shapes[b]) + " views " + describe_buffer(plan, src) +
                     " of shape " + shape_to_string(out->shapes[src]) + ", which is smaller; the model lacks a constraint that makes their sizes agree");
  }
}

// Every buffer's shape at `values`, and the arena laid out for them; no range or constraint checks.
BoundShapes evaluate(const ModelPlan& plan, const std::vector<int64_t>& values) {
  BoundShapes out;
  out.values = values;
  out.shapes.resize(plan.buffers.size());
  out.offsets.assign(plan.buffers.size(), -1);
  std::vector<PlannedValue> arena;
  std::vector<int> value_of(plan.buffers.size(), -1);
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const ModelBuffer& pb = plan.buffers[b];
    std::vector<int64_t>& shape = out.shapes[b];
    shape = pb.shape;
    for (size_t d = 0; d < pb.dims.size(); ++d) {
      std::string what = "at these shapes, " + describe_buffer(plan, b) + " dimension " + std::to_string(d);
      shape[d] = eval_or_throw(plan, pb.dims[d], values, {}, what);
      if (shape[d] < 0) {
        throw ShapeError(what + " would be " + pb.dims[d].str(plan.shape_vars) + " = " + std::to_string(shape[d]) + " with " +
                         bindings_of(plan, pb.dims[d], values, {}) + "; pass larger shapes");
      }
    }
    if (pb.kind != ModelBuffer::Kind::Arena) continue;
    int64_t bytes = storage_bytes(pb.dtype, shape);
    if (bytes < 0)
      throw ShapeError("at these shapes, " + describe_buffer(plan, b) + " of shape " + shape_to_string(shape) + " overflows int64 bytes; pass smaller shapes");
    if (pb.view_of >= 0) continue;  // placed with its source
    value_of[b] = static_cast<int>(arena.size());
    PlannedValue v;
    v.bytes = bytes;
    v.first_step = pb.first_step;
    v.last_step = pb.last_step;
    arena.push_back(v);
  }
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    int src = plan.buffers[b].inplace_of;
    while (src >= 0 && plan.buffers[src].view_of >= 0) src = plan.buffers[src].view_of;  // in place of a view: of its bytes
    if (value_of[b] >= 0 && src >= 0) arena[value_of[b]].inplace_of = value_of[src];
  }
  out.memory = plan_memory(&arena);
  for (size_t b = 0; b < plan.buffers.size(); ++b)
    if (value_of[b] >= 0) out.offsets[b] = arena[value_of[b]].offset;
  for (size_t b = 0; b < plan.buffers.size(); ++b) place_view(plan, b, value_of, arena, &out);
  return out;
}

void check_value_count(const ModelPlan& plan, const std::vector<int64_t>& values) {
  std::string names;
  for (const std::string& n : plan.shape_vars) names += (names.empty() ? "" : ", ") + n;
  KILN_USER_CHECK(values.size() == plan.shape_vars.size())
      << "the model has " << plan.shape_vars.size() << " shape variables (" << (names.empty() ? "none: its shapes are fixed" : names) << "), got "
      << values.size() << " values; pass one per variable, in that order";
}

}  // namespace

std::vector<ShapeVarSource> shape_var_sources(const ModelPlan& plan) {
  std::vector<ShapeVarSource> out(plan.shape_vars.size());
  for (size_t i = plan.inputs.size(); i-- > 0;) {  // backwards: the first input wins
    const std::vector<ShapeExpr>& dims = plan.inputs[i].dims;
    for (size_t d = dims.size(); d-- > 0;) {
      if (!dims[d].is_param()) continue;
      KILN_USER_CHECK(dims[d].value >= 0 && static_cast<size_t>(dims[d].value) < out.size())
          << "corrupt model plan: input '" << plan.inputs[i].name << "' dimension " << d << " reads shape variable " << dims[d].value << " of " << out.size();
      out[dims[d].value] = {static_cast<int>(i), static_cast<int>(d)};
    }
  }
  for (size_t v = 0; v < out.size(); ++v) {
    KILN_USER_CHECK(out[v].input >= 0) << "the model plan's shape variable '" << plan.shape_vars[v]
                                       << "' is no plain dimension of any input, so no call can give its value; "
                                       << "make it one (e.g. an input of shape [" << plan.shape_vars[v] << ", ...])";
  }
  return out;
}

std::vector<int64_t> bind_shape_values(const ModelPlan& plan, const std::vector<ShapeVarSource>& sources, const std::vector<NDArray>& inputs) {
  std::vector<int64_t> values(sources.size());
  std::vector<std::string> origins(sources.size());
  for (size_t v = 0; v < sources.size(); ++v) {
    values[v] = inputs[sources[v].input].shape()[sources[v].dim];
    origins[v] = "input '" + plan.inputs[sources[v].input].name + "' dimension " + std::to_string(sources[v].dim);
  }
  check_ranges(plan, values, origins);
  for (size_t i = 0; i < inputs.size(); ++i) check_input_dims(plan, i, inputs[i].shape(), values, origins);
  check_constraints(plan, values, origins);
  return values;
}

void check_shape_values(const ModelPlan& plan, const std::vector<int64_t>& values, const std::vector<std::string>& origins) {
  check_value_count(plan, values);
  check_ranges(plan, values, origins);
  check_constraints(plan, values, origins);
}

BoundShapes bind_plan_shapes(const ModelPlan& plan, const std::vector<int64_t>& values) {
  check_shape_values(plan, values);
  return evaluate(plan, values);
}

MemoryPlanStats plan_memory_at(const ModelPlan& plan, const std::vector<int64_t>& values) {
  check_value_count(plan, values);
  if (!plan.is_dynamic()) {
    MemoryPlanStats st;
    st.arena_bytes = plan.arena_bytes;
    return st;
  }
  return bind_plan_shapes(plan, values).memory;
}

std::optional<MemoryPlanStats> plan_memory_bound(const ModelPlan& plan) {
  if (!plan.is_dynamic()) return plan_memory_at(plan, {});
  std::vector<int64_t> values;
  for (size_t v = 0; v < plan.shape_vars.size(); ++v) {
    if (v >= plan.shape_ranges.size() || !plan.shape_ranges[v]) return std::nullopt;
    values.push_back(plan.shape_ranges[v]->hi);
  }
  // The maxima together may break a constraint (a reshape's equal sizes); the sizes are still what bounds them.
  check_ranges(plan, values, {});
  return evaluate(plan, values).memory;
}

}  // namespace kiln
