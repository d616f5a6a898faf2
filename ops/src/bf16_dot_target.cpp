// target_bf16_dot_pays (bf16_pairs.h): where the pair dot products beat
// float32 FMAs on bfloat16-rounded operands.
#include <algorithm>
#include <string>

#include "kiln/ops/bf16_pairs.h"

namespace kiln::ops {

namespace {

// Intel cores with AVX-512 BF16 whose zmm vdpbf16ps issues at a quarter of
// vfmadd231ps's rate (measured on an Emerald Rapids VM without AMX: 3.3-4.4x
// the FMA's time per instruction, 32 multiply-adds against 16): half the
// float32 multiply-adds per second. AMD's Zen 4 and 5 run it faster than FMA.
bool slow_pair_dot(const std::string& cpu) {
  static const char* const names[] = {"cooperlake", "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d"};
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return cpu == n; });
}

}  // namespace

bool target_bf16_dot_pays(const Target& target) {
  if (target.kind != Target::Kind::LLVM || !target.has_feature("avx512bf16")) return false;
  const bool amx = target.has_feature("amx-tile") && target.has_feature("amx-bf16");
  return amx || !slow_pair_dot(target.mcpu);
}

}  // namespace kiln::ops
