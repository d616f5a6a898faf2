// fold_transposes (passes.h): a Transpose of a Transpose is one Transpose,
// or nothing when the two undo each other.
//
// Differentiation makes such pairs: the gradient of MatMul(A, Transpose(W))
// with respect to A reads Transpose(Transpose(W)), which is W. Each pair left
// in the graph is a kernel that copies a whole weight at every step.
#include <vector>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"

namespace kiln::graph {

namespace {

// Output dimension k of the Transpose n is input dimension perm[k]; no perm reverses.
std::vector<int64_t> perm_of(const OpNode& n) {
  std::vector<int64_t> p = n.attrs.has("perm") ? n.attrs.get_ints("perm") : std::vector<int64_t>{};
  if (p.empty())
    for (int64_t k = n.inputs[0].type().ndim() - 1; k >= 0; --k) p.push_back(k);
  return p;
}

bool is_transpose(const NodeObj* n) { return n->kind == NodeKind::Op && static_cast<const OpNode*>(n)->op->name == "Transpose"; }

}  // namespace

Graph fold_transposes(const Graph& g) {
  return rewrite_graph(g, [](const Ref<OpNode>& n) -> std::vector<Value> {
    if (n->op->name != "Transpose" || !n->inputs[0].defined() || !is_transpose(n->inputs[0].node.get())) return {};
    const OpNode& inner = static_cast<const OpNode&>(*n->inputs[0].node);
    std::vector<int64_t> outer_perm = perm_of(*n), inner_perm = perm_of(inner), perm;
    bool identity = true;
    for (size_t k = 0; k < outer_perm.size(); ++k) {
      perm.push_back(inner_perm[outer_perm[k]]);  // out[k] = mid[outer[k]] = x[inner[outer[k]]]
      identity = identity && perm.back() == static_cast<int64_t>(k);
    }
    const Value& x = inner.inputs[0];
    if (identity) return {x};
    return {make_op("Transpose", {x}, Attrs({{"perm", AttrValue(perm)}}), n->name)->output()};
  });
}

}  // namespace kiln::graph
