// Small readers shared by the passes that match operator patterns
// (use_int8_dot.cpp, use_int8_conv.cpp, alter_conv_layout.cpp). Internal to
// the graph passes.
#ifndef KILN_GRAPH_PASSES_MATCH_HELPERS_H
#define KILN_GRAPH_PASSES_MATCH_HELPERS_H

#include "kiln/graph/graph.h"

namespace kiln::graph::match_detail {

/** The single-output operator `name` that makes v, else nullptr. */
inline const OpNode* producer(const Value& v, const char* name) {
  if (!v.defined() || v.node->kind != NodeKind::Op) return nullptr;
  const auto* n = static_cast<const OpNode*>(v.node.get());
  return n->op->name == name && n->num_outputs() == 1 ? n : nullptr;
}

/** The array of a constant value, else nullptr. */
inline const NDArray* constant_of(const Value& v) {
  if (!v.defined() || v.node->kind != NodeKind::Constant) return nullptr;
  return &static_cast<const ConstantNode&>(*v.node).data;
}

}  // namespace kiln::graph::match_detail

#endif  // KILN_GRAPH_PASSES_MATCH_HELPERS_H
