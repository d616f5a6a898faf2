// eliminate_common_subexpr: one node per distinct (op, attributes, inputs),
// and one constant per distinct (type, bytes) among small constants.
#include <cstring>
#include <map>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"

namespace kiln::graph {

namespace {

// Constants up to this size are compared by content (exporters repeat small
// shape and scale constants); weights are compared by identity only.
constexpr int64_t kCompareBytes = 4096;

std::string constant_key(const ConstantNode& c) {
  std::string key = c.types[0].str();
  key.append(static_cast<const char*>(c.data.data()), c.data.nbytes());
  return key;
}

}  // namespace

Graph eliminate_common_subexpr(const Graph& g) {
  std::map<std::string, Value> constants;
  auto canon = [&](const Value& v) -> Value {
    if (!v.defined() || v.node->kind != NodeKind::Constant || v.type().bytes() > kCompareBytes) return v;
    auto [it, fresh] = constants.emplace(constant_key(static_cast<const ConstantNode&>(*v.node)), v);
    return it->second;
  };
  // (op, inputs) -> the nodes kept so far; their attributes are compared exactly.
  std::map<std::pair<const OpDef*, std::vector<std::pair<const NodeObj*, int>>>, std::vector<Ref<OpNode>>> seen;
  auto outputs_of = [](const Ref<OpNode>& n) {
    std::vector<Value> outs;
    for (int i = 0; i < n->num_outputs(); ++i) outs.push_back(n->output(i));
    return outs;
  };
  return rewrite_graph(g, [&](const Ref<OpNode>& n) -> std::vector<Value> {
    std::vector<Value> inputs;
    bool changed = false;
    for (const Value& v : n->inputs) {
      inputs.push_back(canon(v));
      changed |= !(inputs.back() == v);
    }
    Ref<OpNode> node = changed ? with_inputs(*n, inputs) : n;
    if (node->body.defined()) return changed ? outputs_of(node) : std::vector<Value>{};
    std::vector<std::pair<const NodeObj*, int>> key_inputs;
    for (const Value& v : inputs) key_inputs.push_back({v.node.get(), v.index});
    std::vector<Ref<OpNode>>& same_inputs = seen[{node->op, key_inputs}];
    for (const Ref<OpNode>& k : same_inputs)
      if (k->attrs == node->attrs) return outputs_of(k);
    same_inputs.push_back(node);
    return changed ? outputs_of(node) : std::vector<Value>{};
  });
}

}  // namespace kiln::graph
