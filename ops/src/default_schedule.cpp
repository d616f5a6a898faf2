// default_schedule (default_schedule.h): what a task gets without a tuning record.
#include "kiln/ops/default_schedule.h"

#include <cstdlib>
#include <string>

#include "kiln/ops/cpu_amx.h"
#include "kiln/ops/cpu_dwpw.h"
#include "kiln/ops/cpu_grouped_conv.h"
#include "kiln/ops/search_space.h"

namespace kiln::ops {

DefaultSchedule default_schedule(const Task& task) {
  if (auto amx = amx_schedule(task)) return {*amx, DefaultKind::AmxTiles, "amx tiles"};
  // A depthwise conv fused with its 1x1 conv (fuse_depthwise_pointwise) has a hand schedule the rules cannot express.
  if (auto fused = depthwise_pointwise_schedule(task)) return {*fused, DefaultKind::DepthwisePointwise, "depthwise+pointwise rows"};
  // A blocked grouped conv pads its input per row of tiles (KILN_GROUPED_CONV=0: the rules' default instead, for A/B runs).
  const char* grouped_env = std::getenv("KILN_GROUPED_CONV");
  GroupedConvTile tile;
  if (!(grouped_env && std::string(grouped_env) == "0"))
    if (auto grouped = grouped_conv_schedule(task, nullptr, &tile))
      return {*grouped, DefaultKind::GroupedConv, "grouped conv rows: " + std::to_string(tile.blocks) + " blocks x " + std::to_string(tile.rows) + " x " +
                                                    std::to_string(tile.cols) + " pixels"};
  SearchSpace space(task);
  Candidate c = space.default_candidate();
  te::Schedule sch = space.materialize(&c);
  return {sch, DefaultKind::SearchSpace, space.describe_sketch(c.sketch) + "; " + space.describe_candidate(c)};
}

}  // namespace kiln::ops
