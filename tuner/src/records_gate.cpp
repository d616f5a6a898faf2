// gate_records (records_gate.h): the model with its records against the model with the defaults.
#include "kiln/tuner/records_gate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "kiln/graph/bind_shapes.h"
#include "kiln/graph/layout_plan.h"
#include "kiln/graph/tuned_plan.h"
#include "kiln/ops/best_record.h"
#include "kiln/ops/default_schedule.h"
#include "kiln/support/error.h"
#include "kiln/tuner/confirm.h"
#include "kiln/tuner/peer.h"  // median_of
#include "kiln/tuner/measure.h"
#include "kiln/tuner/tune_model.h"
#include "kiln/tuning_db/database.h"
#include "model_timing.h"
#include "tune_internal.h"

namespace kiln::tuner {

using namespace graph;
using namespace detail;

namespace {

// The plan compile(db=) takes (executor.cpp), so that both sides differ in their schedules only.
LayoutPlan plan_compile_takes(const Graph& g, const Target& target, const CompileOptions& options) {
  LayoutPlan plan = options.layout_plan;
  if (!options.layout || !options.choose_layouts) return plan;
  if (std::optional<LayoutPlan> tuned = tuned_graph_plan(g, target, options.db)) {
    plan = *tuned;
    plan.winograd = std::min(tuned->winograd, options.layout_plan.winograd);
    return plan;
  }
  return choose_layout_plan(g, target, options.db, nullptr, options.layout_plan.winograd);
}

// Confirms the default schedule of each task in `keys` whose compiled schedule is a record of another: measured
// alone (for the record's times), stored as the newest confirmation. Returns how many.
int revert_to_defaults(const Graph& g, const CompileOptions& options, const LayoutPlan& plan, const std::set<std::string>& keys,
                       const RecordsGateOptions& o) {
  const bool cold = o.cold_inputs;
  CompileOptions one = options;
  one.choose_layouts = false;
  one.layout_plan = plan;
  tuning_db::Database db = tuning_db::Database::open(options.db);
  int reverted = 0;
  for (const ModelTask& t : extract_tasks(g, one)) {
    if (!keys.count(t.task.workload_key)) continue;
    Candidate def;
    def.trace = ops::default_schedule(t.task).schedule.trace();
    std::string key = canonical_trace(def.trace);
    std::optional<ops::BestRecord> now = ops::best_record(t.task, options.db);
    if (now && now->trace_json == key) continue;
    MeasureOptions mo;
    mo.repeat = 3;
    mo.min_repeat_ms = 10;
    mo.cold_inputs = cold;
    mo.fastest_call = o.fastest_call;
    MeasureResult m = Measurer(t.task, mo).measure({def}).front();
    if (m.error != MeasureError::None || m.run_times.empty()) continue;  // the default cannot run alone: leave the record
    tuning_db::TuningRun run;
    run.machine = "gate_records";
    std::string uid = db.start_run(run);
    tuning_db::Record r;
    r.workload_key = t.task.workload_key;
    r.target = target_info(t.task.target, cold, true);
    r.trace = key;
    r.run_times = m.run_times;
    r.run_uid = uid;
    db.add_records({r});
    db.end_run(uid);
    ++reverted;
  }
  return reverted;
}

// Per round, each plan step's fastest time over runs of >= round_ms (under load a step's median still
// catches the scheduler's slices; its minimum is what its code costs), the two executors interleaved (who
// goes first alternates). Returns false where their steps differ (then no step can be judged on its own).
bool profile_rounds(const Executor& with, const Executor& without, const std::vector<NDArray>& in, int rounds, double round_ms,
                    std::vector<std::vector<double>>* a, std::vector<std::vector<double>>* b) {
  double single = std::max(1e-6, std::min(time_calls(with, in, 1), time_calls(without, in, 1)));
  int runs = std::max(5, static_cast<int>(std::ceil(round_ms * 1e-3 / single)));
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      bool records_side = (r + k) % 2 == 0;
      const ModelRunner& runner = (records_side ? with : without).runner();
      std::vector<double> best, t;
      for (int i = 0; i < runs; ++i) {
        t.assign(runner.plan().steps.size(), 0.0);  // run() adds to it
        runner.run(in, &t);
        if (best.empty()) best = t;
        for (size_t s = 0; s < t.size() && s < best.size(); ++s) best[s] = std::min(best[s], t[s]);
      }
      (records_side ? a : b)->push_back(std::move(best));
    }
  }
  const std::vector<GroupInfo>&ga = with.groups(), &gb = without.groups();
  if (ga.size() != gb.size() || a->front().size() != ga.size()) return false;
  for (size_t s = 0; s < ga.size(); ++s)
    if (ga[s].name != gb[s].name) return false;
  return true;
}

// The whole model with `cand` against `inc`, interleaved (model_timing.h).
detail::Comparison compare_whole(const Executor& inc, const Executor& cand, const std::vector<NDArray>& in, const RecordsGateOptions& o) {
  detail::Comparison c;
  compare(inc, cand, in, o.rounds, o.round_ms, &c);
  return c;
}

double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

bool tuned_side_holds(const std::vector<double>& round_ratios, double fastest_tuned, double fastest_default) {
  KILN_USER_CHECK(!round_ratios.empty() && fastest_tuned > 0 && fastest_default > 0) << "tuned_side_holds: needs rounds and positive times";
  // The defaults are the incumbent: a tie, or a loss either way, goes to them.
  return detail::Comparison::median(round_ratios) <= 1 && fastest_tuned <= fastest_default;
}

std::vector<RecordVerdict> judge_records(const std::vector<std::string>& step_keys, const std::vector<std::vector<double>>& with_records,
                                         const std::vector<std::vector<double>>& with_defaults, double margin) {
  KILN_USER_CHECK(!with_records.empty() && with_records.size() == with_defaults.size()) << "judge_records: both sides need the same rounds, at least one";
  for (size_t r = 0; r < with_records.size(); ++r)
    KILN_USER_CHECK(with_records[r].size() == step_keys.size() && with_defaults[r].size() == step_keys.size())
        << "judge_records: round " << r << " has " << with_records[r].size() << " and " << with_defaults[r].size() << " step times for "
        << step_keys.size() << " steps";
  std::vector<RecordVerdict> out;
  std::map<std::string, size_t> index;
  std::vector<std::vector<double>> rec, def;  // per verdict, per round: the sum over its steps
  for (size_t s = 0; s < step_keys.size(); ++s) {
    if (step_keys[s].empty()) continue;
    auto [it, fresh] = index.emplace(step_keys[s], out.size());
    if (fresh) {
      out.push_back(RecordVerdict{step_keys[s], "", 0, 0, 0, 0, false});
      rec.emplace_back(with_records.size(), 0.0);
      def.emplace_back(with_records.size(), 0.0);
    }
    ++out[it->second].groups;
    for (size_t r = 0; r < with_records.size(); ++r) {
      rec[it->second][r] += with_records[r][s];
      def[it->second][r] += with_defaults[r][s];
    }
  }
  for (size_t v = 0; v < out.size(); ++v) {
    std::vector<double> ratios;
    for (size_t r = 0; r < rec[v].size(); ++r) ratios.push_back(rec[v][r] / std::max(def[v][r], 1e-12));
    out[v].record_time = median_of(rec[v]);
    out[v].default_time = median_of(def[v]);
    out[v].ratio = median_of(ratios);
    out[v].kept = confirmed_winner({rec[v], def[v]}, 1, margin) == 0;
  }
  return out;
}

namespace {

// Steps 1-3 of the gate (records_gate.h) under `plan`.
void gate_schedules(const Graph& g, const CompileOptions& options, const LayoutPlan& plan, const std::vector<NDArray>& inputs,
                    const RecordsGateOptions& o, RecordsGateResult* out) {
  RecordsGateResult& r = *out;
  Executor tuned = compile_under(g, options, plan);
  std::set<std::string> from_records;
  for (const GroupInfo& gi : tuned.groups())
    if (gi.schedule == "database") from_records.insert(gi.workload_key);
  if (from_records.empty()) {
    r.skipped = "no group of the model runs a record";
    return;
  }
  CompileOptions none = options;
  none.db.clear();
  Executor defaults = compile_under(g, none, plan);
  r.mismatch = mismatch(tuned.run(inputs), defaults.run(inputs));
  if (!r.mismatch.empty()) {
    r.reverted = revert_to_defaults(g, options, plan, from_records, o);
    return;
  }
  detail::Comparison all = compare_whole(defaults, tuned, inputs, o);
  r.ratio = all.decisive();
  r.tuned_time = fastest(all.cand);
  r.default_time = fastest(all.inc);
  std::vector<std::vector<double>> with, without;
  if (!o.per_record || !profile_rounds(tuned, defaults, inputs, o.rounds, o.round_ms, &with, &without)) {
    r.kept = r.ratio < 1 - o.margin;  // all or nothing, on the whole model
    if (!r.kept) r.reverted = revert_to_defaults(g, options, plan, from_records, o);
    return;
  }
  std::vector<std::string> keys;
  for (const GroupInfo& gi : tuned.groups()) keys.push_back(gi.schedule == "database" ? gi.workload_key : "");
  r.records = judge_records(keys, with, without, o.margin);
  std::set<std::string> losers, winners;
  for (RecordVerdict& v : r.records) {
    for (const GroupInfo& gi : tuned.groups())
      if (gi.workload_key == v.workload_key) v.ops = gi.ops;
    (v.kept ? winners : losers).insert(v.workload_key);
  }
  r.reverted = revert_to_defaults(g, options, plan, losers, o);
  if (winners.empty()) return;
  // What the winners leave their neighbours (caches, the pool) shows only in the whole model.
  Executor kept = losers.empty() ? tuned : compile_under(g, options, plan);
  detail::Comparison c = compare_whole(defaults, kept, inputs, o);
  r.kept_ratio = c.decisive();
  r.kept_time = fastest(c.cand);
  r.kept = tuned_side_holds(c.ratios, r.kept_time, fastest(c.inc));
  if (!r.kept) {
    for (RecordVerdict& v : r.records) v.kept = false;
    r.reverted += revert_to_defaults(g, options, plan, winners, o);
  }
}

// Step 4: the tuned model as compile(db=) now takes it (the stored plan, the records that stayed) against the
// untuned one (the plan and schedules compile takes without a database); where it is slower either way, the
// untuned plan is stored as the model's plan, so compile(db=) takes that.
void gate_plan(const Graph& g, const CompileOptions& options, const LayoutPlan& plan, const LayoutPlan& untuned,
               const std::vector<NDArray>& inputs, const RecordsGateOptions& o, RecordsGateResult* r) {
  CompileOptions none = options;
  none.db.clear();
  Executor base = compile_under(g, none, untuned);
  Executor now = compile_under(g, options, plan);
  // Plans that build the same groups (a cap that gives the default blocks) differ in their records only: steps 2-3 judged those.
  auto same_group = [](const GroupInfo& a, const GroupInfo& b) { return a.name == b.name && a.workload_key == b.workload_key; };
  if (std::equal(now.groups().begin(), now.groups().end(), base.groups().begin(), base.groups().end(), same_group)) return;
  std::string wrong = mismatch(now.run(inputs), base.run(inputs));
  bool lost = !wrong.empty();
  if (!lost) {
    detail::Comparison c = compare_whole(base, now, inputs, o);
    r->plan_ratio = c.decisive();
    lost = !tuned_side_holds(c.ratios, fastest(c.cand), fastest(c.inc));
  }
  if (!lost) return;
  const Target target = Target::parse(options.target);
  tuning_db::GraphPlan p;
  p.model_key = model_key(g);
  p.target = ops::detail::target_info(target);
  p.plan = plan_to_json(untuned);
  tuning_db::Database::open(options.db).put_graph_plan(p);
  r->plan_reverted = true;
}

}  // namespace

RecordsGateResult gate_records(const Graph& g, const CompileOptions& options, const RecordsGateOptions& o) {
  KILN_USER_CHECK(o.rounds > 0 && o.margin >= 0 && o.margin < 1) << "gate_records: rounds must be positive and margin in [0, 1)";
  RecordsGateResult r;
  const Target target = Target::parse(options.target);
  if (options.db.empty() || !std::filesystem::exists(options.db)) r.skipped = "no tuning database";
  else if (target.kind != Target::Kind::LLVM) r.skipped = "the gate times llvm targets only";
  else if (!shape_var_names(g).empty()) r.skipped = "the model has symbolic dimensions";
  if (!r.skipped.empty()) return r;
  const LayoutPlan plan = plan_compile_takes(g, target, options);
  CompileOptions none = options;
  none.db.clear();
  const LayoutPlan untuned = plan_compile_takes(g, target, none);
  const std::vector<NDArray> inputs = random_inputs(g, o.seed);
  gate_schedules(g, options, plan, inputs, o, &r);
  if (o.check_plan && plan_to_json(plan) != plan_to_json(untuned)) gate_plan(g, options, plan, untuned, inputs, o, &r);
  return r;
}

}  // namespace kiln::tuner
