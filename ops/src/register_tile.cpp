#include "kiln/ops/register_tile.h"

#include <algorithm>

#include "kiln/support/error.h"

namespace kiln::ops {

RegisterBudget register_budget(const Target& target) {
  KILN_USER_CHECK(target.kind == Target::Kind::LLVM) << "the hand CPU schedules need a CPU target (llvm), not '" << target.str()
                                                     << "'; pass e.g. Target::parse(\"llvm -mcpu=haswell\")";
  return {target.natural_lanes(DataType::Float(32)), std::max(8, target.num_vector_registers())};
}

int max_tile_rows(int registers, int vectors) { return std::max(1, (registers - 1 - vectors) / std::max(1, vectors)); }

const Target& host_target() {
  static const Target host = Target::host();
  return host;
}

}  // namespace kiln::ops
