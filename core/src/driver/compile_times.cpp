// compile_times.h: atomic totals (kernels build on several threads).
#include "kiln/support/compile_times.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln {

namespace {
constexpr int kPhases = static_cast<int>(CompilePhase::Count);
std::atomic<long long> micros[kPhases];
const char* kNames[kPhases] = {"schedule", "lower", "probe", "llvm-irgen", "llvm-opt", "llvm-emit", "link"};
}  // namespace

void add_compile_time(CompilePhase phase, double ms) { micros[static_cast<int>(phase)].fetch_add(static_cast<long long>(ms * 1000)); }

std::string compile_times_summary() {
  std::string out;
  char buf[64];
  for (int i = 0; i < kPhases; ++i) {
    std::snprintf(buf, sizeof buf, "%s%s %.0f ms", i ? ", " : "", kNames[i], micros[i].load() / 1000.0);
    out += buf;
  }
  return out;
}

void reset_compile_times() {
  for (auto& m : micros) m.store(0);
}

bool compile_times_enabled() {
  const char* v = std::getenv("KILN_COMPILE_TIMES");
  return v && *v && std::strcmp(v, "0") != 0;
}

}  // namespace kiln
