// default_schedule (default_schedule.h): what a task gets without a tuning record.
#include "kiln/ops/default_schedule.h"

#include "kiln/ops/cpu_amx.h"
#include "kiln/ops/cpu_dwpw.h"
#include "kiln/ops/search_space.h"

namespace kiln::ops {

DefaultSchedule default_schedule(const Task& task) {
  if (auto amx = amx_schedule(task)) return {*amx, DefaultKind::AmxTiles, "amx tiles"};
  // A depthwise conv fused with its 1x1 conv (fuse_depthwise_pointwise) has a hand schedule the rules cannot express.
  if (auto fused = depthwise_pointwise_schedule(task)) return {*fused, DefaultKind::DepthwisePointwise, "depthwise+pointwise rows"};
  SearchSpace space(task);
  Candidate c = space.default_candidate();
  te::Schedule sch = space.materialize(&c);
  return {sch, DefaultKind::SearchSpace, space.describe_sketch(c.sketch) + "; " + space.describe_candidate(c)};
}

}  // namespace kiln::ops
