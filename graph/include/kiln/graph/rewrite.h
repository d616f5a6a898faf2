/** \file
 * The one way graph passes rebuild a graph: bottom-up over the topo order,
 * each operator node first gets its inputs remapped (a new node, with its
 * types inferred again, only when an input changed; otherwise the very same
 * node), then a rule may replace its outputs.
 */
#ifndef KILN_GRAPH_REWRITE_H
#define KILN_GRAPH_REWRITE_H

#include <functional>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::graph {

/**
 * Given an operator node whose inputs are already rewritten, returns one
 * value per output to use instead of its outputs, or {} to keep the node.
 */
using RewriteRule = std::function<std::vector<Value>(const Ref<OpNode>& node)>;

/** Applies `rule` to every operator node, producers first; returns g itself when nothing changed. */
Graph rewrite_graph(const Graph& g, const RewriteRule& rule);

/** A node like `node` with other inputs (same op, attributes, name and body), its types inferred again. */
Ref<OpNode> with_inputs(const OpNode& node, std::vector<Value> inputs);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_REWRITE_H
