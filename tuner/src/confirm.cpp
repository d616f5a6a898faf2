// confirm_best (confirm.h): contenders measured again side by side.
#include "kiln/tuner/confirm.h"

#include <algorithm>
#include <filesystem>

#include "kiln/ops/default_schedule.h"
#include "kiln/support/error.h"
#include "kiln/tuner/measure.h"
#include "kiln/tuner/peer.h"  // median_of
#include "kiln/tuner/schedule_rules.h"
#include "kiln/tuning_db/database.h"
#include "tune_internal.h"

namespace kiln::tuner {

using namespace detail;

size_t confirmed_winner(const std::vector<std::vector<double>>& round_times, size_t default_index, double margin) {
  const size_t n = round_times.size();
  auto min_of = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  if (default_index >= n || round_times[default_index].empty()) {
    size_t pick = n;
    for (size_t i = 0; i < n; ++i)
      if (!round_times[i].empty() && (pick == n || median_of(round_times[i]) < median_of(round_times[pick]))) pick = i;
    return pick;
  }
  const std::vector<double>& def = round_times[default_index];
  size_t pick = default_index;
  double best_ratio = 1 - margin;
  for (size_t i = 0; i < n; ++i) {
    const std::vector<double>& c = round_times[i];
    if (i == default_index || c.size() != def.size()) continue;  // a contender missing a round has no pairs to compare
    std::vector<double> ratios(c.size());
    for (size_t r = 0; r < c.size(); ++r) ratios[r] = c[r] / def[r];
    double ratio = median_of(ratios);
    if (ratio <= best_ratio && min_of(c) <= (1 - margin) * min_of(def)) best_ratio = ratio, pick = i;
  }
  return pick;
}

ConfirmResult confirm_best(const Task& task, const std::string& db_path, const ConfirmOptions& o) {
  KILN_USER_CHECK(o.top >= 1 && o.rounds >= 1) << "confirm_best: top (" << o.top << ") and rounds (" << o.rounds << ") must be at least 1";
  KILN_USER_CHECK(o.margin >= 0 && o.margin < 1) << "confirm_best: margin " << o.margin << " must be in [0, 1)";
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
  Candidate def;
  def.trace = ops::default_schedule(task).schedule.trace();
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
  mo.fastest_call = o.fastest_call;
  Measurer m(task, mo);
  std::vector<std::vector<double>> times(contenders.size()), round_best(contenders.size());
  std::vector<bool> failed(contenders.size(), false);
  for (int r = 0; r < o.rounds; ++r) {
    std::vector<MeasureResult> got = m.measure(contenders);
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i].error != MeasureError::None || got[i].run_times.empty()) failed[i] = true;
      if (failed[i]) continue;
      times[i].insert(times[i].end(), got[i].run_times.begin(), got[i].run_times.end());
      round_best[i].push_back(*std::min_element(got[i].run_times.begin(), got[i].run_times.end()));
    }
  }
  for (size_t i = 0; i < contenders.size(); ++i)
    if (failed[i]) round_best[i].clear();  // a contender that fails now does not compete
  res.contenders = static_cast<int>(contenders.size());
  size_t winner = confirmed_winner(round_best, def_index, o.margin);
  if (winner == contenders.size()) return res;
  // Only the winner is stored: the newest confirmed record is what compile takes.
  tuning_db::TuningRun run;
  run.machine = "confirm_best";
  std::string run_uid = db.start_run(run);
  tuning_db::Record rec;
  rec.workload_key = task.workload_key;
  rec.target = target_info(task.target, o.cold_inputs, true);
  rec.trace = keys[winner];
  rec.run_times = times[winner];
  rec.run_uid = run_uid;
  db.add_records({rec});
  db.end_run(run_uid);
  res.after = median_of(times[winner]);
  res.changed = winner != 0;
  res.default_won = winner == def_index;
  return res;
}

}  // namespace kiln::tuner
