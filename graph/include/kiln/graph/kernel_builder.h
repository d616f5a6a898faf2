/** \file
 * From a graph (a fused group's body) to a compiled kernel: lowers it to
 * one compute DAG (to_te.h), schedules it (the tuning database's best record
 * for its workload key when a database is given and has one; otherwise the
 * default schedule the schedule rules (kiln/ops/search_space.h) derive from
 * the target; or none at all
 * for a quick reference kernel) and builds it.
 */
#ifndef KILN_GRAPH_KERNEL_BUILDER_H
#define KILN_GRAPH_KERNEL_BUILDER_H

#include <map>
#include <string>
#include <vector>

#include "kiln/codegen/target.h"
#include "kiln/graph/bind_shapes.h"
#include "kiln/graph/to_te.h"
#include "kiln/runtime/module.h"
#include "kiln/te/schedule.h"

namespace kiln::ops {
struct Task;
}

namespace kiln::graph {

enum class ScheduleSource : uint8_t {
  Plain,     ///< no schedule steps: serial loops (constant folding, reference runs)
  Default,   ///< the schedule rules (kiln_ops) seeded from the target
  Database,  ///< the database's best record
};
const char* schedule_source_name(ScheduleSource s);

struct GroupKernel {
  GraphDag dag;
  Module module;  ///< one kernel, named `name`
  std::string name;
  std::string workload_key;
  double flop = 0;
  ScheduleSource source = ScheduleSource::Plain;
  /** How it was scheduled: the sketch and decisions of a default schedule, the trace of a record. */
  std::string schedule_detail;
  /** Where the DB has no record for the build's target but has some for another core count: that target (else empty). */
  std::string records_only_for;
};

/**
 * The schedule of a group's task (any target): the database's best record
 * when `db_path` names one that has it, else the default of the schedule
 * rules; *source and *detail say which (the record's trace, or the sketch
 * and decisions). Where the DB has no record of the task's target but has
 * some of the same target with another -num-cores, the nearest such target
 * goes to *records_only_for (empty otherwise): the build does not take them
 * (ops::other_core_count_targets says why), it says so.
 */
te::Schedule group_schedule(const ops::Task& task, const std::string& db_path, ScheduleSource* source, std::string* detail,
                            std::string* records_only_for = nullptr);

/**
 * Builds the kernel of `body`. With `plain`, no schedule; else the DB's best
 * record when `db_path` names a database that has one, else the default.
 */
GroupKernel build_group_kernel(const Graph& body, const Target& target, const std::string& name, bool plain = false,
                               const std::string& db_path = "");
/**
 * The same for a DAG lowered already (to_te). A DAG over symbolic extents is
 * scheduled for `likely`'s first binding (the task's size hints) and, with a
 * database, takes the record of the first binding whose static twin (the
 * group bound to those sizes) has one, replayed on the symbolic kernel.
 */
GroupKernel build_group_kernel(GraphDag dag, const Target& target, const std::string& name, bool plain = false,
                               const std::string& db_path = "", const std::vector<ShapeBinding>& likely = {});

/** Runs the one-operator graph of `node` on `inputs` (one per node input; absent inputs undefined) with a plain kernel. */
std::vector<NDArray> evaluate_node(const struct OpNode& node, const std::vector<NDArray>& inputs);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_KERNEL_BUILDER_H
