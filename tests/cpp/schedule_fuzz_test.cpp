// Runs the schedule fuzzer (schedule_fuzz.h): random primitive sequences on
// small DAGs, each checked against a naive reference. Refused schedules are
// fine; internal errors, failed runs and wrong results fail the test.
//
//   KILN_FUZZ_SCHEDULES=N   schedules to run (default 300, about 30 s here)
//   KILN_FUZZ_FIRST_SEED=S  the first seed (default 0); seeds S..S+N-1
//   KILN_FUZZ_VERBOSE=1     print every failure (not just the first five)
//                           and the kinds of refusals
//   KILN_FUZZ_PROGRESS=K    a progress line on stderr every K schedules
//
// A failure names its seed; KILN_FUZZ_FIRST_SEED=<seed> KILN_FUZZ_SCHEDULES=1
// reruns it alone. scripts/fuzz_schedules.sh runs the nightly size (20,000).
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <cstdlib>
#include <iostream>
#include <map>

#include "schedule_fuzz.h"

namespace kiln {
namespace {

using testing::fuzz::Outcome;

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

// The first line of a message, with the numbers dropped: failures of one
// kind group together in the summary.
std::string error_class(const std::string& msg) {
  std::string line = msg.substr(0, msg.find('\n')), out;
  for (char ch : line) {
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += ch;
    }
  }
  return out.substr(0, 160);
}

TEST(ScheduleFuzz, RandomSchedulesMatchReference) {
  const int64_t count = env_int("KILN_FUZZ_SCHEDULES", 300), first = env_int("KILN_FUZZ_FIRST_SEED", 0);
  const bool verbose = env_int("KILN_FUZZ_VERBOSE", 0) != 0;
  const int64_t progress = env_int("KILN_FUZZ_PROGRESS", 0);
  const auto cases = testing::fuzz::fuzz_cases();
  std::map<Outcome, int64_t> counts;
  std::map<std::string, int64_t> failure_classes, refusal_classes;
  int printed = 0;
  int64_t refused_steps = 0, steps = 0;
  auto t0 = std::chrono::steady_clock::now();
  std::clock_t cpu0 = std::clock();
  for (int64_t seed = first; seed < first + count; ++seed) {
    const auto& c = cases[seed % cases.size()];
    te::Trace trace;
    auto r = testing::fuzz::fuzz_one(c, static_cast<uint32_t>(seed), &trace);
    ++counts[r.outcome];
    refused_steps += r.refused_steps, steps += static_cast<int64_t>(trace.steps.size()) + r.refused_steps;
    if (progress > 0 && (seed - first + 1) % progress == 0)
      std::cerr << "schedule fuzz: " << seed - first + 1 << "/" << count << " done, " << counts[Outcome::Internal] + counts[Outcome::RunFailed] + counts[Outcome::Wrong] << " failures" << std::endl;
    if (r.outcome == Outcome::Ok) continue;
    if (r.outcome == Outcome::Refused) {
      ++refusal_classes[error_class(r.message)];
      continue;
    }
    ++failure_classes[error_class(r.message)];
    if (verbose || printed++ < 5)
      ADD_FAILURE() << "seed " << seed << " (" << c.name << "): " << r.message << "\nminimized trace:\n" << testing::fuzz::minimize(c, trace, r).str() << "full trace:\n" << trace.str();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  std::cout << "schedule fuzz: seeds " << first << ".." << first + count - 1 << " in " << s << " s (" << cpu_s << " s of CPU): " << counts[Outcome::Ok] << " ok, " << counts[Outcome::Refused]
            << " refused (user errors), " << counts[Outcome::Internal] << " internal errors, " << counts[Outcome::RunFailed] << " failed runs, " << counts[Outcome::Wrong]
            << " wrong results; " << refused_steps << " of " << steps << " primitives refused\n";
  for (const auto& [msg, n] : failure_classes) std::cout << "  failure x" << n << ": " << msg << "\n";
  if (verbose)
    for (const auto& [msg, n] : refusal_classes) std::cout << "  refused x" << n << ": " << msg << "\n";
  // The fuzzer must build something: a generator that only makes refused
  // schedules would pass while testing nothing.
  if (count >= 100) EXPECT_GT(counts[Outcome::Ok], count / 4);
}

}  // namespace
}  // namespace kiln
