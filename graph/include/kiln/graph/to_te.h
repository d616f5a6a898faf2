/** \file
 * A graph (a fused group's body, or a one-operator graph) as one compute
 * DAG: each operator's compute applied in topo order, the graph's inputs and
 * its constants as placeholders. This DAG is the group's kernel, its tuning
 * task and its workload key.
 */
#ifndef KILN_GRAPH_TO_TE_H
#define KILN_GRAPH_TO_TE_H

#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/te/operation.h"

namespace kiln::graph {

struct GraphDag {
  /** One placeholder per graph input, in order. */
  std::vector<te::Tensor> inputs;
  /** The constants the kernel reads as arguments, and their placeholders. */
  std::vector<Ref<ConstantNode>> constants;
  std::vector<te::Tensor> constant_tensors;
  /** One tensor per graph output. */
  std::vector<te::Tensor> outputs;

  /** The graph lowered (for a kernel over symbolic extents: bound to sizes to find its tuned twin's records). */
  Graph source;

  /** The kernel's arguments in call order: inputs, constants, outputs. */
  std::vector<te::Tensor> args() const;
};

/**
 * Lowers `g` to tensor expressions (with `gpu`, each operator's GPU form: OpCall::gpu). Constants of one element become
 * immediates (inlined into their readers, as a scale or an epsilon should
 * be); larger ones become placeholders. A graph output that is an input or
 * a constant gets a copy stage, so every output is computed by the kernel.
 * Throws kiln::Error naming the node whose operator has no compute.
 */
GraphDag to_te(const Graph& g, bool gpu = false);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_TO_TE_H
