// Binding a graph's shape variables to sizes (bind_shapes.h).
#include "kiln/graph/bind_shapes.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "kiln/graph/op_registry.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ops/task.h"
#include "kiln/support/error.h"

namespace kiln::graph {

Dim bind_dim(const Dim& d, const ShapeBinding& values) {
  if (d.is_static()) return d;
  return Dim(substitute(d.expr(), [&](const Variable* v) -> Expr {
    auto it = values.find(v->name);
    if (it == values.end()) return Expr();
    return make_const(v->dtype, static_cast<double>(it->second));
  }));
}

namespace {

Shape bind_shape(const Shape& s, const ShapeBinding& values) {
  Shape out;
  for (const Dim& d : s) out.push_back(bind_dim(d, values));
  return out;
}

Attrs bind_attrs(const Attrs& attrs, const ShapeBinding& values) {
  Attrs out = attrs;
  for (const auto& [name, v] : attrs.values())
    if (const Shape* s = std::get_if<Shape>(&v)) out.set(name, bind_shape(*s, values));
  return out;
}

}  // namespace

Graph bind_shapes(const Graph& g, const ShapeBinding& values) {
  for (const auto& [name, size] : values)
    KILN_USER_CHECK(size >= 0) << "shape variable '" << name << "' bound to " << size << "; sizes are >= 0";
  std::unordered_map<const NodeObj*, Ref<NodeObj>> made;
  auto value_of = [&](const Value& v) -> Value {
    if (!v.defined()) return v;
    auto it = made.find(v.node.get());
    return it == made.end() ? v : Value{it->second, v.index};
  };
  std::vector<Ref<InputNode>> inputs;
  for (const auto& in : g.inputs()) {
    Ref<InputNode> bound = make_input(in->name, TensorType{bind_shape(in->types[0].shape, values), in->types[0].dtype});
    made[in.get()] = bound;
    inputs.push_back(bound);
  }
  for (const auto& n : g.topo_order()) {
    if (n->kind != NodeKind::Op) continue;
    const auto& op = static_cast<const OpNode&>(*n);
    std::vector<Value> in;
    for (const Value& v : op.inputs) in.push_back(value_of(v));
    if (op.body.defined()) {
      // A fused group: its body bound, its outputs typed as the body's.
      Graph body = bind_shapes(Graph(op.body), values);
      std::vector<TensorType> types;
      for (const Value& v : body.outputs()) types.push_back(v.type());
      made[n.get()] = Ref<OpNode>(new OpNode(op.name, op.op, op.attrs, std::move(in), std::move(types), body));
    } else {
      made[n.get()] = make_op(op.op, std::move(in), bind_attrs(op.attrs, values), op.name);
    }
  }
  std::vector<Value> outputs;
  for (const Value& v : g.outputs()) outputs.push_back(value_of(v));
  return Graph::make(std::move(inputs), std::move(outputs), g.output_names());
}

std::vector<ShapeBinding> likely_bindings(const std::vector<std::string>& vars, const std::map<std::string, std::vector<int64_t>>& sizes,
                                          const std::map<std::string, ShapeRange>& ranges) {
  std::vector<ShapeBinding> out;
  if (vars.empty()) return out;
  out.push_back({});
  for (const std::string& v : vars) {
    std::vector<int64_t> choices;
    auto s = sizes.find(v);
    if (s != sizes.end() && !s->second.empty()) {
      choices = s->second;
    } else {
      int64_t hint = ops::kDefaultSizeHint;
      auto r = ranges.find(v);
      if (r != ranges.end()) hint = std::clamp(hint, r->second.lo, r->second.hi);
      choices = {hint};
    }
    for (int64_t c : choices) KILN_USER_CHECK(c >= 1) << "sizes['" << v << "'] has " << c << "; a likely size is at least 1";
    std::vector<ShapeBinding> next;
    for (const ShapeBinding& b : out)
      for (int64_t c : choices) {
        ShapeBinding nb = b;
        nb[v] = c;
        next.push_back(std::move(nb));
      }
    out = std::move(next);
  }
  return out;
}

std::vector<std::string> shape_var_names(const Graph& g) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& in : g.inputs())
    for (const Var& v : in->types[0].shape.vars())
      if (seen.insert(v.name()).second) names.push_back(v.name());
  return names;
}

}  // namespace kiln::graph
