// gate_records (records_gate.h): the model with its records against the model with the defaults.
#include "kiln/tuner/records_gate.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "kiln/graph/bind_shapes.h"
#include "kiln/graph/layout_plan.h"
#include "kiln/graph/tuned_plan.h"
#include "kiln/ops/best_record.h"
#include "kiln/support/error.h"
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
int revert_to_defaults(const Graph& g, const CompileOptions& options, const LayoutPlan& plan, const std::set<std::string>& keys, bool cold) {
  CompileOptions one = options;
  one.choose_layouts = false;
  one.layout_plan = plan;
  tuning_db::Database db = tuning_db::Database::open(options.db);
  int reverted = 0;
  for (const ModelTask& t : extract_tasks(g, one)) {
    if (!keys.count(t.task.workload_key)) continue;
    SearchSpace space(t.task);
    Candidate def = space.default_candidate();
    space.materialize(&def);
    std::string key = canonical_trace(def.trace);
    std::optional<ops::BestRecord> now = ops::best_record(t.task, options.db);
    if (now && now->trace_json == key) continue;
    MeasureOptions mo;
    mo.repeat = 3;
    mo.min_repeat_ms = 10;
    mo.cold_inputs = cold;
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
  Executor tuned = compile_under(g, options, plan);
  std::set<std::string> from_records;
  for (const GroupInfo& gi : tuned.groups())
    if (gi.schedule == "database") from_records.insert(gi.workload_key);
  if (from_records.empty()) {
    r.skipped = "no group of the model runs a record";
    return r;
  }
  CompileOptions none = options;
  none.db.clear();
  Executor defaults = compile_under(g, none, plan);
  const std::vector<NDArray> inputs = random_inputs(g, o.seed);
  r.mismatch = mismatch(tuned.run(inputs), defaults.run(inputs));
  if (r.mismatch.empty()) {
    Comparison c;
    compare(defaults, tuned, inputs, o.rounds, o.round_ms, &c);
    r.ratio = c.decisive();
    r.tuned_time = *std::min_element(c.cand.begin(), c.cand.end());
    r.default_time = *std::min_element(c.inc.begin(), c.inc.end());
    r.kept = r.ratio < 1 - o.margin;
  }
  if (!r.kept) r.reverted = revert_to_defaults(g, options, plan, from_records, o.cold_inputs);
  return r;
}

}  // namespace kiln::tuner
