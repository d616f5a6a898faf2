// What the target-parameterised tests share: the CPU targets they run for
// (AVX2 and AVX-512), whether this host can execute a target's code, and
// the vector spills in a kernel's assembly.
#ifndef KILN_TESTS_TARGET_PARAMS_H
#define KILN_TESTS_TARGET_PARAMS_H

#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/codegen/target.h"

namespace kiln::testing {

/** AVX2 (16 vector registers) and AVX-512 (32) CPUs, Intel and AMD. */
inline std::vector<std::string> cpu_targets() {
  return {"llvm -mcpu=haswell -num-cores=2", "llvm -mcpu=znver3 -num-cores=2", "llvm -mcpu=skylake-avx512 -num-cores=2", "llvm -mcpu=znver4 -num-cores=2"};
}

/** A test name for the target string ("haswell"). */
inline std::string target_test_name(const std::string& target) {
  std::smatch m;
  return std::regex_search(target, m, std::regex("-mcpu=([A-Za-z0-9_-]+)")) ? std::regex_replace(m[1].str(), std::regex("[^A-Za-z0-9]"), "_") : "host";
}

/** Whether the host has every vector ISA extension the target's code may use (AVX2 code runs on an AVX-512 host, not the reverse). */
inline bool host_can_run(const Target& t) {
  static const Target host = Target::host();
  for (const char* f : {"avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512vnni", "avx512bf16", "avx512fp16"})
    if (t.has_feature(f) && !host.has_feature(f)) return false;
  return true;
}

/**
 * Spills and reloads of whole vector registers in verbose assembly (LLVM
 * notes "# 32-byte Spill", "# 64-byte Folded Reload") of at least
 * `min_bytes` (the target's vector width: the register tile's accumulators);
 * GPR and narrower ones (a transpose's 16-byte halves) are not counted.
 */
struct SpillCount {
  int spills = 0, reloads = 0;
  std::string first;  ///< the first such line, for the failure message
  int total() const { return spills + reloads; }
};

inline SpillCount count_vector_spills(const std::string& assembly, int min_bytes) {
  static const std::regex note("([0-9]+)-byte (Folded )?(Spill|Reload)");
  SpillCount c;
  std::istringstream is(assembly);
  for (std::string line; std::getline(is, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, note) || std::stoi(m[1].str()) < min_bytes) continue;
    (m[3] == "Spill" ? c.spills : c.reloads)++;
    if (c.first.empty()) c.first = line;
  }
  return c;
}

}  // namespace kiln::testing

#endif  // KILN_TESTS_TARGET_PARAMS_H
