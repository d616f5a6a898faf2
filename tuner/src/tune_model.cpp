// Task extraction and the task scheduler (tune_model.h).
#include "kiln/tuner/tune_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>

#include "kiln/graph/bind_shapes.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/to_te.h"
#include "kiln/graph/tuned_plan.h"
#include "kiln/ops/cpu_amx.h"
#include "kiln/ops/default_schedule.h"
#include "kiln/support/error.h"
#include "kiln/tuner/confirm.h"
#include "kiln/tuner/measure.h"
#include "kiln/tuner/peer.h"  // median_of
#include "kiln/tuner/tune.h"
#include "kiln/tuning_db/database.h"

namespace kiln::tuner {

// The graph compiler's passes and types, which this file drives.
using namespace graph;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double best_time_in_db(const tuner::Task& task, const std::string& db) {
  if (db.empty()) return 0;
  auto best = tuner::best_record(task, db);
  return best ? best->median_time : 0;
}

// The smaller of two times, where 0 means unknown.
double faster(double a, double b) { return a > 0 && b > 0 ? std::min(a, b) : std::max(a, b); }

// Per group name, the expected time of the tasks that can run it (0: none has a record or a measured default).
std::map<std::string, double> best_per_group(const std::vector<ModelTask>& tasks) {
  std::map<std::string, double> best;
  for (const ModelTask& t : tasks)
    for (const std::string& g : t.groups) best[g] = faster(best[g], expected_time(t));
  return best;
}

}  // namespace

double expected_time(const ModelTask& t) { return faster(t.best_time, t.default_time); }

double estimated_latency(const std::vector<ModelTask>& tasks) {
  double total = 0;
  for (const auto& [group, t] : best_per_group(tasks)) {
    if (t <= 0) return 0;
    total += t;
  }
  return total;
}

namespace {

/** The tasks of `g` under one layout plan, with their weights in that plan. */
std::vector<ModelTask> tasks_of_plan(const Graph& g, const Target& target, const CompileOptions& options, const LayoutPlan& plan) {
  // A GPU model's groups as compile_gpu makes them: NCHW convolutions, each operator's GPU form.
  bool gpu = target.kind == Target::Kind::CUDA;
  PipelineOptions popt{true, options.layout && !gpu, false, plan};
  Graph fused = optimize(g, target, popt);
  std::vector<ModelTask> tasks;
  std::map<std::string, size_t> by_key;
  for (const OpNode* node : fused.op_nodes()) {
    KILN_CHECK(node->body.defined()) << "node '" << node->name << "' is in no group after fuse_ops";
    GraphDag dag = to_te(Graph(node->body), gpu);
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
    t.layout_cap = plan.max_block;
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace

namespace {

// A model with symbolic dims: the tasks of its static twins at the likely
// sizes (likely_bindings), merged by workload; each group's name says the
// sizes it was bound to, so every size's groups count in the estimate.
std::vector<ModelTask> extract_dynamic_tasks(const Graph& g, const CompileOptions& options, const std::vector<std::string>& vars) {
  std::vector<ModelTask> tasks;
  std::map<std::string, size_t> by_key;
  for (const ShapeBinding& b : likely_bindings(vars, options.sizes, options.dims)) {
    std::string at;
    for (const auto& [v, size] : b) at += (at.empty() ? "" : ", ") + v + "=" + std::to_string(size);
    for (ModelTask& t : extract_tasks(bind_shapes(g, b), options)) {
      for (std::string& name : t.groups) name += " [" + at + "]";
      auto it = by_key.find(t.task.workload_key);
      if (it == by_key.end()) {
        by_key[t.task.workload_key] = tasks.size();
        tasks.push_back(std::move(t));
        continue;
      }
      ModelTask& same = tasks[it->second];
      same.weight += t.weight;
      same.groups.insert(same.groups.end(), t.groups.begin(), t.groups.end());
    }
  }
  return tasks;
}

}  // namespace

std::vector<ModelTask> extract_tasks(const Graph& g, const CompileOptions& options) {
  if (std::vector<std::string> vars = shape_var_names(g); !vars.empty()) return extract_dynamic_tasks(g, options, vars);
  Target target = Target::parse(options.target);
  std::vector<LayoutPlan> plans = {options.layout_plan};
  if (options.layout && options.choose_layouts && target.kind == Target::Kind::LLVM) {
    // The default plan (each convolution at default_conv_cap's cap) first,
    // then every convolution under every other cap, two vectors first.
    std::vector<int64_t> caps = layout_block_choices(target);
    plans = {default_layout_plan(g, target)};
    for (auto it = caps.rbegin(); it != caps.rend(); ++it)
      if (*it != plans.front().max_block) plans.push_back(LayoutPlan{*it, {}});
    for (LayoutPlan& plan : plans) plan.winograd = options.layout_plan.winograd;
    // The plan a graph search measured best (tuned_plan.h), which compile(db=) takes: its groups (a direct conv
    // where the default runs Winograd) are tasks too, and the first tuned, being what the model runs. Behind the
    // default plan's, a small budget never reached them: SqueezeNet, 100 and 200 trials, took every conv at
    // cap 16 and ran 0 of 48 groups from records.
    if (std::optional<LayoutPlan> tuned = tuned_graph_plan(g, target, options.db)) {
      tuned->winograd = std::min(tuned->winograd, options.layout_plan.winograd);
      plans.insert(plans.begin(), *tuned);
    }
  }
  std::vector<ModelTask> tasks;
  std::map<std::string, size_t> by_key;
  std::map<std::string, int64_t> uniform_cap;  // a task's key -> the cap of the first uniform plan that has it
  for (const LayoutPlan& plan : plans) {
    for (ModelTask& t : tasks_of_plan(g, target, options, plan)) {
      t.in_default_plan = &plan == &plans.front();
      if (plan.max_block > 0) uniform_cap.emplace(t.task.workload_key, plan.max_block);
      auto it = by_key.find(t.task.workload_key);
      if (it == by_key.end()) {
        // A variant only where the cap changed it; a task every plan shares is plain.
        if (plans.size() > 1 && t.in_default_plan) t.layout_cap = 0;
        by_key[t.task.workload_key] = tasks.size();
        tasks.push_back(std::move(t));
        continue;
      }
      ModelTask& same = tasks[it->second];
      same.weight = std::max(same.weight, t.weight);
      for (const std::string& name : t.groups)
        if (std::find(same.groups.begin(), same.groups.end(), name) == same.groups.end()) same.groups.push_back(name);
    }
  }
  if (plans.size() > 1) {
    // A default-plan task is a variant (of the cap it has) when another plan gave one of its groups another task.
    std::map<std::string, int> tasks_per_group;
    for (const ModelTask& t : tasks)
      for (const std::string& name : t.groups) ++tasks_per_group[name];
    for (ModelTask& t : tasks)
      if (t.layout_cap == 0 && tasks_per_group[t.groups.front()] > 1 && uniform_cap.count(t.task.workload_key))
        t.layout_cap = uniform_cap[t.task.workload_key];
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
  std::snprintf(line, sizeof line, "%-4s %-16s %-44s %10s %6s %6s %8s %12s %10s %12s\n", "#", "workload", "operators", "MFLOP", "weight", "layout",
                "records", "best (ms)", "GFLOP/s", "default (ms)");
  os << line;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ModelTask& t = tasks[i];
    std::string best = t.best_time > 0 ? std::to_string(t.best_time * 1e3).substr(0, 8) : "-";
    std::string gf = t.best_time > 0 ? std::to_string(t.task.flop / t.best_time * 1e-9).substr(0, 7) : "-";
    // "*": the variant compile runs.
    std::string layout = t.layout_cap > 0 ? "c" + std::to_string(t.layout_cap) + (t.in_default_plan ? "*" : "") : "-";
    std::string def = t.default_time > 0 ? std::to_string(t.default_time * 1e3).substr(0, 8) : "-";
    std::snprintf(line, sizeof line, "%-4zu %-16s %-44s %10.2f %6d %6s %8d %12s %10s %12s\n", i, t.task.workload_key.c_str(), t.ops.substr(0, 44).c_str(),
                  t.task.flop * 1e-6, t.weight, layout.c_str(), t.records, best.c_str(), gf.c_str(), def.c_str());
    os << line;
  }
  double lat = estimated_latency(tasks);
  if (std::any_of(tasks.begin(), tasks.end(), [](const ModelTask& t) { return t.layout_cap > 0 && t.in_default_plan; }))
    os << "layout c<N>: the channel-block cap of a layout variant; *: the one compile takes (the tuned graph plan's where the database has one, else compiling without records)\n";
  os << "estimated model latency (per group, the best of its tasks, summed): " << (lat > 0 ? std::to_string(lat * 1e3) + " ms" : "unknown (tasks without records)") << "\n";
  return os.str();
}

namespace {

// The confirmation after the search (tuner/confirm.h): each task's best few
// and its default schedule measured again side by side; their records then
// decide what compile uses.
void confirm_tasks(ModelTuneResult* r, const std::string& db, const ModelTuneOptions& tune, bool gpu) {
  tuner::ConfirmOptions c;
  c.top = tune.confirm_top;
  c.rounds = tune.confirm_rounds;
  c.cold_inputs = tune.cold_inputs && !gpu;
  c.fastest_call = tune.fastest_call;
  for (size_t i = 0; i < r->tasks.size(); ++i) {
    ModelTask& t = r->tasks[i];
    if (t.best_time <= 0) continue;
    tuner::ConfirmResult cr;
    try {
      cr = tuner::confirm_best(t.task, db, c);
    } catch (const Error& e) {
      r->failures.push_back("confirming task " + std::to_string(i) + " (" + t.ops + "): " + e.what());
      continue;
    }
    if (cr.after > 0) t.best_time = cr.after;
    if (tune.progress)
      std::fprintf(stderr, "[model] confirmed task %zu (%s, x%d): %d contenders, best %.3f ms -> %.3f ms%s\n", i, t.ops.substr(0, 40).c_str(), t.weight,
                   cr.contenders, cr.before * 1e3, cr.after * 1e3, cr.default_won ? " (the default schedule)" : cr.changed ? " (another schedule)" : "");
  }
}

}  // namespace

namespace {

// Each task's default schedule measured alone as the search measures its candidates (ModelTask::default_time), the
// model's heaviest tasks first, until `out_of_budget`. A default that cannot be measured leaves 0 (its records alone
// count, as before) and a failure.
void measure_defaults(ModelTuneResult* r, const std::vector<size_t>& order, const ModelTuneOptions& tune, const std::function<bool()>& out_of_budget) {
  auto t0 = Clock::now();
  int measured = 0;
  for (size_t i : order) {
    if (out_of_budget()) break;
    ModelTask& t = r->tasks[i];
    MeasureOptions mo;
    mo.cold_inputs = tune.cold_inputs;
    mo.fastest_call = tune.fastest_call;
    std::string why;
    try {
      ops::DefaultSchedule d = ops::default_schedule(t.task);
      t.hand_default = d.kind != ops::DefaultKind::SearchSpace;
      Candidate def;
      def.trace = d.schedule.trace();
      MeasureResult m = Measurer(t.task, mo).measure({def}).front();
      if (m.error == MeasureError::None && !m.run_times.empty()) t.default_time = median_of(m.run_times);
      else why = m.error_msg.empty() ? "no run times" : m.error_msg;
    } catch (const Error& e) {
      why = e.what();
    }
    if (!why.empty()) r->failures.push_back("measuring the default schedule of task " + std::to_string(i) + " (" + t.ops + "): " + why);
    else ++measured;
  }
  if (tune.progress)
    std::fprintf(stderr, "[model] default schedules measured: %d of %zu tasks in %.1f s; the model at its defaults and records ~%.3f ms\n", measured,
                 r->tasks.size(), seconds_since(t0), estimated_latency(r->tasks) * 1e3);
}

// The task scheduler over the loop schedules of the model's tasks (tune_model.h), `start` the session's.
ModelTuneResult tune_loops(const Graph& g, const CompileOptions& options, const ModelTuneOptions& tune, Clock::time_point start) {
  ModelTuneResult r;
  r.tasks = extract_tasks(g, options);
  bool gpu = Target::parse(options.target).kind == Target::Kind::CUDA;
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
    // Cache eviction is a CPU matter; a GPU kernel's inputs are in device memory.
    o.measure.cold_inputs = tune.cold_inputs && !gpu;
    o.measure.fastest_call = tune.fastest_call;
    o.measure.gpu_simulate = tune.gpu_simulate;
    // One task's failure must not cost the whole session: the task keeps
    // what it has, and the failure is reported (a bug's message carries the
    // candidate that raised it).
    auto stop_task = [&](const Exception& e) {
      r.failures.push_back("task " + std::to_string(i) + " (" + t.ops + ", " + t.task.workload_key + "): " + e.what());
      std::fprintf(stderr, "[model] task %zu (%s) stopped: %s\n", i, t.ops.c_str(), e.what());
      done[i] = true;
      ++r.rounds;
    };
    tuner::TuneResult tr;
    try {
      tr = tuner::tune(t.task, o);
    } catch (const InternalError& e) {
      // Caught on purpose: a kiln bug in lowering one task's candidates is
      // reported in the result's failures, not raised, so the other tasks tune.
      return stop_task(e);
    } catch (const Error& e) {
      return stop_task(e);
    }
    // The budget is measurements; a round that measured nothing (the search
    // found only what the DB has) ends the task rather than spin.
    r.trials += tr.trials_measured;
    ++r.rounds;
    if (tr.trials_measured == 0) done[i] = true;
    double before = expected_time(t), group_before = best_per_group(r.tasks)[t.groups.front()];
    if (tr.best_time > 0) t.best_time = t.best_time > 0 ? std::min(t.best_time, tr.best_time) : tr.best_time;  // records only
    t.records += tr.trials_measured - tr.errors;
    // What the model gained: a layout variant's progress counts only where it beats its rivals.
    last_gain[i] = group_before > 0 ? std::max(0.0, group_before - best_per_group(r.tasks)[t.groups.front()]) : 0;
    rounds_without[i] = before > 0 && last_gain[i] <= before * 1e-3 ? rounds_without[i] + 1 : 0;
    if (rounds_without[i] >= tune.early_stop_rounds) done[i] = true;
    if (tune.progress) {
      double lat = estimated_latency(r.tasks);
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
  // budget goes to the convolutions before the layout copies; the default
  // layout's tasks before the other layouts' variants, so the model has a
  // complete estimate first.
  auto variant = [&](size_t i) { return !r.tasks[i].in_default_plan; };
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (variant(a) != variant(b)) return variant(b);
    return r.tasks[a].weight * r.tasks[a].task.flop > r.tasks[b].weight * r.tasks[b].task.flop;
  });
  if (!gpu) measure_defaults(&r, order, tune, out_of_budget);
  for (size_t i = 0; i < n; ++i)
    if (r.tasks[i].hand_default) {
      rounds_without[i] = std::max(0, tune.early_stop_rounds - 1);
      done[i] = done[i] || ops::amx_schedule(r.tasks[i].task).has_value();
    }
  for (size_t i : order) {
    if (out_of_budget()) break;
    if (r.tasks[i].best_time <= 0 && !r.tasks[i].hand_default) run_round(i);
  }
  while (!out_of_budget()) {
    // Best GFLOP/s reached per operator pattern: what a similar task may reach.
    std::map<std::string, double> best_rate;
    for (const ModelTask& t : r.tasks)
      if (expected_time(t) > 0) best_rate[t.ops] = std::max(best_rate[t.ops], t.task.flop / expected_time(t));
    std::map<std::string, double> group_best = best_per_group(r.tasks);
    double best_gain = -1;
    size_t pick = n;
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      const ModelTask& t = r.tasks[i];
      // A layout variant behind its rival first has to catch up: its hope shrinks with the gap.
      double current = std::min(expected_time(t), group_best[t.groups.front()]);
      double behind = expected_time(t) > 0 ? current / expected_time(t) : 1;
      double reachable = best_rate[t.ops] > 0 && t.task.flop > 0 ? t.task.flop / best_rate[t.ops] : current;
      double optimistic = (0.05 * std::max(0.0, current - reachable) + 0.01 * current) * behind * behind;
      double gain = t.weight * std::max(last_gain[i], optimistic);
      if (gain > best_gain) {
        best_gain = gain;
        pick = i;
      }
    }
    if (pick == n) break;  // every task stopped improving
    run_round(pick);
  }
  // Simulated GPU timings are not worth confirming (and confirm_best times on the device).
  if (tune.confirm_top > 0 && !tune.gpu_simulate) confirm_tasks(&r, options.db, tune, gpu);
  r.elapsed_s = seconds_since(start);
  r.estimated_latency = estimated_latency(r.tasks);
  return r;
}

}  // namespace

namespace {

// The records gate (records_gate.h) after a session that confirmed its records.
void gate(const Graph& g, const CompileOptions& options, const ModelTuneOptions& tune, ModelTuneResult* r) {
  if (!tune.gate_records || tune.confirm_top <= 0 || tune.gpu_simulate) {
    r->gate.skipped = "off (gate_records false, or no confirmation)";
    return;
  }
  RecordsGateOptions o;
  o.cold_inputs = tune.cold_inputs;
  o.fastest_call = tune.fastest_call;
  o.seed = tune.seed;
  try {
    r->gate = gate_records(g, options, o);
  } catch (const Error& e) {
    r->failures.push_back(std::string("records gate: ") + e.what());
    r->gate.skipped = e.what();
    return;
  }
  const RecordsGateResult& gr = r->gate;
  if (tune.progress && gr.plan_ratio > 0)
    std::fprintf(stderr, "[model] records gate: the tuned model against the untuned one (its plan): ratio %.3f%s\n", gr.plan_ratio,
                 gr.plan_reverted ? ", slower: the untuned plan is stored" : "");
  if (!tune.progress || !gr.skipped.empty()) return;
  std::fprintf(stderr, "[model] records gate: the model with all records %.3f ms, defaults %.3f ms (ratio %.3f)\n", gr.tuned_time * 1e3,
               gr.default_time * 1e3, gr.ratio);
  for (const RecordVerdict& v : gr.records)
    std::fprintf(stderr, "[model]   %-40s x%d in the model: record %.3f ms, default %.3f ms (%.2f): %s\n", v.ops.substr(0, 40).c_str(), v.groups,
                 v.record_time * 1e3, v.default_time * 1e3, v.ratio, v.kept ? "kept" : "back to the default");
  if (gr.kept_ratio > 0)
    std::fprintf(stderr, "[model] records gate: with the kept records %.3f ms (ratio %.3f)%s\n", gr.kept_time * 1e3, gr.kept_ratio,
                 gr.kept ? "" : ": slower than the defaults, all back to the default");
  std::fprintf(stderr, "[model] records gate: %d workloads back to their default schedule\n", gr.reverted);
}

}  // namespace

ModelTuneResult tune_model(const Graph& g, const CompileOptions& options, const ModelTuneOptions& tune) {
  KILN_USER_CHECK(!options.db.empty()) << "tune_model needs a tuning database to keep its records (db=...)";
  KILN_USER_CHECK(tune.trials > 0 && tune.batch > 0) << "tune_model: trials and batch must be positive";
  KILN_USER_CHECK(tune.graph_share >= 0 && tune.graph_share <= 1 && tune.graph_candidate_trials > 0)
      << "tune_model: graph_share must be in [0, 1] and graph_candidate_trials positive";
  auto start = Clock::now();
  const bool graph_search = tune.graph_share > 0 && options.layout && Target::parse(options.target).kind == Target::Kind::LLVM &&
                            shape_var_names(g).empty();
  const int candidates = graph_search ? static_cast<int>(tune.trials * tune.graph_share) / tune.graph_candidate_trials : 0;
  ModelTuneOptions loops = tune;
  loops.trials = tune.trials - candidates * tune.graph_candidate_trials;
  // The graph search's share of the time too: loops that spend the whole budget leave it none (MobileNetV2,
  // 300 trials in 12 minutes on a loaded machine: 253 loop trials, then 0 graph candidates).
  if (candidates > 0 && tune.time_budget_s > 0) loops.time_budget_s = tune.time_budget_s * (1 - tune.graph_share);
  ModelTuneResult r = loops.trials > 0 ? tune_loops(g, options, loops, start) : ModelTuneResult{};
  if (candidates == 0) {
    r.graph.skipped = !graph_search ? "no graph search (graph_share 0, a GPU target, no blocked layout, or symbolic dims)"
                                    : "the budget is too small for one graph candidate";
    gate(g, options, tune, &r);
    r.elapsed_s = seconds_since(start);
    return r;
  }
  GraphSearchOptions so;
  so.max_candidates = candidates;
  so.progress = tune.progress;
  so.seed = tune.seed;
  if (tune.time_budget_s > 0) so.time_budget_s = std::max(1.0, tune.time_budget_s - seconds_since(start));
  r.graph = search_graph_plan(g, options, so);
  r.graph_trials = r.graph.measured * tune.graph_candidate_trials;
  // The unspent share goes back to the loops, on the winning plan's tasks (a candidate's new groups, such as a direct conv for a Winograd one).
  const int left = tune.trials - r.trials - r.graph_trials;
  if (left >= tune.batch && (tune.time_budget_s <= 0 || seconds_since(start) < tune.time_budget_s)) {
    CompileOptions won = options;
    if (r.graph.skipped.empty()) {
      won.layout_plan = r.graph.plan;
      won.choose_layouts = false;
    }
    loops.trials = left;
    loops.time_budget_s = tune.time_budget_s;
    ModelTuneResult more = tune_loops(g, won, loops, start);
    r.trials += more.trials;
    r.rounds += more.rounds;
    r.failures.insert(r.failures.end(), more.failures.begin(), more.failures.end());
    r.tasks = std::move(more.tasks);
    r.estimated_latency = more.estimated_latency;
  }
  gate(g, options, tune, &r);
  r.elapsed_s = seconds_since(start);
  return r;
}

}  // namespace kiln::tuner
