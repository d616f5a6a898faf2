// The propagation rules: one per op family, in a table keyed by op name
// (rules.cpp). The registry's OpDef is left alone; the distribution pass
// owns its table.
#ifndef KILN_SRC_DIST_PROPAGATION_H
#define KILN_SRC_DIST_PROPAGATION_H

#include <functional>
#include <optional>
#include <vector>

#include "kiln/dist/sharding.h"
#include "kiln/graph/graph.h"

namespace kiln::dist {

/** What a rule sees: the node, its inputs' current specs and which inputs are free (unassigned leaves: any spec costs nothing). */
struct RuleInput {
  const graph::OpNode& node;
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

/**
 * How the lowered node is made from its local inputs when its attributes or
 * compile-time inputs hold global sizes (Reshape's shape). Absent: the
 * same op and attributes on the local inputs.
 */
using LocalizeFn = std::function<Ref<graph::OpNode>(const graph::OpNode& global, std::vector<graph::Value> local_inputs,
                                                           const std::vector<ShardingSpec>& out_specs, const Mesh& mesh)>;

struct ShardingRule {
  PropagateFn propagate;
  LocalizeFn localize;
};

/** The rule of an op; ops without one get the replicated rule (every input gathered, outputs replicated). */
const ShardingRule& sharding_rule(const std::string& op_name);

/** Estimated bytes each rank sends to turn `from` into `to` for a value of `type` (0 for a local slice). */
double reshard_cost(const ShardingSpec& from, const ShardingSpec& to, const graph::TensorType& type, const Mesh& mesh);

/** `spec` with every split that does not divide its dimension removed (those dims replicated). */
ShardingSpec fit_to(ShardingSpec spec, const std::vector<int64_t>& shape, const Mesh& mesh);

}  // namespace kiln::dist

#endif  // KILN_SRC_DIST_PROPAGATION_H
