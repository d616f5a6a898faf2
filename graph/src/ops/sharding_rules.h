// Shared pieces of the operators' sharding rules (sharding_rule.h): small
// spec helpers, and the rules several families name (replicated and
// elementwise are public; channel_rule serves pools, their gradients and
// batch norm). A family's own rules (MatMul's, Reshape's) sit in its file.
#ifndef KILN_GRAPH_OPS_SHARDING_RULES_H
#define KILN_GRAPH_OPS_SHARDING_RULES_H

#include <string>
#include <vector>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/sharding_rule.h"

namespace kiln::graph::ops_detail {

using Axes = std::vector<int>;

/** The replicated spec of rank n. */
inline ShardingSpec R(int n) { return ShardingSpec::replicated(n); }
inline const TensorType& input_type(const RuleInput& r, int i) { return r.node.inputs[i].type(); }
/** Whether input i is given (optional inputs may be absent). */
inline bool has(const RuleInput& r, int i) { return i < static_cast<int>(r.node.inputs.size()) && r.node.inputs[i].defined(); }
/** Input i's spec without partial sums; a free input (an unassigned weight) brings none of its own: the rule decides it. */
ShardingSpec seen(const RuleInput& r, int i);
/** Removes axes used twice (keeps the first use), so a rule's merged choice is a valid spec. */
void dedupe(std::vector<Axes*> groups);
/** A RuleOutput with every given input replicated (absent ones: an empty spec) and no outputs yet. */
RuleOutput with_inputs_default(const RuleInput& r);
/** The output spec `out` seen from an input aligned to the right (numpy broadcasting): broadcast dims replicated. */
ShardingSpec project(const ShardingSpec& out, const std::vector<int64_t>& out_shape, const std::vector<int64_t>& in_shape);
/** Whether a dimension of size `size` splits evenly over `axes`. */
bool splits(int64_t size, const Axes& axes, const Mesh& mesh);
/** Global sizes (an attribute or a compile-time input) as the rank's block sizes under `spec` (-1 and 0 keep their meaning). */
std::vector<int64_t> localized(std::vector<int64_t> shape, const ShardingSpec& spec, const Mesh& mesh);
/** An int64 constant node (a localized shape input). */
Value int64_constant(const std::string& name, const std::vector<int64_t>& v);

/** Pools, their gradients and inference batch norm: batch and channels carry, spatial dims are gathered; per-channel inputs follow the channels. */
RuleOutput channel_propagate(const RuleInput& r);
ShardingRule channel_rule();
/** channel_rule for gradient ops whose `input_shape` attribute holds the global shape of their output. */
ShardingRule channel_rule_with_input_shape();
/** Localizes the `input_shape` attribute (kiln.ConvGradInput, the pool gradients). */
Ref<OpNode> input_shape_localize(const OpNode& g, std::vector<Value> ins, const std::vector<ShardingSpec>& outs, const Mesh& mesh);

}  // namespace kiln::graph::ops_detail

#endif  // KILN_GRAPH_OPS_SHARDING_RULES_H
