// remove_identity: Identity and inference Dropout pass their first input on.
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"

namespace kiln::graph {

namespace {

// The constant scalar input i of n, if it is one.
std::optional<double> constant_scalar(const OpNode& n, size_t i) {
  if (n.inputs.size() <= i || !n.inputs[i].defined() || n.inputs[i].node->kind != NodeKind::Constant) return std::nullopt;
  return scalar_of(static_cast<const ConstantNode&>(*n.inputs[i].node).data);
}

// A Dropout with a true constant training_mode input is no identity: it is
// left for its compute to refuse (kiln.train rewrites it before this pass),
// unless its ratio is a constant 0, which drops nothing in training either
// (Swin's attention exports its dropout so, with training_mode true).
bool training_dropout(const OpNode& n) {
  if (n.op->name != "Dropout") return false;
  std::optional<double> training = constant_scalar(n, 2), ratio = constant_scalar(n, 1);
  return training && *training != 0 && !(ratio && *ratio == 0);
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
