/** \file
 * Memory planning: every intermediate value of a model (an output of one
 * kernel read by later kernels) gets an offset in one arena. The graph
 * compiler plans a static model once; ModelRunner (model.h) plans a model
 * with shape variables once per new shape, so the planner lives here. Two values
 * share bytes only when their lifetimes, over the execution order, do not
 * overlap. An elementwise group may write its output over an input that
 * dies at that group (in place) when the shapes match, and a join's
 * producers may write straight into their slices of its bytes (view_of).
 */
#ifndef KILN_RUNTIME_MEMORY_PLAN_H
#define KILN_RUNTIME_MEMORY_PLAN_H

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

/** One value to place: its size and the steps that write and last read it. */
struct PlannedValue {
  int64_t bytes = 0;
  int first_step = 0;  ///< the step that writes it
  int last_step = 0;   ///< the last step that reads it (first_step when never read)
  /** A value this one may overwrite in place (-1: none): it must die at first_step and be as large. */
  int inplace_of = -1;
  /**
   * A value whose bytes lie inside another's (-1: none), view_offset bytes
   * in: a producer writing its slice of a join in place. The host's bytes
   * hold the view's; plan_memory widens the host's lifetime to its views'.
   * Neither takes part in in-place reuse.
   */
  int view_of = -1;
  int64_t view_offset = 0;
  int64_t offset = -1;  ///< set by plan_memory
};

struct MemoryPlanStats {
  int64_t arena_bytes = 0;  ///< the arena's size
  int64_t naive_bytes = 0;  ///< the sum of all values (no reuse)
  int64_t peak_bytes = 0;   ///< the most bytes live at one step: no plan can do better
  int inplace = 0;          ///< values that took their input's bytes
};

/**
 * Places `values` in one arena (offsets aligned to `alignment` bytes):
 * largest first, each at the lowest offset that no value alive at the same
 * time occupies (a best fit over the gaps). Fills `offset`; returns the
 * arena size and the figures to compare it with.
 */
MemoryPlanStats plan_memory(std::vector<PlannedValue>* values, int64_t alignment = 64);

}  // namespace kiln

#endif  // KILN_RUNTIME_MEMORY_PLAN_H
