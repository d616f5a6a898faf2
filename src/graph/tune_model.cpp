// Task extraction and the task scheduler (tune_model.h).
#include "kiln/graph/tune_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "kiln/graph/passes.h"
#include "kiln/graph/to_te.h"
#include "kiln/support/error.h"
#include "kiln/tuner/tune.h"
#include "kiln/tuning_db/database.h"

namespace kiln::graph {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double best_time_in_db(const tuner::Task& task, const std::string& db) {
  if (db.empty()) return 0;
  auto best = tuner::best_record(task, db);
  return best ? best->median_time : 0;
}

double weighted_latency(const std::vector<ModelTask>& tasks) {
  double total = 0;
  for (const ModelTask& t : tasks) {
    if (t.best_time <= 0) return 0;
    total += t.weight * t.best_time;
  }
  return total;
}

}  // namespace

std::vector<ModelTask> extract_tasks(const Graph& g, const CompileOptions& options) {
  Target target = Target::parse(options.target);
  Graph fused = optimize(g, target, {true, options.layout, false});
  std::vector<ModelTask> tasks;
  std::map<std::string, size_t> by_key;
  for (const OpNode* node : fused.op_nodes()) {
    KILN_CHECK(node->body.defined()) << "node '" << node->name << "' is in no group after fuse_ops";
    GraphDag dag = to_te(Graph(node->body));
    std::string ops = node->attrs.get_string("ops");
    tuner::Task task = tuner::make_task(dag.args(), target, ops);
    auto it = by_key.find(task.workload_key);
    if (it != by_key.end()) {
      ModelTask& t = tasks[it->second];
      ++t.weight;
      t.groups.push_back(node->name);
      continue;
    }
    by_key[task.workload_key] = tasks.size();
    ModelTask t;
    t.task = std::move(task);
    t.ops = ops;
    t.groups = {node->name};
    tasks.push_back(std::move(t));
  }
  for (ModelTask& t : tasks) t.best_time = best_time_in_db(t.task, options.db);
  if (!options.db.empty() && std::filesystem::exists(options.db)) {
    std::map<std::string, int64_t> records;
    for (const tuning_db::WorkloadSummary& w : tuning_db::Database::open(options.db).workloads()) records[w.key] = w.records - w.errors;
    for (ModelTask& t : tasks) t.records = static_cast<int>(records[t.task.workload_key]);
  }
  return tasks;
}

std::string tasks_table(const std::vector<ModelTask>& tasks) {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-4s %-16s %-44s %10s %6s %8s %12s %10s\n", "#", "workload", "operators", "MFLOP", "weight", "records", "best (ms)", "GFLOP/s");
  os << line;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ModelTask& t = tasks[i];
    std::string best = t.best_time > 0 ? std::to_string(t.best_time * 1e3).substr(0, 8) : "-";
    std::string gf = t.best_time > 0 ? std::to_string(t.task.flop / t.best_time * 1e-9).substr(0, 7) : "-";
    std::snprintf(line, sizeof line, "%-4zu %-16s %-44s %10.2f %6d %8d %12s %10s\n", i, t.task.workload_key.c_str(), t.ops.substr(0, 44).c_str(),
                  t.task.flop * 1e-6, t.weight, t.records, best.c_str(), gf.c_str());
    os << line;
  }
  double lat = weighted_latency(tasks);
  os << "estimated model latency (sum of weight x best): " << (lat > 0 ? std::to_string(lat * 1e3) + " ms" : "unknown (tasks without records)") << "\n";
  return os.str();
}

ModelTuneResult tune_model(const Graph& g, const CompileOptions& options, const ModelTuneOptions& tune) {
  KILN_USER_CHECK(!options.db.empty()) << "tune_model needs a tuning database to keep its records (db=...)";
  KILN_USER_CHECK(tune.trials > 0 && tune.batch > 0) << "tune_model: trials and batch must be positive";
  auto start = Clock::now();
  ModelTuneResult r;
  r.tasks = extract_tasks(g, options);
  size_t n = r.tasks.size();
  std::vector<double> last_gain(n, 0);   // seconds the task's best improved by in its last round
  std::vector<int> rounds_without(n, 0);
  std::vector<bool> done(n, false);
  auto run_round = [&](size_t i) {
    ModelTask& t = r.tasks[i];
    tuner::TuneOptions o;
    o.trials = std::min(tune.batch, tune.trials - r.trials);
    o.batch_size = o.trials;
    o.early_stop_rounds = 1 << 20;  // the scheduler decides when a task is done
    o.db_path = options.db;
    o.model_path = options.db + ".model";  // one cost model for all tasks
    o.progress = false;
    o.seed = tune.seed + static_cast<uint64_t>(r.rounds);
    tuner::TuneResult tr;
    try {
      tr = tuner::tune(t.task, o);
    } catch (const Error& e) {
      // One task's failure (a kiln bug in lowering one of its candidates)
      // must not cost the whole session: the task keeps what it has, and
      // the failure is reported with the candidate that raised it.
      r.failures.push_back("task " + std::to_string(i) + " (" + t.ops + ", " + t.task.workload_key + "): " + e.what());
      std::fprintf(stderr, "[model] task %zu (%s) stopped: %s\n", i, t.ops.c_str(), e.what());
      done[i] = true;
      ++r.rounds;
      return;
    }
    r.trials += std::max(1, tr.trials_measured + tr.trials_skipped);
    ++r.rounds;
    double before = t.best_time;
    if (tr.best_time > 0) t.best_time = before > 0 ? std::min(before, tr.best_time) : tr.best_time;
    t.records += tr.trials_measured - tr.errors;
    last_gain[i] = before > 0 ? std::max(0.0, before - t.best_time) : 0;
    rounds_without[i] = before > 0 && last_gain[i] <= before * 1e-3 ? rounds_without[i] + 1 : 0;
    if (rounds_without[i] >= tune.early_stop_rounds) done[i] = true;
    if (tune.progress) {
      double lat = weighted_latency(r.tasks);
      double elapsed = seconds_since(start);
      double left = r.trials > 0 ? elapsed / r.trials * std::max(0, tune.trials - r.trials) : 0;
      std::fprintf(stderr, "[model] trials %d/%d  round %d: task %zu (%s, x%d) best %.3f ms  model ~%s  elapsed %.0f s  remaining ~%.0f s\n", r.trials,
                   tune.trials, r.rounds, i, t.ops.substr(0, 40).c_str(), t.weight, t.best_time * 1e3,
                   lat > 0 ? (std::to_string(lat * 1e3).substr(0, 7) + " ms").c_str() : "?", elapsed, left);
    }
  };
  auto out_of_budget = [&] { return r.trials >= tune.trials || (tune.time_budget_s > 0 && seconds_since(start) >= tune.time_budget_s); };
  // Warm-up: every task without a record gets a round (a resumed session
  // skips what the DB has), the heaviest first (weight x FLOPs), so a small
  // budget goes to the convolutions before the layout copies.
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return r.tasks[a].weight * r.tasks[a].task.flop > r.tasks[b].weight * r.tasks[b].task.flop; });
  for (size_t i : order) {
    if (out_of_budget()) break;
    if (r.tasks[i].best_time <= 0) run_round(i);
  }
  while (!out_of_budget()) {
    // Best GFLOP/s reached per operator pattern: what a similar task may reach.
    std::map<std::string, double> best_rate;
    for (const ModelTask& t : r.tasks)
      if (t.best_time > 0) best_rate[t.ops] = std::max(best_rate[t.ops], t.task.flop / t.best_time);
    double best_gain = -1;
    size_t pick = n;
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      const ModelTask& t = r.tasks[i];
      double reachable = best_rate[t.ops] > 0 && t.task.flop > 0 ? t.task.flop / best_rate[t.ops] : t.best_time;
      double optimistic = 0.05 * std::max(0.0, t.best_time - reachable) + 0.01 * t.best_time;
      double gain = t.weight * std::max(last_gain[i], optimistic);
      if (gain > best_gain) {
        best_gain = gain;
        pick = i;
      }
    }
    if (pick == n) break;  // every task stopped improving
    run_round(pick);
  }
  r.elapsed_s = seconds_since(start);
  r.estimated_latency = weighted_latency(r.tasks);
  return r;
}

}  // namespace kiln::graph
