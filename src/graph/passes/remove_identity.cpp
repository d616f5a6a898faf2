// remove_identity: Identity and inference Dropout pass their first input on.
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"

namespace kiln::graph {

namespace {

// A Dropout with a true constant training_mode input is no identity: it is
// left for its compute to refuse (kiln.train rewrites it before this pass).
bool training_dropout(const OpNode& n) {
  if (n.op->name != "Dropout" || n.inputs.size() < 3 || !n.inputs[2].defined() || n.inputs[2].node->kind != NodeKind::Constant) return false;
  std::optional<double> v = scalar_of(static_cast<const ConstantNode&>(*n.inputs[2].node).data);
  return v && *v != 0;
}

}  // namespace

Graph remove_identity(const Graph& g) {
  return rewrite_graph(g, [](const Ref<OpNode>& n) -> std::vector<Value> {
    if (!n->op->is_identity || training_dropout(*n)) return {};
    // Dropout's optional mask output has no inference meaning; it must be unread.
    std::vector<Value> outs{n->inputs[0]};
    for (int i = 1; i < n->num_outputs(); ++i) outs.push_back(n->output(i));
    return outs;
  });
}

}  // namespace kiln::graph
