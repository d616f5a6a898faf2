// fold_constants: operators over constants become constants (passes.h).
#include "kiln/graph/kernel_builder.h"
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"

namespace kiln::graph {

namespace {

// A symbolic count is not known to be 0 (a static 0 factor folds it to 0).
bool is_empty(const Value& v) { return v.defined() && v.type().numel_dim() == 0; }

// Values with a zero dimension hold no elements, so no kernel may compute
// them (an extent of 0 has no loop nest): an operator whose outputs are all
// empty becomes empty constants, and a Concat leaves out its empty inputs
// (torch.roll by 0, in Swin's shifted windows, exports a zero-width Slice).
// Returns the replacement outputs, or {} to keep the node.
std::vector<Value> without_empty_values(const Ref<OpNode>& n) {
  bool all_empty = n->num_outputs() > 0;
  for (int i = 0; i < n->num_outputs(); ++i) all_empty &= n->types[i].numel_dim() == 0;
  if (all_empty) {
    std::vector<Value> outs;
    for (int i = 0; i < n->num_outputs(); ++i)
      outs.push_back(make_constant(n->name + ".empty" + std::to_string(i), NDArray::empty(n->types[i].shape, n->types[i].dtype))->output());
    return outs;
  }
  if (n->op->name != "Concat") return {};
  std::vector<Value> kept;
  for (const Value& v : n->inputs)
    if (!is_empty(v)) kept.push_back(v);
  if (kept.size() == n->inputs.size()) return {};
  if (kept.size() == 1) return {kept[0]};
  return {with_inputs(*n, std::move(kept))->output()};
}

bool all_inputs_constant(const OpNode& n) {
  for (const Value& v : n.inputs)
    if (v.defined() && v.node->kind != NodeKind::Constant) return false;
  return true;
}

}  // namespace

std::vector<Value> fold_node(const Ref<OpNode>& n, int64_t max_bytes) {
  if (n->body.defined()) return {};
  // Empty values fold without a kernel; a Concat rebuilt without its empty inputs may fold in turn.
  if (std::vector<Value> rebuilt = without_empty_values(n); !rebuilt.empty()) {
    if (rebuilt.size() == 1 && rebuilt[0].node->kind == NodeKind::Op) {
      std::vector<Value> folded = fold_node(Ref<OpNode>(static_cast<const OpNode*>(rebuilt[0].node.get())), max_bytes);
      if (!folded.empty()) return folded;
    }
    return rebuilt;
  }
  // An op with `evaluate` and no compute (Shape) needs only its input types.
  bool from_types = n->op->evaluate && !n->op->compute;
  if (!from_types && (!all_inputs_constant(*n) || n->inputs.empty())) return {};
  // Shape of a value with a symbolic dimension is known only at run time.
  for (const Value& v : n->inputs)
    if (from_types && v.defined() && !v.type().is_static()) return {};
  if (!n->op->evaluate && !n->op->compute) return {};
  // Constant inputs but a symbolic result (Range of a symbolic length): its size is known only at run time.
  for (const TensorType& t : n->types)
    if (!t.is_static()) return {};
  int64_t bytes = 0;
  for (const TensorType& t : n->types) bytes += t.bytes();
  if (bytes > max_bytes) return {};
  std::vector<NDArray> in;
  for (const Value& v : n->inputs)
    in.push_back(v.defined() && v.node->kind == NodeKind::Constant ? static_cast<const ConstantNode&>(*v.node).data : NDArray());
  std::vector<NDArray> out = evaluate_node(*n, in);
  std::vector<Value> values;
  for (size_t i = 0; i < out.size(); ++i)
    values.push_back(make_constant(n->name + (out.size() > 1 ? ":" + std::to_string(i) : ""), out[i])->output());
  return values;
}

Graph fold_constants(const Graph& g, int64_t max_bytes) {
  return rewrite_graph(g, [&](const Ref<OpNode>& n) { return fold_node(n, max_bytes); });
}

}  // namespace kiln::graph
