// rewrite_graph (rewrite.h): the bottom-up rebuild every graph pass uses.
#include "kiln/graph/rewrite.h"

#include <unordered_map>

#include "kiln/graph/op_registry.h"
#include "kiln/support/error.h"

namespace kiln::graph {

Ref<OpNode> with_inputs(const OpNode& node, std::vector<Value> inputs) {
  if (node.body.defined()) {
    // A fused group keeps its body's types; the inputs must match them.
    for (size_t i = 0; i < inputs.size(); ++i)
      KILN_CHECK(inputs[i].type() == node.inputs[i].type()) << "rewriting fused group '" << node.name << "' changed an input's type";
    return Ref<OpNode>(new OpNode(node.name, node.op, node.attrs, std::move(inputs), node.types, node.body));
  }
  return make_op(node.op, std::move(inputs), node.attrs, node.name);
}

Graph rewrite_graph(const Graph& g, const RewriteRule& rule) {
  std::unordered_map<const NodeObj*, std::vector<Value>> mapped;
  auto map = [&](const Value& v) -> Value {
    if (!v.defined()) return v;
    auto it = mapped.find(v.node.get());
    return it == mapped.end() ? v : it->second[v.index];
  };
  bool changed = false;
  for (const auto& n : g.topo_order()) {
    if (n->kind != NodeKind::Op) continue;
    const auto& op = static_cast<const OpNode&>(*n);
    std::vector<Value> inputs;
    bool inputs_changed = false;
    for (const Value& v : op.inputs) {
      inputs.push_back(map(v));
      inputs_changed |= !(inputs.back() == v);
    }
    Ref<OpNode> node = inputs_changed ? with_inputs(op, std::move(inputs)) : Ref<OpNode>(&op);
    std::vector<Value> outs = rule(node);
    if (outs.empty()) {
      for (int i = 0; i < node->num_outputs(); ++i) outs.push_back(node->output(i));
    }
    KILN_CHECK(static_cast<int>(outs.size()) == n->num_outputs()) << "a rewrite rule replaced " << n->num_outputs() << " outputs of '" << n->name << "' with " << outs.size();
    for (int i = 0; i < n->num_outputs(); ++i) {
      KILN_CHECK(outs[i].type() == n->types[i]) << "a rewrite of '" << n->name << "' changed output " << i << " from " << n->types[i].str() << " to " << outs[i].type().str();
      changed |= !(outs[i] == n->output(i));
    }
    mapped[n.get()] = std::move(outs);
  }
  if (!changed) return g;
  std::vector<Value> outputs;
  for (const Value& v : g.outputs()) outputs.push_back(map(v));
  return Graph::make(g.inputs(), std::move(outputs), g.output_names());
}

}  // namespace kiln::graph
