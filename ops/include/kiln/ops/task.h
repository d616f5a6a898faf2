/** \file
 * A tuning task: one compute DAG on one target, keyed by the workload key.
 * Tuning the same task again resumes from its records in the database.
 */
#ifndef KILN_OPS_TASK_H
#define KILN_OPS_TASK_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/codegen/target.h"
#include "kiln/te/schedule.h"

namespace kiln::ops {

struct Task {
  /** The kernel's arguments in call order: inputs (placeholders) and outputs. */
  std::vector<te::Tensor> args;
  /** The computed tensors among args (the DAG's outputs). */
  std::vector<te::Tensor> outputs;
  Target target;
  std::string workload_key;
  /** A readable name, e.g. "matmul_1024x1024x1024". */
  std::string name;
  /** Floating-point operations of one run (for GFLOP/s), counted from the DAG
   * (at the size hints where extents are symbolic). */
  double flop = 0;
  /**
   * Dynamic shapes: the likely value of each shape variable (by name) the
   * extents are expressions of ("seq" -> 128). The rules choose tiles as for
   * that size and leave the rest of any other size to tails; a variable not
   * named here counts as kDefaultSizeHint.
   */
  std::map<std::string, int64_t> size_hints;

  /** A fresh schedule of the outputs (every candidate starts from one). */
  te::Schedule fresh_schedule() const { return te::create_schedule(outputs); }
};

/** The size a shape variable without a hint is tiled for: a typical sequence or a batch of rows. */
inline constexpr int64_t kDefaultSizeHint = 128;

/** Builds a task: outputs are the non-placeholder args; flop is counted from the DAG. */
Task make_task(const std::vector<te::Tensor>& args, const Target& target, const std::string& name = "",
               const std::map<std::string, int64_t>& size_hints = {});

/** Multiply-adds count as 2, other arithmetic and math calls as 1, per output element (extents at the size hints). */
double count_flop(const std::vector<te::Tensor>& outputs, const std::map<std::string, int64_t>& size_hints = {});

/**
 * An extent at the size hints: each shape variable replaced by its hint
 * (kDefaultSizeHint when it has none), at least 1. Throws kiln::Error when
 * the extent is not an integer expression of shape variables.
 */
int64_t hinted_extent(const Expr& extent, const std::map<std::string, int64_t>& size_hints);
/** Whether the extent is an expression of shape variables rather than a constant. */
bool is_symbolic_extent(const Expr& extent);

}  // namespace kiln::ops

#endif  // KILN_OPS_TASK_H
