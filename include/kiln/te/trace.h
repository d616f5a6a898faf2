/** \file
 * The trace of a schedule: the list of primitive steps that made it.
 *
 * A step names its stage by index in the schedule's stage list and its axes
 * by index in that stage's leaf list at the time of the step (the names are
 * kept too, for people, and are not needed to replay). So a trace replays on
 * any DAG with the same workload key, whatever its tensors are called. The
 * JSON form is an array of objects, e.g.
 *   [{"kind":"split","stage":2,"stage_name":"C","axis":0,"axis_name":"i","factor":8}, ...]
 */
#ifndef KILN_TE_TRACE_H
#define KILN_TE_TRACE_H

#include <string>
#include <vector>

namespace kiln::te {

struct TraceStep {
  /** split, split_nparts, fuse, reorder, vectorize, unroll, parallel, bind, compute_at,
      compute_inline, compute_root, storage_align, pragma, cache_read, pack, cache_write, rfactor. */
  std::string kind;
  int stage = -1;
  std::string stage_name;
  /** Axis indices (leaf positions) the step takes, in order. */
  std::vector<int> axes;
  std::vector<std::string> axis_names;
  /** Integer arguments: factor / nparts / factor,offset / value / factor_axis. */
  std::vector<int> ints;
  /** String arguments: thread tag / pragma key / scope. */
  std::vector<std::string> strings;
  /** Other stages: compute_at target, cache_read readers. */
  std::vector<int> stages;
};

struct Trace {
  std::vector<TraceStep> steps;
  /** JSON text (an array of step objects). */
  std::string to_json() const;
  /** Parses JSON text; throws kiln::Error on malformed input naming the step. */
  static Trace from_json(const std::string& text);
  /** One line per step, readable. */
  std::string str() const;
};

}  // namespace kiln::te

#endif  // KILN_TE_TRACE_H
