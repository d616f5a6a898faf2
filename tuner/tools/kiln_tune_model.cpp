// kiln-tune's model mode: `kiln-tune model.onnx --trials N --db FILE`.
// Every fused group of the compiled model is a task; the task scheduler
// (kiln/tuner/tune_model.h) spreads the budget over them.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "kiln/graph/onnx.h"
#include "kiln/graph/tuned_plan.h"
#include "kiln/tuner/tune_model.h"
#include "kiln/support/error.h"
#include "kiln/tuner/feature_records.h"
#include "kiln/tuner/ranking_report.h"
#include "kiln/tuning_db/database.h"

namespace kiln::tools {

namespace {

const char* kModelUsage = R"(usage: kiln-tune MODEL.onnx [options]

tunes every fused group of the model (one task per distinct workload, weighted
by how often it runs) with one trial budget, into the tuning database;
kiln.compile(model, db=...) / kiln-run --db then use the best records.

options:
  --trials N          the budget over all tasks (default 1000)
  --db PATH           tuning database (default kiln_tuning.db)
  --time-budget T     stop starting rounds after T (seconds, or 30s / 30m / 2h)
  --list-tasks        print the tasks (workload, FLOPs, weight, records, best) and exit
  --rank-report       print the cost model's pairwise ranking accuracy on the
                      model's tasks (records of --db held back, 4-fold: within
                      a task, and for a model trained on the other tasks only)
                      and exit
  --shape NAME=DxDx.. an input's shape (for dynamic dimensions, or to override)
  --threads N         kernel threads (default: all cores)
  --target T          target string (default "llvm" with -num-cores=THREADS)
  --batch N           trials per round (default 16)
  --confirm K         after the search, measure each task's K best schedules and
                      its default schedule again side by side (default 4; 0: no)
  --warm-inputs       time candidates with their inputs in cache between calls
                      (default: every input but the first evicted before each
                      call, as a layer's weights are in a model run)
  --fastest-call      time each cold measurement by its fastest call, not the
                      mean of its calls (under load the mean penalizes kernels
                      on several threads)
  --gpu-simulate      cuda targets: run the candidates in the GPU simulator, not on a
                      GPU (checks a session anywhere; records kept apart, never used)
  --graph-share F     the share of --trials for the graph-level search (each
                      convolution's channel block and Winograd form, measured on
                      the whole model; each candidate counts --graph-cost trials;
                      default 0.25; 0: loop schedules only)
  --graph-cost N      trials one graph candidate counts (default 10)
  --quiet             no progress lines
)";

double parse_duration(const std::string& v) {
  char unit = v.empty() ? 's' : v.back();
  double scale = unit == 'm' ? 60 : unit == 'h' ? 3600 : 1;
  std::string number = (unit == 's' || unit == 'm' || unit == 'h') ? v.substr(0, v.size() - 1) : v;
  char* end = nullptr;
  double x = std::strtod(number.c_str(), &end);
  KILN_USER_CHECK(!number.empty() && end && *end == '\0' && x >= 0) << "--time-budget " << v << ": give seconds, or a number with s, m or h (e.g. 30m)";
  return x * scale;
}

std::vector<int64_t> parse_dims(const std::string& item, std::string* name) {
  size_t eq = item.rfind('=');
  KILN_USER_CHECK(eq != std::string::npos && eq > 0) << "--shape takes NAME=D0xD1x..., got '" << item << "'";
  *name = item.substr(0, eq);
  std::vector<int64_t> dims;
  std::string rest = item.substr(eq + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t x = rest.find('x', pos);
    std::string d = rest.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    char* end = nullptr;
    long long v = std::strtoll(d.c_str(), &end, 10);
    KILN_USER_CHECK(!d.empty() && end && *end == '\0' && v > 0) << "--shape '" << item << "': dimensions must be positive integers separated by 'x'";
    dims.push_back(v);
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return dims;
}

std::string accuracy(double a, int64_t pairs) {
  if (a < 0) return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f (%lld)", a, static_cast<long long>(pairs));
  return buf;
}

/** Pairwise ranking accuracy of the cost model on the model's tasks, from the DB's records. */
int print_rank_report(const std::vector<tuner::ModelTask>& tasks, const std::string& db_path) {
  tuning_db::Database db = tuning_db::Database::open(db_path);
  // The report judges this kiln's features: records of an earlier extractor are re-extracted first.
  int64_t migrated = 0;
  for (const tuner::ModelTask& t : tasks) migrated += tuner::migrate_features(db, t.task);
  if (migrated) std::printf("re-extracted the features of %lld earlier records\n", static_cast<long long>(migrated));
  std::vector<tuner::Sample> samples = tuner::load_training_samples(db);
  std::vector<std::string> keys;
  for (const tuner::ModelTask& t : tasks) keys.push_back(t.task.workload_key);
  tuner::RankingOptions o;
  o.folds = 4;  // every record held back once: 4x the pairs of one 25% split, for 4 trainings
  tuner::RankingReport r = tuner::ranking_report(samples, o, keys);
  std::printf("cost model ranking on %s: %zu records of %zu task(s) with >= %d valid records; pairs apart by > %.0f%%\n",
              db_path.c_str(), samples.size(), r.tasks.size(), o.min_records, o.tie * 100);
  std::printf("%-18s %-36s %8s %20s %20s\n", "workload", "operators", "records", "within (pairs)", "cross (pairs)");
  for (const tuner::TaskRanking& t : r.tasks) {
    std::string key = t.group.substr(0, t.group.find('|')), ops;
    for (const tuner::ModelTask& m : tasks)
      if (m.task.workload_key == key) ops = m.ops;
    std::printf("%-18s %-36s %8d %20s %20s\n", key.c_str(), ops.substr(0, 36).c_str(), t.records,
                accuracy(t.within, t.within_pairs).c_str(), accuracy(t.cross, t.cross_pairs).c_str());
  }
  std::printf("mean over tasks: within %.3f, cross %.3f; over all pairs: within %.3f, cross %.3f (%d-fold, seed %llu; -1: none)\n",
              r.within_mean, r.cross_mean, r.within_pooled, r.cross_pooled, o.folds, static_cast<unsigned long long>(o.seed));
  return 0;
}

}  // namespace

int run_model(int argc, char** argv) {
  std::string path = argv[1];
  graph::CompileOptions copt;
  copt.db = "kiln_tuning.db";
  tuner::ModelTuneOptions topt;
  graph::InputShapes shapes;
  bool list = false, rank_report = false;
  int threads = 0;
  std::string target;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--list-tasks") { list = true; continue; }
    if (a == "--rank-report") { rank_report = true; continue; }
    if (a == "--quiet") { topt.progress = false; continue; }
    if (a == "--warm-inputs") { topt.cold_inputs = false; continue; }
    if (a == "--fastest-call") { topt.fastest_call = true; continue; }
    if (a == "--gpu-simulate") { topt.gpu_simulate = true; continue; }
    if (a == "--help" || a == "-h") { std::fputs(kModelUsage, stdout); return 0; }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "kiln-tune: %s needs a value\n%s", a.c_str(), kModelUsage);
      return 2;
    }
    std::string v = argv[++i];
    if (a == "--trials") topt.trials = std::stoi(v);
    else if (a == "--db") copt.db = v;
    else if (a == "--time-budget") topt.time_budget_s = parse_duration(v);
    else if (a == "--batch") topt.batch = std::stoi(v);
    else if (a == "--confirm") topt.confirm_top = std::stoi(v);
    else if (a == "--graph-share") topt.graph_share = std::stod(v);
    else if (a == "--graph-cost") topt.graph_candidate_trials = std::stoi(v);
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--target") target = v;
    else if (a == "--shape") {
      std::string name;
      std::vector<int64_t> dims = parse_dims(v, &name);
      shapes[name] = dims;
    } else {
      std::fprintf(stderr, "kiln-tune: unknown option %s\n%s", a.c_str(), kModelUsage);
      return 2;
    }
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  setenv("KILN_NUM_THREADS", std::to_string(threads).c_str(), 1);
  copt.target = target.empty() ? "llvm -num-cores=" + std::to_string(threads) : target;
  graph::Graph model = graph::from_onnx(path, shapes);
  if (rank_report) return print_rank_report(tuner::extract_tasks(model, copt), copt.db);
  if (list) {
    std::fputs(tuner::tasks_table(tuner::extract_tasks(model, copt)).c_str(), stdout);
    std::printf("model key: %s\n", graph::model_key(model).c_str());  // its tuned graph plan's key in the database
    return 0;
  }
  std::printf("kiln-tune: %s on %s, %d thread(s), budget %d trials, db %s\n", path.c_str(), copt.target.c_str(), threads, topt.trials, copt.db.c_str());
  std::fflush(stdout);
  tuner::ModelTuneResult r = tuner::tune_model(model, copt, topt);
  std::fputs(tuner::tasks_table(r.tasks).c_str(), stdout);
  std::printf("%d trials in %d rounds, %.1f s\n", r.trials, r.rounds, r.elapsed_s);
  if (!r.graph.skipped.empty()) {
    std::printf("graph search: none (%s)\n", r.graph.skipped.c_str());
  } else {
    std::printf("graph search: %d candidates measured (%d trials), %d outcomes re-used, %d moves taken; model %s: %.3f ms (start %.3f ms)\n",
                r.graph.measured, r.graph_trials, r.graph.reused, r.graph.taken, r.graph.model_key.c_str(), r.graph.time * 1e3, r.graph.start_time * 1e3);
    std::printf("graph plan: %s\n", r.graph.plan_json.c_str());
  }
  for (const std::string& f : r.failures) std::printf("warning: not tuned further after an error (please report it): %s\n", f.c_str());
  return 0;
}

}  // namespace kiln::tools
