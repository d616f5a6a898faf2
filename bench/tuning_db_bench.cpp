// Tuning database throughput and latency. Run by hand (not a timed test):
//   build/bench/tuning_db_bench [repeats]
// 1. records/s adding batches of 64 (realistic records: a 20-step trace,
//    3 run times, a tuning run), each repeat on a fresh database file;
// 2. latency of best(k = 10) on a database of 100,000 records, laid out as
//    100 workloads x 1,000 records and as 1 workload x 100,000 records.
// Prints min and median over the repeats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench_json.h"
#include "kiln/tuning_db/database.h"

namespace db = kiln::tuning_db;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kBatch = 64;
const db::TargetInfo kTarget{"llvm -mcpu=znver3 -num-cores=2", "AMD EPYC 7763", {"avx2", "fma"},
                             "", "0.1.0"};

std::string workload_key(int i) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016x", 0x1000 + i);
  return buf;
}

/** A trace of 20 steps, about 1.2 KB, varied by `seed`. */
std::string make_trace(uint64_t seed) {
  std::string t = "[";
  for (int s = 0; s < 20; ++s) {
    if (s) t += ",";
    t += R"({"kind":"split","stage":"C","axis":)" + std::to_string(s % 3) +
         R"(,"factors":[)" + std::to_string(1 + (seed + s) % 64) + "," + std::to_string(s) + "]}";
  }
  return t + "]";
}

db::Record make_record(std::mt19937_64& rng, const std::string& key, const std::string& run) {
  std::uniform_real_distribution<double> time(1e-4, 1e-2);
  db::Record r;
  r.workload_key = key;
  r.target = kTarget;
  r.trace = make_trace(rng());
  double t = time(rng);
  r.run_times = {t * 1.02, t, t * 0.99};
  r.build_time = 0.2;
  r.run_uid = run;
  return r;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/** Fills `path` with `workloads` x `per_workload` records in batches of 64; returns seconds. */
double fill(const std::string& path, int workloads, int per_workload, std::mt19937_64& rng) {
  auto d = db::Database::open(path);
  for (int w = 0; w < workloads; ++w)
    d.add_workload({workload_key(w), "bench_" + std::to_string(w), R"({"ops":["matmul"]})"});
  std::string run = d.start_run({});
  auto start = Clock::now();
  std::vector<db::Record> batch;
  for (int w = 0; w < workloads; ++w) {
    for (int i = 0; i < per_workload; ++i) {
      batch.push_back(make_record(rng, workload_key(w), run));
      if (batch.size() == kBatch) {
        d.add_records(batch);
        batch.clear();
      }
    }
  }
  if (!batch.empty()) d.add_records(batch);
  return seconds_since(start);
}

std::vector<double> bench_insert(const std::string& dir, int repeats, std::mt19937_64& rng) {
  constexpr int kRecords = 64 * 200;
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    std::string path = dir + "/insert_" + std::to_string(r) + ".db";
    double s = fill(path, 10, kRecords / 10, rng);
    rates.push_back(kRecords / s);
  }
  std::printf("add_records, batches of %d, %d records per repeat, %d repeats:\n", kBatch,
              kRecords, repeats);
  std::printf("  records/s  min %.0f  median %.0f  (max %.0f)\n",
              *std::min_element(rates.begin(), rates.end()), median(rates),
              *std::max_element(rates.begin(), rates.end()));
  return rates;
}

void bench_best(const std::string& path, int workloads, int repeats, std::mt19937_64& rng) {
  auto d = db::Database::open(path);
  const int queries = 200;
  std::vector<double> per_repeat_median, all;
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> lat;
    for (int q = 0; q < queries; ++q) {
      std::string key = workload_key(static_cast<int>(rng() % workloads));
      auto start = Clock::now();
      auto best = d.best(key, kTarget, 10);
      lat.push_back(seconds_since(start) * 1e6);
      if (best.size() != 10) std::fprintf(stderr, "unexpected: %zu records\n", best.size());
    }
    per_repeat_median.push_back(median(lat));
    all.insert(all.end(), lat.begin(), lat.end());
  }
  std::printf("  best(k=10), %d workloads x %d records: latency min %.1f us, median %.1f us "
              "(medians of %d repeats of %d queries: min %.1f, median %.1f)\n",
              workloads, 100000 / workloads, *std::min_element(all.begin(), all.end()),
              median(all), repeats, queries,
              *std::min_element(per_repeat_median.begin(), per_repeat_median.end()),
              median(per_repeat_median));
}

}  // namespace

// tuning_db_bench [REPEATS] [--json FILE] [--insert-only]
int main(int argc, char** argv) {
  int repeats = 5;
  bool insert_only = false;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--insert-only") insert_only = true;
    else repeats = std::max(1, std::atoi(argv[i]));
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "kiln_db_bench_XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) {
    std::perror("mkdtemp");
    return 1;
  }
  std::mt19937_64 rng(42);
  try {
    std::vector<double> rates = bench_insert(tmpl, repeats, rng);
    kiln::bench::JsonRows json(json_path);
    json.add({{"name", "tuning DB insert rate (batches of 64)"}, {"threads", 1}, {"unit", "records/s"}, {"kiln_min", *std::min_element(rates.begin(), rates.end())},
              {"kiln_median", median(rates)}, {"peer", nullptr}, {"goal", "-"}, {"note", "add_records into SQLite, " + std::to_string(repeats) + " repeats"}});
    json.write();
    if (insert_only) {
      std::filesystem::remove_all(tmpl);
      return 0;
    }
    std::printf("best-k query on 100,000 records:\n");
    for (int workloads : {100, 1}) {
      std::string path = tmpl + "/best_" + std::to_string(workloads) + ".db";
      double s = fill(path, workloads, 100000 / workloads, rng);
      std::printf("  (filled %d x %d records in %.2f s, %.0f records/s, file %.1f MB)\n", workloads,
                  100000 / workloads, s, 100000 / s,
                  std::filesystem::file_size(path) / 1e6);
      bench_best(path, workloads, repeats, rng);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tuning_db_bench: %s\n", e.what());
    std::filesystem::remove_all(tmpl);
    return 1;
  }
  std::filesystem::remove_all(tmpl);
  return 0;
}
