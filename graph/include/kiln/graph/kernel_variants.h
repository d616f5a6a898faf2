/** \file
 * Size-dispatched kernel variants of a fused group over symbolic extents
 * (BladeDISC's speculative versions). One schedule cannot serve every size
 * (a register tile of 128 rows for 1 row is all tail; a packed B pays from
 * 64 rows, not at 1), so a group keeps a kernel per size bucket of the shape
 * variables it reads, scheduled for the bucket's hint (ops::Task::size_hints),
 * and the runtime picks one per new shape (ModelStep::variants). Buckets whose
 * schedule decisions come out the same share one kernel: a group without
 * size-dependent choices keeps one.
 */
#ifndef KILN_GRAPH_KERNEL_VARIANTS_H
#define KILN_GRAPH_KERNEL_VARIANTS_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/graph/to_te.h"
#include "kiln/runtime/model.h"

namespace kiln::graph {

/** Likely sizes per shape variable (by name), as ops::Task::size_hints takes them. */
using SizeHints = std::map<std::string, int64_t>;

/** Sizes [lo, hi] of one shape variable, scheduled as if it were `hint`. */
struct SizeBucket {
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t hint = 0;
};

/**
 * The policy's buckets of a variable: [0, 1] at 1 (no tiles along it: a
 * batch of one leaves the register tile to another axis), [2, 16] at 8,
 * [17, 256] at 128 (the default hint), 257 up at 512; clipped
 * to `range` where the model declares one (a range inside one bucket gives
 * one bucket, its hint clamped into the range).
 */
std::vector<SizeBucket> size_buckets(const std::optional<ShapeRange>& range);

/** One kernel of a group to build: the hints to schedule it at and where the runtime calls it. */
struct VariantSpec {
  SizeHints hints;
  std::vector<StepVariant::Condition> when;  ///< on the model's shape variables (ShapeExpr params)
  std::string text;                          ///< the conditions readable: "seq in [2, 16]", "" for no condition
};

/**
 * The buckets' combinations over the shape variables `dag` reads (`vars`:
 * the model's shape variables in plan order, with `ranges`), the fallback
 * first: the combination holding each variable's default hint (its range's
 * nearest size when it has a range). A DAG over no variable gives the fallback alone.
 */
std::vector<VariantSpec> variant_specs(const GraphDag& dag, const std::vector<std::string>& vars,
                                       const std::vector<std::optional<ShapeRange>>& ranges);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_KERNEL_VARIANTS_H
