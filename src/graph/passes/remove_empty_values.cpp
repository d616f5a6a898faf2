// remove_empty_values: values with a zero dimension hold no elements, so no
// kernel may compute them (an extent of 0 has no loop nest).
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"

namespace kiln::graph {

namespace {

bool is_empty(const Value& v) { return v.defined() && v.type().numel() == 0; }

}  // namespace

std::vector<Value> remove_empty_node(const Ref<OpNode>& n) {
  // An operator whose outputs are all empty: each becomes an empty constant (its inputs are never read).
  bool all_empty = n->num_outputs() > 0;
  for (int i = 0; i < n->num_outputs(); ++i) all_empty &= n->types[i].numel() == 0;
  if (all_empty) {
    std::vector<Value> outs;
    for (int i = 0; i < n->num_outputs(); ++i)
      outs.push_back(make_constant(n->name + ".empty" + std::to_string(i), NDArray::empty(n->types[i].shape, n->types[i].dtype))->output());
    return outs;
  }
  // A Concat leaves out its empty inputs (torch.roll by 0 along an axis exports a zero-width slice).
  if (n->op->name != "Concat") return {};
  std::vector<Value> kept;
  for (const Value& v : n->inputs)
    if (!is_empty(v)) kept.push_back(v);
  if (kept.size() == n->inputs.size()) return {};
  if (kept.size() == 1) return {kept[0]};
  return {with_inputs(*n, std::move(kept))->output()};
}

Graph remove_empty_values(const Graph& g) { return rewrite_graph(g, remove_empty_node); }

}  // namespace kiln::graph
