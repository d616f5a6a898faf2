/** \file
 * The shapes of a dynamic model plan (model.h) at one call: binding the
 * shape variables from the inputs, checking them, and evaluating every
 * buffer's shape and the arena's layout.
 *
 * A variable takes its value from the first input (in order) that has it as
 * a plain dimension; every other input dimension, each declared range and
 * each constraint is then checked, and a failure names the input, the
 * dimension, the variable, its value and the constraint, and says the fix.
 * The arena is planned by plan_memory (memory_plan.h) over the arena
 * buffers' lifetimes at the evaluated sizes. ModelRunner caches the result
 * per tuple of values; these functions are its uncached steps, public for
 * the graph compiler and the memory queries.
 */
#ifndef KILN_RUNTIME_MODEL_SHAPES_H
#define KILN_RUNTIME_MODEL_SHAPES_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/runtime/memory_plan.h"
#include "kiln/runtime/model.h"
#include "kiln/support/error.h"

namespace kiln {

/** A shape the model cannot run with: typed, so that the C API answers KILN_ERR_MISMATCH without reading the message. */
class ShapeError : public Error {
 public:
  using Error::Error;
};

/** Where a shape variable's value comes from: an input's dimension. */
struct ShapeVarSource {
  int input = -1;
  int dim = -1;
};

/**
 * Per shape variable, the first input that has it as a plain dimension.
 * Throws kiln::Error (a plan the runtime cannot bind) naming a variable that
 * no input has so.
 */
std::vector<ShapeVarSource> shape_var_sources(const ModelPlan& plan);

/**
 * The values of the shape variables for `inputs` (already checked for count
 * and rank): read at `sources`, then every input dimension, range and
 * constraint checked. Throws ShapeError.
 */
std::vector<int64_t> bind_shape_values(const ModelPlan& plan, const std::vector<ShapeVarSource>& sources, const std::vector<NDArray>& inputs);

/** Checks values (one per variable) against the ranges and constraints; throws ShapeError naming each value as "from ...". */
void check_shape_values(const ModelPlan& plan, const std::vector<int64_t>& values, const std::vector<std::string>& origins = {});

/** A dynamic plan at one tuple of shape values. */
struct BoundShapes {
  std::vector<int64_t> values;               ///< per shape variable
  std::vector<std::vector<int64_t>> shapes;  ///< per buffer
  std::vector<int64_t> offsets;              ///< per buffer: the arena offset (-1 for other kinds)
  MemoryPlanStats memory;                    ///< the arena for these values
};

/** Evaluates every buffer's shape at `values` (checked first) and plans the arena. Throws ShapeError. */
BoundShapes bind_plan_shapes(const ModelPlan& plan, const std::vector<int64_t>& values);

/** The arena of a run at `values` (a static plan: none, and its arena_bytes). */
MemoryPlanStats plan_memory_at(const ModelPlan& plan, const std::vector<int64_t>& values);

/**
 * The arena at every variable's range maximum; nullopt when one has no
 * range. An upper bound for every shape in range when each buffer grows with
 * the variables (dims built of +, *, // of non-negative terms) and the
 * planner's layout does too. The planner is a greedy best fit, whose layout
 * need not grow with the sizes; a sure bound for every shape in range is
 * `naive_bytes` plus 63 bytes of alignment per arena buffer (no layout
 * exceeds the sum of its aligned buffers).
 */
std::optional<MemoryPlanStats> plan_memory_bound(const ModelPlan& plan);

}  // namespace kiln

#endif  // KILN_RUNTIME_MODEL_SHAPES_H
