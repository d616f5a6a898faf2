// Fork-join overhead of kiln_parallel_launch, next to OpenMP (when built with
// it) and to spawning std::threads. Run by hand:
//   build/bench/parallel_overhead_bench [launches]
// Prints microseconds per launch (median of 15 batches). The target is under
// 10 us per warm launch on a 2-core machine.
//
// On a loaded machine the numbers measure the OS scheduler (a woken worker
// may wait milliseconds for a core); `chrt -f 10` or `nice -n -20` (root)
// gives the threads the cores they would have on an idle machine.
// Measured on the 2-core dev machine under chrt -f 10: 0.4 us per empty
// launch, 3.2 us for two 2-us tasks with the worker running half of them
// (OpenMP: 3.0 us per empty parallel region).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#ifdef KILN_BENCH_OPENMP
#include <omp.h>
#endif

#include "bench_json.h"
#include "kiln/runtime/c_runtime_api.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median over batches of `per_batch` calls of fn, in microseconds per call.
double median_us(const std::function<void()>& fn, int per_batch, int batches = 15) {
  for (int i = 0; i < per_batch / 10 + 1; ++i) fn();  // warm up
  std::vector<double> t;
  for (int b = 0; b < batches; ++b) {
    auto start = Clock::now();
    for (int i = 0; i < per_batch; ++i) fn();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / per_batch);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int32_t empty_task(int32_t, int32_t, void*) { return 0; }

// ~2 us of work per task, and a record of which tasks the launcher ran.
struct Work {
  std::thread::id launcher;
  std::atomic<int> by_helpers{0};
  std::atomic<int> total{0};
};

int32_t busy_task(int32_t, int32_t, void* closure) {
  auto* w = static_cast<Work*>(closure);
  auto end = Clock::now() + std::chrono::microseconds(2);
  while (Clock::now() < end) {
  }
  w->total.fetch_add(1, std::memory_order_relaxed);
  if (std::this_thread::get_id() != w->launcher) w->by_helpers.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // parallel_overhead_bench [N] [--json FILE]
  int n = 20000;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--json" && i + 1 < argc) json_path = argv[++i];
    else n = std::atoi(argv[i]);
  }
  int threads = kiln_num_threads();
  std::printf("threads: %d (KILN_NUM_THREADS or cores)\n", threads);

  double warm = median_us([] { kiln_parallel_launch(empty_task, nullptr, 0); }, n);
  std::printf("kiln   warm fork-join, empty tasks:      %8.3f us/launch%s\n", warm, warm < 10 ? "" : "  (over the 10 us target)");
  double many = median_us([] { kiln_parallel_launch(empty_task, nullptr, 64); }, n);
  std::printf("kiln   warm fork-join, 64 empty tasks:   %8.3f us/launch\n", many);

  Work w;
  w.launcher = std::this_thread::get_id();
  double busy = median_us([&] { kiln_parallel_launch(busy_task, &w, threads); }, n / 4);
  std::printf("kiln   %d tasks of 2 us each:             %8.3f us/launch (helpers ran %.0f%% of tasks)\n", threads, busy,
              100.0 * w.by_helpers.load() / std::max(1, w.total.load()));

  // Workers asleep on the futex: the launch pays for waking them (or runs
  // every task itself when they wake too late).
  std::vector<double> cold;
  for (int i = 0; i < 21; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto start = Clock::now();
    kiln_parallel_launch(empty_task, nullptr, 0);
    cold.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::sort(cold.begin(), cold.end());
  std::printf("kiln   launch after 2 ms idle (asleep):  %8.3f us/launch\n", cold[cold.size() / 2]);

#ifdef KILN_BENCH_OPENMP
  double omp = median_us([] {
#pragma omp parallel
    { asm volatile("" ::: "memory"); }
  }, n);
  std::printf("openmp warm empty parallel region:       %8.3f us/region (%d threads)\n", omp, omp_get_max_threads());
#endif

  double spawn = median_us([&] {
    std::vector<std::thread> ts;
    for (int i = 1; i < threads; ++i) ts.emplace_back([] {});
    for (auto& t : ts) t.join();
  }, 200);
  std::printf("std::thread spawn + join of %d threads:  %8.3f us\n", threads - 1, spawn);
  kiln::bench::JsonRows json(json_path);
  nlohmann::json row = {{"name", "fork-join overhead (warm, empty tasks)"}, {"threads", threads}, {"unit", "us"}, {"kiln_median", warm}, {"kiln_min", warm},
                        {"goal", "< 10 us"}, {"note", "median of " + std::to_string(n) + " launches; 2 ms idle: " + std::to_string(cold[cold.size() / 2]).substr(0, 6) + " us"}};
#ifdef KILN_BENCH_OPENMP
  row["peer"] = "OpenMP (libgomp) empty parallel region";
  row["peer_median"] = omp;
  row["peer_min"] = omp;
  row["ratio_median"] = row["ratio_min"] = row["ratio_max"] = warm / omp;
#endif
  json.add(row);
  json.write();
  return 0;
}
