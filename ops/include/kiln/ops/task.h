/** \file
 * A tuning task: one compute DAG on one target, keyed by the workload key.
 * Tuning the same task again resumes from its records in the database.
 */
#ifndef KILN_OPS_TASK_H
#define KILN_OPS_TASK_H

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
  /** Floating-point operations of one run (for GFLOP/s), counted from the DAG. */
  double flop = 0;

  /** A fresh schedule of the outputs (every candidate starts from one). */
  te::Schedule fresh_schedule() const { return te::create_schedule(outputs); }
};

/** Builds a task: outputs are the non-placeholder args; flop is counted from the DAG. */
Task make_task(const std::vector<te::Tensor>& args, const Target& target, const std::string& name = "");

/** Multiply-adds count as 2, other arithmetic and math calls as 1, per output element. */
double count_flop(const std::vector<te::Tensor>& outputs);

}  // namespace kiln::ops

#endif  // KILN_OPS_TASK_H
