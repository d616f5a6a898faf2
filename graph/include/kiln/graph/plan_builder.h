/** \file
 * From an optimized (fused) graph to the executor's plan: one step per
 * group, in graph order, each group's kernel built by the caller (the CPU
 * executor builds LLVM kernels, the GPU executor CUDA ones); groups with the
 * same workload key and argument order share one kernel; intermediates get
 * arena offsets from the memory planner (memory_plan.h).
 */
#ifndef KILN_GRAPH_PLAN_BUILDER_H
#define KILN_GRAPH_PLAN_BUILDER_H

#include <functional>
#include <string>
#include <vector>

#include "kiln/graph/executor.h"
#include "kiln/graph/to_te.h"

namespace kiln::graph {

struct PlannedGraph {
  ModelPlan plan;
  std::vector<GroupInfo> groups;  ///< per step
  MemoryPlanStats memory;
  int64_t weight_bytes = 0;
};

/**
 * Builds kernel `name` (the plan's kernel_names[i], called with the group's
 * inputs, its constants, then its outputs) for `dag`; returns its schedule,
 * schedule_detail and flop.
 */
using KernelFactory = std::function<GroupInfo(const GraphDag& dag, const std::string& name)>;

/** Plans `g` (every op node a fused group, lowered by to_te(body, gpu)); calls `build` once per distinct kernel. */
PlannedGraph plan_graph(const Graph& g, const KernelFactory& build, bool gpu = false);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_PLAN_BUILDER_H
