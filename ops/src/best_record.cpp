// The best record of a task in a tuning database (best_record.h): the lookup that
// builds (kiln.compile(db=), kernel_builder) and tuning sessions share; and
// which other core counts of its target have records, for builds that find
// none of their own.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "kiln/ops/best_record.h"
#include "kiln/support/error.h"

namespace kiln::ops {

using detail::debug_logging;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string strip_suffix(std::string s, const std::string& suffix) {
  if (ends_with(s, suffix)) s.resize(s.size() - suffix.size());
  return s;
}

tuning_db::Database open_read_only(const std::string& path) {
  tuning_db::OpenOptions oo;
  oo.read_only = true;
  oo.create_if_missing = false;
  return tuning_db::Database::open(path, oo);
}

// The stored targets of the workload that are the task's but for -num-cores,
// on the same hardware: the nearest core count first, the larger on ties.
std::vector<Target> other_core_counts(const tuning_db::Database& db, const Task& task) {
  if (task.target.kind == Target::Kind::CUDA) return {};
  const tuning_db::TargetInfo ours = detail::target_info(task.target, false, false);
  std::vector<Target> out;
  for (tuning_db::TargetInfo t : db.targets_of(task.workload_key)) {
    t.target = strip_suffix(strip_suffix(t.target, detail::kConfirmedSuffix), detail::kColdInputsSuffix);
    t.kiln_version = ours.kiln_version;
    Target parsed;
    try {
      parsed = Target::parse(t.target);
    } catch (const Error&) {
      continue;  // a target this kiln no longer reads cannot stand in
    }
    if (parsed.num_cores == task.target.num_cores) continue;
    // The task's own target with the stored count: a parsed string does not
    // carry the features the records are matched on.
    Target other = task.target;
    other.num_cores = parsed.num_cores;
    Target as_ours = parsed;
    as_ours.num_cores = task.target.num_cores;
    t.target = as_ours.str();
    if (!detail::same_hardware(t, ours)) continue;
    bool seen = std::any_of(out.begin(), out.end(), [&](const Target& o) { return o.num_cores == other.num_cores; });
    if (!seen) out.push_back(other);
  }
  int n = task.target.num_cores;
  std::stable_sort(out.begin(), out.end(), [n](const Target& a, const Target& b) {
    int da = std::abs(a.num_cores - n), db = std::abs(b.num_cores - n);
    return da != db ? da < db : a.num_cores > b.num_cores;
  });
  return out;
}

// The records of one kind in the order they are tried: a confirmed kind's
// latest confirmation first (a confirmation stores only its winner, so the
// latest decides; of a run that stored several, as kiln did before, the
// lowest median), then earlier ones, newest first; a search's records by
// lowest median.
std::vector<tuning_db::Record> ranked(const tuning_db::Database& db, const std::string& key, const tuning_db::TargetInfo& kind) {
  if (!ends_with(kind.target, detail::kConfirmedSuffix)) return db.best(key, kind, 4);
  tuning_db::RecordFilter f;
  f.workload_key = key;
  f.target = kind;
  f.include_errors = false;
  std::vector<tuning_db::Record> all = db.find(f);
  std::reverse(all.begin(), all.end());
  if (all.empty()) return all;
  const std::string latest = all.front().run_uid;
  auto median = [](const tuning_db::Record& r) { return r.median_time.value_or(1e300); };
  std::stable_partition(all.begin(), all.end(), [&](const tuning_db::Record& r) { return r.run_uid == latest; });
  auto end_latest = std::find_if(all.begin(), all.end(), [&](const tuning_db::Record& r) { return r.run_uid != latest; });
  std::stable_sort(all.begin(), end_latest, [&](const auto& a, const auto& b) { return median(a) < median(b); });
  if (all.size() > 4) all.resize(4);
  return all;
}

// The best record of the first kind the task's target has (record_targets'
// order: confirmed cold, confirmed warm, cold, warm) that replays on the task.
std::optional<BestRecord> first_replaying(const tuning_db::Database& db, const Task& task, const std::string& db_path) {
  bool debug = debug_logging();
  tuning_db::TargetInfo kind;
  std::vector<tuning_db::Record> top;
  for (const tuning_db::TargetInfo& t : detail::record_targets(task.target)) {
    kind = t;
    top = ranked(db, task.workload_key, kind);
    if (!top.empty()) break;
  }
  for (const tuning_db::Record& r : top) {
    try {
      BestRecord b{te::Schedule::from_trace(task.outputs, te::Trace::from_json(r.trace)), r.trace, r.id, r.median_time.value_or(0)};
      if (debug)
        std::fprintf(stderr, "kiln: debug: using tuning record %lld of %s (median %.6g ms) for workload %s (%s) on '%s'\n", static_cast<long long>(r.id),
                     db_path.c_str(), b.median_time * 1e3, task.workload_key.c_str(), task.name.c_str(), kind.target.c_str());
      return b;
    } catch (const Error& e) {
      // A record an older kiln wrote may no longer replay (a user error); the
      // next best may. An internal error is a kiln bug: it propagates.
      if (debug) std::fprintf(stderr, "kiln: debug: tuning record %lld does not replay: %s\n", static_cast<long long>(r.id), e.what());
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<BestRecord> best_record(const Task& task, const std::string& db_path) {
  bool debug = debug_logging();
  if (!std::filesystem::exists(db_path)) {
    if (debug) std::fprintf(stderr, "kiln: debug: no tuning database at %s; using the given schedule\n", db_path.c_str());
    return std::nullopt;
  }
  tuning_db::Database db = open_read_only(db_path);
  if (auto b = first_replaying(db, task, db_path)) return b;
  if (debug)
    std::fprintf(stderr, "kiln: debug: no tuning record in %s for workload %s (%s) on '%s'; using the given schedule\n", db_path.c_str(),
                 task.workload_key.c_str(), task.name.c_str(), task.target.str().c_str());
  return std::nullopt;
}

std::vector<std::string> other_core_count_targets(const Task& task, const std::string& db_path) {
  if (!std::filesystem::exists(db_path)) return {};
  std::vector<std::string> out;
  for (const Target& t : other_core_counts(open_read_only(db_path), task)) out.push_back(t.str());
  return out;
}

std::optional<te::Schedule> best_schedule(const Task& task, const std::string& db_path, std::string* trace_json) {
  std::optional<BestRecord> b = best_record(task, db_path);
  if (!b) return std::nullopt;
  if (trace_json) *trace_json = b->trace_json;
  return b->schedule;
}

}  // namespace kiln::ops
