/** \file
 * The graph's names for the arena planner, which lives in kiln_runtime
 * (kiln/runtime/memory_plan.h) because ModelRunner plans models with shape
 * variables once per new shape at run time.
 */
#ifndef KILN_GRAPH_MEMORY_PLAN_H
#define KILN_GRAPH_MEMORY_PLAN_H

#include "kiln/runtime/memory_plan.h"

namespace kiln::graph {

using kiln::MemoryPlanStats;
using kiln::plan_memory;
using kiln::PlannedValue;

}  // namespace kiln::graph

#endif  // KILN_GRAPH_MEMORY_PLAN_H
