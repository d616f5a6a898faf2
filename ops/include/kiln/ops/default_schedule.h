/** \file
 * The schedule a task gets without a tuning record: what kiln.compile builds
 * for a group when the database has nothing for it. In order: AMX tiles for
 * an int8 / bfloat16 matmul on an AMX target (cpu_amx.h), the hand schedule
 * of a fused depthwise + pointwise pair (cpu_dwpw.h), that of a blocked
 * grouped conv (cpu_grouped_conv.h), else the search space's default
 * candidate (search_space.h).
 *
 * One function, because everything that competes against "the default" must
 * compete against this one: a confirmation (tuner/confirm.h) that pitted the
 * records of a depthwise + pointwise group against the search space's
 * default, and a records gate that reverted such a group to it, stored a
 * schedule compile would never have taken without them (MobileNetV2: the
 * gated model stayed 1.3x slower than the untuned one).
 */
#ifndef KILN_OPS_DEFAULT_SCHEDULE_H
#define KILN_OPS_DEFAULT_SCHEDULE_H

#include <string>

#include "kiln/ops/task.h"
#include "kiln/te/schedule.h"

namespace kiln::ops {

/** Which of the defaults above a task gets. */
enum class DefaultKind { AmxTiles, DepthwisePointwise, GroupedConv, SearchSpace };

struct DefaultSchedule {
  te::Schedule schedule;  ///< its trace() is what a record of it stores (canonical_trace for the DB's form)
  DefaultKind kind = DefaultKind::SearchSpace;
  std::string detail;     ///< for logs: "amx tiles", "depthwise+pointwise rows", "grouped conv rows: ...", or the sketch and its decisions
};

/** The default schedule of `task` as described above. */
DefaultSchedule default_schedule(const Task& task);

}  // namespace kiln::ops

#endif  // KILN_OPS_DEFAULT_SCHEDULE_H
