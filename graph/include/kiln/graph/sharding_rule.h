/** \file
 * An operator's sharding rule: how the distribution pass (kiln_dist) places
 * the operator on a mesh. Each OpDef carries one (OpDef::sharding), declared
 * beside its other parts in its family's file (graph/src/ops/); the pass
 * walks the graph producers first and asks each node's rule, and refuses an
 * op whose entry has none.
 *
 *   propagate  the node and its inputs' current specs -> the spec each input
 *              must have (the pass inserts collectives where a producer gives
 *              another) and the spec of each output
 *   localize   optional: makes the rank's node from its local inputs, for ops
 *              whose attributes or compile-time inputs hold global sizes
 *              (Reshape's shape); absent: the same op and attributes
 *   weight_splits
 *              optional: the op's weight input and the dims of it worth a
 *              split, the choices auto_shard searches over (MatMul's B: rows
 *              or columns), and which one it contracts (the Megatron
 *              strategy's row split); absent: the op brings no choice
 *
 * replicated_rule() (every input gathered) and elementwise_rule() are the two
 * rules most ops name; rules of one family live beside its ops.
 */
#ifndef KILN_GRAPH_SHARDING_RULE_H
#define KILN_GRAPH_SHARDING_RULE_H

#include <functional>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/graph/sharding.h"

namespace kiln::graph {

/** What a rule sees: the node, its inputs' current specs and which inputs are free (unassigned leaves: any spec costs nothing). */
struct RuleInput {
  const OpNode& node;
  const Mesh& mesh;
  std::vector<ShardingSpec> in;  ///< empty spec (ndim 0) for absent inputs
  std::vector<bool> free;
};

/** A rule's answer: the spec each input must have (absent / compile-time inputs: ignored) and the spec of each output. */
struct RuleOutput {
  std::vector<ShardingSpec> in;
  std::vector<ShardingSpec> out;
};

using PropagateFn = std::function<RuleOutput(const RuleInput&)>;

/** The rank's node made from the global node, its local inputs, the specs of its outputs and the mesh. */
using LocalizeFn = std::function<Ref<OpNode>(const OpNode& global, std::vector<Value> local_inputs, const std::vector<ShardingSpec>& out_specs,
                                             const Mesh& mesh)>;

/** A weight input of a node (used when it is a constant or a graph input) and the dims auto_shard tries to split it on. */
struct WeightSplits {
  int input = -1;
  std::vector<int> dims;  ///< empty: no choice
  /** The dim the op contracts (a split of it leaves partial sums), or -1: the Megatron strategy splits a matrix weight's contracted dim after an output-dim split. */
  int contracted = -1;
};
using WeightSplitsFn = std::function<WeightSplits(const OpNode& node)>;

struct ShardingRule {
  /** A short name ("elementwise", "matmul", "replicated"), for messages and tests. */
  std::string name;
  /** Required for the op to be distributed; empty: the pass refuses the op. */
  PropagateFn propagate;
  LocalizeFn localize;
  WeightSplitsFn weight_splits;

  bool defined() const { return static_cast<bool>(propagate); }
};

/** Every input gathered whole, every output replicated: right for any op, at the price of the gathers. */
ShardingRule replicated_rule();
/** Elementwise and broadcast ops: the output takes one operand's spec, the one whose resharding of the others costs least. */
ShardingRule elementwise_rule();

/** Estimated bytes each rank sends to turn `from` into `to` for a value of `type` (0 for a local slice). */
double reshard_cost(const ShardingSpec& from, const ShardingSpec& to, const TensorType& type, const Mesh& mesh);

/** `spec` with every split that does not divide its dimension removed (those dims replicated). */
ShardingSpec fit_to(ShardingSpec spec, const std::vector<int64_t>& shape, const Mesh& mesh);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_SHARDING_RULE_H
