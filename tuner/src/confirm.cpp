// confirm_best (confirm.h): contenders measured again side by side.
#include "kiln/tuner/confirm.h"

#include <algorithm>
#include <filesystem>

#include "kiln/support/error.h"
#include "kiln/tuner/measure.h"
#include "kiln/tuner/peer.h"  // median_of
#include "kiln/tuner/schedule_rules.h"
#include "kiln/tuning_db/database.h"
#include "tune_internal.h"

namespace kiln::tuner {

using namespace detail;

ConfirmResult confirm_best(const Task& task, const std::string& db_path, const ConfirmOptions& o) {
  KILN_USER_CHECK(o.top >= 1 && o.rounds >= 1) << "confirm_best: top (" << o.top << ") and rounds (" << o.rounds << ") must be at least 1";
  KILN_USER_CHECK(std::filesystem::exists(db_path)) << "confirm_best: no tuning database at '" << db_path << "'";
  tuning_db::Database db = tuning_db::Database::open(db_path);
  // The task's valid records on this hardware, any timing, confirmed or not, best min time first.
  std::vector<tuning_db::TargetInfo> ours = record_targets(task.target);
  std::vector<tuning_db::Record> valid;
  for (tuning_db::Record& r : db.records(task.workload_key))
    if (r.error_kind == tuning_db::ErrorKind::none && r.min_time &&
        std::any_of(ours.begin(), ours.end(), [&](const tuning_db::TargetInfo& t) { return same_hardware(r.target, t); }))
      valid.push_back(std::move(r));
  ConfirmResult res;
  if (valid.empty()) return res;
  std::stable_sort(valid.begin(), valid.end(), [](const auto& a, const auto& b) { return *a.min_time < *b.min_time; });
  res.before = *valid.front().min_time;
  // The contenders and their traces in the DB's (canonical) form, as stored.
  std::vector<Candidate> contenders;
  std::vector<std::string> keys;
  for (const tuning_db::Record& r : valid) {
    if (static_cast<int>(contenders.size()) == o.top) break;
    if (std::find(keys.begin(), keys.end(), r.trace) != keys.end()) continue;
    Candidate c;
    c.trace = te::Trace::from_json(r.trace);
    contenders.push_back(std::move(c));
    keys.push_back(r.trace);
  }
  // The default schedule competes: a record must beat what the task gets without one.
  SearchSpace space(task);
  Candidate def = space.default_candidate();
  space.materialize(&def);
  std::string def_key = canonical_trace(def.trace);
  size_t def_index = static_cast<size_t>(std::find(keys.begin(), keys.end(), def_key) - keys.begin());
  if (def_index == keys.size()) {
    contenders.push_back(def);
    keys.push_back(def_key);
  }
  MeasureOptions mo;
  mo.repeat = 3;
  mo.min_repeat_ms = 10;
  mo.cold_inputs = o.cold_inputs;
  Measurer m(task, mo);
  std::vector<std::vector<double>> times(contenders.size());
  std::vector<std::string> errors(contenders.size());
  for (int r = 0; r < o.rounds; ++r) {
    std::vector<MeasureResult> got = m.measure(contenders);
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i].error != MeasureError::None) errors[i] = got[i].error_msg;
      times[i].insert(times[i].end(), got[i].run_times.begin(), got[i].run_times.end());
    }
  }
  tuning_db::TuningRun run;
  run.machine = "confirm_best";
  std::string run_uid = db.start_run(run);
  std::vector<tuning_db::Record> out;
  size_t winner = contenders.size();
  for (size_t i = 0; i < contenders.size(); ++i) {
    if (times[i].empty() || !errors[i].empty()) continue;  // a contender that fails now does not compete
    tuning_db::Record r;
    r.workload_key = task.workload_key;
    r.target = target_info(task.target, o.cold_inputs, true);
    r.trace = keys[i];
    r.run_times = times[i];
    r.run_uid = run_uid;
    out.push_back(std::move(r));
    // Ranked as compile ranks records: by the median.
    if (winner == contenders.size() || median_of(times[i]) < median_of(times[winner])) winner = i;
  }
  db.add_records(out);
  db.end_run(run_uid);
  res.contenders = static_cast<int>(contenders.size());
  if (winner < contenders.size()) {
    res.after = median_of(times[winner]);
    res.changed = winner != 0;
    res.default_won = winner == def_index;
  }
  return res;
}

}  // namespace kiln::tuner
