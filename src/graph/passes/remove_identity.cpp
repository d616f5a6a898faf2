// remove_identity: Identity and inference Dropout pass their first input on.
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"

namespace kiln::graph {

Graph remove_identity(const Graph& g) {
  return rewrite_graph(g, [](const Ref<OpNode>& n) -> std::vector<Value> {
    if (!n->op->is_identity) return {};
    // Dropout's optional mask output has no inference meaning; it must be unread.
    std::vector<Value> outs{n->inputs[0]};
    for (int i = 1; i < n->num_outputs(); ++i) outs.push_back(n->output(i));
    return outs;
  });
}

}  // namespace kiln::graph
