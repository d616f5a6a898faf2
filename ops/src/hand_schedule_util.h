// Small queries the hand-written CPU schedules (cpu_amx, cpu_dwpw, cpu_grouped_conv) share
// when they recognise the stages of a task's DAG. Internal to kiln_ops.
#ifndef KILN_OPS_SRC_HAND_SCHEDULE_UTIL_H
#define KILN_OPS_SRC_HAND_SCHEDULE_UTIL_H

#include <cstdint>
#include <vector>

#include "kiln/te/operation.h"

namespace kiln::ops::detail {

/** The compute op that defines `t`; null for a placeholder. */
inline const te::ComputeOpNode* compute_of(const te::Tensor& t) {
  const te::OperationNode* op = t.op().get();
  return op && op->kind == te::OpKind::Compute ? static_cast<const te::ComputeOpNode*>(op) : nullptr;
}

/** Whether every extent of the shape is a constant. */
inline bool static_shape(const std::vector<Expr>& s) {
  for (const Expr& e : s)
    if (!as_const_int(e)) return false;
  return true;
}

/** A constant extent's value (the caller checked static_shape). */
inline int64_t extent(const Expr& e) { return *as_const_int(e); }

}  // namespace kiln::ops::detail

#endif  // KILN_OPS_SRC_HAND_SCHEDULE_UTIL_H
