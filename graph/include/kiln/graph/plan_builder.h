/** \file
 * From an optimized (fused) graph to the executor's plan: one step per
 * group, in graph order, each group's kernel built by the caller (the CPU
 * executor builds LLVM kernels, the GPU executor CUDA ones); groups with the
 * same workload key and argument order share one kernel (or one set of
 * size-dispatched variants, kernel_variants.h); intermediates get
 * arena offsets from the memory planner (memory_plan.h).
 */
#ifndef KILN_GRAPH_PLAN_BUILDER_H
#define KILN_GRAPH_PLAN_BUILDER_H

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/graph/executor.h"
#include "kiln/graph/kernel_variants.h"
#include "kiln/graph/to_te.h"

namespace kiln::graph {

struct PlannedGraph {
  ModelPlan plan;
  std::vector<GroupInfo> groups;  ///< per step
  MemoryPlanStats memory;
  int64_t weight_bytes = 0;
  int joins_in_place = 0;  ///< joins whose producers write into their slices (no step of their own)
};

/**
 * Builds kernel `name` (the plan's kernel_names[i], called with the group's
 * inputs, its constants, then its outputs) for `dag`, scheduled for the
 * sizes `hints` where its extents are symbolic; returns its schedule,
 * schedule_detail and flop.
 */
using KernelFactory = std::function<GroupInfo(const GraphDag& dag, const std::string& name, const SizeHints& hints)>;
/**
 * The schedule decisions the factory would take for `dag` at `hints`, as a
 * key: hints with equal keys share one kernel (kernel_variants.h).
 */
using ScheduleProbe = std::function<std::string(const GraphDag& dag, const SizeHints& hints)>;

struct PlanOptions {
  bool gpu = false;  ///< lower each group with to_te(body, gpu)
  /** With a probe, a contraction or reduction group over shape variables keeps a kernel per distinct schedule of its size buckets; without, one. */
  ScheduleProbe probe;
  /** CompileOptions::dims: the ranges the buckets are clipped to. */
  std::map<std::string, ShapeRange> dims;
  /** Build every group's kernels together on threads after planning (`build` thread-safe); false: each group as it is planned. */
  bool parallel_groups = false;
};

/**
 * Plans `g` (every op node a fused group); calls `build` once per distinct
 * kernel. A group's size variants are probed and built on threads: `probe`
 * and `build` must be safe to call concurrently.
 */
PlannedGraph plan_graph(const Graph& g, const KernelFactory& build, const PlanOptions& options = {});

}  // namespace kiln::graph

#endif  // KILN_GRAPH_PLAN_BUILDER_H
