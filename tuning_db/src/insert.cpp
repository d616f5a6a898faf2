// Writing records: validation, derived fields, and the inserts shared by
// add_records() and import.
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "kiln/support/error.h"
#include "kiln/tuning_db/detail.h"
#include "kiln/tuning_db/jsonl.h"

namespace kiln::tuning_db::detail {

namespace {

void check_time(double t, const std::string& what, const std::string& uid) {
  KILN_USER_CHECK(std::isfinite(t) && t >= 0)
      << "tuning record " << (uid.empty() ? "(new)" : uid) << ": " << what << " is " << t
      << "; times must be finite and non-negative seconds";
}

double median_of(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  size_t n = times.size();
  return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

// Drops every member named "name": a DAG's names label it (kiln's dag_json names
// each op's tensor) but are not what the workload key identifies.
void drop_names(nlohmann::json& j) {
  if (j.is_object()) j.erase("name");
  if (j.is_object() || j.is_array())
    for (nlohmann::json& v : j) drop_names(v);
}

// Whether two canonical DAG texts are one workload. The key is a structural
// hash that leaves names out, so two same-shape layers (conv1's and conv2's
// Winograd matmul) share it while their DAG texts differ in tensor names only.
bool same_dag(const std::string& stored, const std::string& added) {
  if (stored == added) return true;
  nlohmann::json a = nlohmann::json::parse(stored, nullptr, false), b = nlohmann::json::parse(added);
  if (a.is_discarded()) return false;
  drop_names(a);
  drop_names(b);
  return a == b;
}

}  // namespace

int64_t trace_hash(const std::string& canonical_trace) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : canonical_trace) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return static_cast<int64_t>(h);
}

void validate_features(const FeatureSet& f) {
  KILN_USER_CHECK(!f.extractor.empty())
      << "features need an extractor name (e.g. \"ansor-v1\") so that incompatible "
      << "feature layouts are never mixed";
  KILN_USER_CHECK(f.rows >= 0 && f.cols >= 0 &&
                  static_cast<uint64_t>(f.rows) * static_cast<uint64_t>(f.cols) == f.values.size())
      << "features of extractor '" << f.extractor << "' have " << f.values.size()
      << " values but rows x cols = " << f.rows << " x " << f.cols << "; they must agree";
  for (float v : f.values)
    KILN_USER_CHECK(std::isfinite(v)) << "features of extractor '" << f.extractor
                                      << "' hold a non-finite value; replace NaN/inf before storing";
}

Record normalise_record(const Record& in) {
  Record r = in;
  KILN_USER_CHECK(!r.workload_key.empty()) << "tuning record: workload_key is empty; set it to "
                                              "the workload's key (add the workload first)";
  KILN_USER_CHECK(!r.target.target.empty())
      << "tuning record of workload " << r.workload_key
      << ": target.target is empty; set it to a target string such as \"llvm -mcpu=znver3\"";
  r.trace = canonical_json(r.trace, "the schedule trace of a record of workload " + r.workload_key);
  KILN_USER_CHECK(r.trace.front() == '[')
      << "the schedule trace of a record of workload " << r.workload_key
      << " is not a JSON array; a trace is an array of step objects, e.g. [{\"kind\":\"split\"}]";
  for (double t : r.run_times) check_time(t, "a run time", r.uid);
  if (r.build_time) check_time(*r.build_time, "the build time", r.uid);
  KILN_USER_CHECK(r.error_kind != ErrorKind::none || !r.run_times.empty())
      << "tuning record of workload " << r.workload_key
      << " has error kind none but no run times; record the measured times, or set the "
      << "error kind (build_error, run_error, timeout, wrong_result)";
  if (r.run_times.empty()) {
    r.min_time.reset();
    r.median_time.reset();
  } else {
    r.min_time = *std::min_element(r.run_times.begin(), r.run_times.end());
    r.median_time = median_of(r.run_times);
  }
  KILN_USER_CHECK(std::isfinite(r.timestamp))
      << "tuning record of workload " << r.workload_key << " has a non-finite timestamp";
  if (r.timestamp == 0) r.timestamp = now_seconds();
  if (r.uid.empty()) r.uid = new_uid();
  if (r.features) validate_features(*r.features);
  // join_features validates the feature names; the result is discarded here.
  join_features(r.target.cpu_features);
  return r;
}

void upsert_workload(Connection& conn, const Workload& w) {
  KILN_USER_CHECK(!w.key.empty()) << "workload key is empty; pass the compute DAG's key";
  std::string dag = canonical_json(w.compute_dag, "the compute DAG of workload " + w.key);
  Stmt find = conn.query("SELECT compute_dag FROM workloads WHERE workload_key = ?");
  find.bind(1, w.key);
  if (find.step()) {
    KILN_USER_CHECK(same_dag(find.col_text(0), dag))
        << "workload " << w.key << " is already stored with a different compute DAG; "
        << "two DAGs must not share a key (a hash collision, or a changed DAG format): "
        << "delete the old workload or use another key";
    return;
  }
  Stmt insert = conn.query(
      "INSERT INTO workloads(workload_key, name, compute_dag, created_at) VALUES(?, ?, ?, ?)");
  insert.bind(1, w.key).bind(2, w.name).bind(3, dag).bind(4, now_seconds());
  insert.run();
}

std::string upsert_run(Connection& conn, const TuningRun& in) {
  TuningRun run = in;
  if (run.uid.empty()) run.uid = new_uid();
  if (run.started_at == 0) run.started_at = now_seconds();
  KILN_USER_CHECK(std::isfinite(run.started_at) && (!run.ended_at || std::isfinite(*run.ended_at)))
      << "tuning run " << run.uid << " has a non-finite start or end time";
  Stmt insert = conn.query(
      "INSERT INTO tuning_runs(uid, started_at, ended_at, budget, seed, machine) "
      "VALUES(?, ?, ?, ?, ?, ?) ON CONFLICT(uid) DO NOTHING");
  insert.bind(1, run.uid).bind(2, run.started_at).bind(3, run.ended_at);
  insert.bind(4, run.budget).bind(5, run.seed).bind(6, run.machine);
  insert.run();
  return run.uid;
}

namespace {

int64_t workload_id(Connection& conn, InsertCache& cache, const std::string& key) {
  auto it = cache.workloads.find(key);
  if (it != cache.workloads.end()) return it->second;
  Stmt s = conn.query("SELECT id FROM workloads WHERE workload_key = ?");
  s.bind(1, key);
  KILN_USER_CHECK(s.step()) << "workload " << key << " is not in the tuning database '"
                            << conn.path() << "'; call add_workload() before adding its records";
  return cache.workloads[key] = s.col_int(0);
}

int64_t target_id(Connection& conn, InsertCache& cache, const TargetInfo& t) {
  std::string features = join_features(t.cpu_features);
  // A JSON array keys the per-batch cache unambiguously, whatever the strings hold.
  std::string key =
      nlohmann::json({t.target, t.cpu_model, features, t.gpu_arch, t.kiln_version}).dump();
  auto it = cache.targets.find(key);
  if (it != cache.targets.end()) return it->second;
  {
    Stmt s = conn.query(
        "SELECT id FROM targets t WHERE " + target_condition(TargetMatch::exact));
    bind_target(s, 1, t, TargetMatch::exact);
    if (s.step()) return cache.targets[key] = s.col_int(0);
  }
  Stmt insert = conn.query(
      "INSERT INTO targets(target, cpu_model, cpu_features, gpu_arch, kiln_version) "
      "VALUES(?, ?, ?, ?, ?)");
  insert.bind(1, t.target).bind(2, t.cpu_model).bind(3, features);
  insert.bind(4, t.gpu_arch).bind(5, t.kiln_version);
  insert.run();
  return cache.targets[key] = conn.last_insert_id();
}

std::optional<int64_t> run_id(Connection& conn, InsertCache& cache, const std::string& uid) {
  if (uid.empty()) return std::nullopt;
  auto it = cache.runs.find(uid);
  if (it != cache.runs.end()) return it->second;
  Stmt s = conn.query("SELECT id FROM tuning_runs WHERE uid = ?");
  s.bind(1, uid);
  KILN_USER_CHECK(s.step()) << "tuning run " << uid << " is not in the tuning database '"
                            << conn.path() << "'; call start_run() before adding its records";
  return cache.runs[uid] = s.col_int(0);
}

}  // namespace

void store_features(Connection& conn, int64_t record_id, const FeatureSet& f) {
  std::vector<unsigned char> blob = encode_floats(f.values);
  Stmt s = conn.query(
      "INSERT OR REPLACE INTO record_features(record_id, extractor, num_rows, num_cols, data) "
      "VALUES(?, ?, ?, ?, ?)");
  s.bind(1, record_id).bind(2, f.extractor).bind(3, f.rows).bind(4, f.cols);
  s.bind_blob(5, blob.data(), blob.size());
  s.run();
}

std::optional<int64_t> insert_record(Connection& conn, InsertCache& cache, const Record& r,
                                     bool skip_known_uid) {
  int64_t wid = workload_id(conn, cache, r.workload_key);
  int64_t tid = target_id(conn, cache, r.target);
  std::optional<int64_t> rid = run_id(conn, cache, r.run_uid);
  std::string sql =
      "INSERT INTO records(uid, workload_id, target_id, run_id, trace, run_times, min_time, "
      "median_time, error_kind, error_msg, build_time, created_at, trace_hash) "
      "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" +
      std::string(skip_known_uid ? " ON CONFLICT(uid) DO NOTHING" : "");
  Stmt s = conn.query(sql);
  s.bind(1, r.uid).bind(2, wid).bind(3, tid);
  if (rid) s.bind(4, *rid); else s.bind_null(4);
  s.bind(5, r.trace).bind(6, nlohmann::json(r.run_times).dump());
  s.bind(7, r.min_time).bind(8, r.median_time).bind(9, to_string(r.error_kind));
  s.bind(10, r.error_msg).bind(11, r.build_time).bind(12, r.timestamp).bind(13, trace_hash(r.trace));
  s.run();
  if (skip_known_uid && conn.changes() == 0) return std::nullopt;
  int64_t id = conn.last_insert_id();
  if (r.features) store_features(conn, id, *r.features);
  return id;
}

}  // namespace kiln::tuning_db::detail
