// Database: opening, workloads, tuning runs, adding and querying records.
#include "kiln/tuning_db/database.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "kiln/support/error.h"
#include "kiln/tuning_db/detail.h"

namespace kiln::tuning_db {

using detail::Stmt;
using detail::Transaction;

namespace detail {

DatabaseState::DatabaseState(const std::string& p, const OpenOptions& o)
    : path(p), options(o), conn(p, o.read_only, o.create_if_missing, o.busy_timeout_ms) {}

std::string filter_sql(const RecordFilter& f) {
  std::string sql = kRecordSelect;
  std::vector<std::string> conds;
  if (f.workload_key) conds.push_back("w.workload_key = ?");
  if (f.target) conds.push_back(target_condition(f.match));
  if (!f.include_errors) conds.push_back("r.error_kind = 'none'");
  if (f.feature_extractor)
    conds.push_back("r.id IN (SELECT record_id FROM record_features WHERE extractor = ?)");
  if (f.after_id) conds.push_back("r.id > ?");
  for (size_t i = 0; i < conds.size(); ++i) sql += (i ? " AND " : "WHERE ") + conds[i];
  sql += " ORDER BY r.id";
  if (f.limit > 0) sql += " LIMIT ?";
  return sql;
}

void bind_filter(Stmt& stmt, const RecordFilter& f) {
  int i = 1;
  if (f.workload_key) stmt.bind(i++, *f.workload_key);
  if (f.target) i = bind_target(stmt, i, *f.target, f.match);
  if (f.feature_extractor) stmt.bind(i++, *f.feature_extractor);
  if (f.after_id) stmt.bind(i++, *f.after_id);
  if (f.limit > 0) stmt.bind(i++, f.limit);
}

}  // namespace detail

// ---- lifetime ----

Database Database::open(const std::string& path, const OpenOptions& options) {
  KILN_USER_CHECK(!path.empty()) << "tuning database path is empty; pass a file path";
  KILN_USER_CHECK(options.busy_timeout_ms >= 0)
      << "OpenOptions::busy_timeout_ms is " << options.busy_timeout_ms << "; use 0 or more";
  KILN_USER_CHECK(options.cache_size_mib >= 1)
      << "OpenOptions::cache_size_mib is " << options.cache_size_mib << "; use 1 or more";
  // Refuses foreign, newer and truncated files before SQLite touches them.
  bool exists = detail::precheck_file(path);
  if (!exists) {
    KILN_USER_CHECK(options.create_if_missing && !options.read_only)
        << "tuning database '" << path << "' does not exist (or is empty); check the path, "
        << "or open it writable with create_if_missing to create it";
  }
  auto state = std::make_unique<detail::DatabaseState>(path, options);
  auto& conn = state->conn;
  // Switching the journal mode needs an exclusive lock, and SQLite may report
  // a lock held by a concurrent creator at once instead of waiting on the busy
  // handler; retry until the busy timeout so simultaneous first opens queue.
  auto set_wal = [&] {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.busy_timeout_ms);
    for (;;) {
      try {
        conn.exec("PRAGMA journal_mode = WAL");
        return;
      } catch (const detail::SqliteError& e) {
        if (!e.busy() || std::chrono::steady_clock::now() >= deadline) throw;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  // A new file goes to WAL before its first write, so concurrent creators agree.
  if (!exists) set_wal();
  state->schema_version = detail::prepare_schema(conn, options.read_only);
  if (!options.read_only) {
    // WAL: readers never block the writer, and writers of several processes queue on
    // the busy timeout. NORMAL sync: a killed process loses no committed batch (only a
    // power cut can lose the last commits), at a fraction of FULL's fsyncs.
    set_wal();
    conn.exec("PRAGMA synchronous = NORMAL");
  }
  conn.exec("PRAGMA foreign_keys = ON");
  // Negative = KiB. A larger cache keeps the hot index pages and best records
  // in memory (best-k on random workloads of a 100k-record file: 85 -> 50 us).
  conn.exec("PRAGMA cache_size = " + std::to_string(-1024LL * options.cache_size_mib));
  return Database(std::move(state));
}

int Database::latest_schema_version() { return detail::latest_schema_version(); }

Database::Database(std::unique_ptr<detail::DatabaseState> state) : state_(std::move(state)) {}
Database::Database(Database&&) noexcept = default;
Database& Database::operator=(Database&&) noexcept = default;
Database::~Database() = default;

detail::DatabaseState& Database::state() const {
  KILN_USER_CHECK(state_) << "this tuning Database was moved from; use the object it moved to";
  return *state_;
}

const std::string& Database::path() const { return state().path; }
int Database::schema_version() const { return state().schema_version; }

// ---- workloads ----

void Database::add_workload(const Workload& workload) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Transaction tx(s.conn);
  detail::upsert_workload(s.conn, workload);
  tx.commit();
}

std::optional<Workload> Database::workload(const std::string& key) const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Stmt q = s.conn.query("SELECT workload_key, name, compute_dag FROM workloads WHERE workload_key = ?");
  q.bind(1, key);
  if (!q.step()) return std::nullopt;
  return Workload{q.col_text(0), q.col_text(1), q.col_text(2)};
}

std::vector<WorkloadSummary> Database::workloads() const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Stmt q = s.conn.query(
      "SELECT w.workload_key, w.name, COUNT(r.id), COALESCE(SUM(r.error_kind <> 'none'), 0) "
      "FROM workloads w LEFT JOIN records r ON r.workload_id = w.id "
      "GROUP BY w.id ORDER BY w.workload_key");
  std::vector<WorkloadSummary> out;
  while (q.step()) out.push_back({q.col_text(0), q.col_text(1), q.col_int(2), q.col_int(3)});
  return out;
}

// ---- tuning runs ----

std::string Database::start_run(const TuningRun& run) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Transaction tx(s.conn);
  std::string uid = detail::upsert_run(s.conn, run);
  tx.commit();
  return uid;
}

void Database::end_run(const std::string& uid, std::optional<double> ended_at) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Stmt q = s.conn.query("UPDATE tuning_runs SET ended_at = ? WHERE uid = ?");
  q.bind(1, ended_at.value_or(detail::now_seconds())).bind(2, uid);
  q.run();
  KILN_USER_CHECK(s.conn.changes() == 1)
      << "tuning run " << uid << " is not in '" << s.path << "'; pass the uid start_run() returned";
}

namespace {
TuningRun read_run(const Stmt& q) {
  TuningRun r;
  r.uid = q.col_text(0);
  r.started_at = q.col_double(1);
  r.ended_at = q.col_opt_double(2);
  r.budget = q.col_int(3);
  r.seed = q.col_int(4);
  r.machine = q.col_text(5);
  return r;
}
const char* const kRunSelect =
    "SELECT uid, started_at, ended_at, budget, seed, machine FROM tuning_runs ";
}  // namespace

std::optional<TuningRun> Database::run(const std::string& uid) const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Stmt q = s.conn.query(std::string(kRunSelect) + "WHERE uid = ?");
  q.bind(1, uid);
  if (!q.step()) return std::nullopt;
  return read_run(q);
}

std::vector<TuningRun> Database::runs() const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Stmt q = s.conn.query(std::string(kRunSelect) + "ORDER BY started_at, id");
  std::vector<TuningRun> out;
  while (q.step()) out.push_back(read_run(q));
  return out;
}

// ---- records ----

std::vector<int64_t> Database::add_records(const std::vector<Record>& batch) {
  // Validate (and parse the JSON) before taking the write lock, to hold it briefly.
  std::vector<Record> rows;
  rows.reserve(batch.size());
  for (const Record& r : batch) rows.push_back(detail::normalise_record(r));
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<int64_t> ids;
  ids.reserve(rows.size());
  detail::InsertCache cache;
  Transaction tx(s.conn);
  for (const Record& r : rows) ids.push_back(*detail::insert_record(s.conn, cache, r, false));
  tx.commit();
  return ids;
}

namespace {

/** Ids of the stored targets that a query target selects under a match mode. */
std::vector<int64_t> matching_targets(detail::Connection& conn, const TargetInfo& target,
                                      TargetMatch match) {
  Stmt q = conn.query("SELECT id FROM targets t WHERE " + detail::target_condition(match));
  detail::bind_target(q, 1, target, match);
  std::vector<int64_t> ids;
  while (q.step()) ids.push_back(q.col_int(0));
  return ids;
}

}  // namespace

std::vector<Record> Database::best(const std::string& workload_key, const TargetInfo& target,
                                   int64_t k, TargetMatch match, Metric metric) const {
  KILN_USER_CHECK(k >= 1) << "best(): k is " << k << "; ask for at least 1 record";
  const bool by_min = metric == Metric::min;
  const char* column = by_min ? "r.min_time" : "r.median_time";
  // Per stored target, equality on (workload, target, error_kind = 'none') lets
  // SQLite walk the (..., time) index in order and stop after k rows; a single
  // query with IN (targets) would sort every valid record of the workload.
  std::string sql = std::string(detail::kRecordSelect) +
                    "WHERE r.workload_id = ? AND r.target_id = ? AND r.error_kind = 'none' AND " +
                    column + " IS NOT NULL ORDER BY " + column + ", r.id LIMIT ?";
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Transaction tx(s.conn, /*write=*/false);
  std::vector<Record> out;
  int64_t workload_id = 0;
  {
    Stmt w = s.conn.query("SELECT id FROM workloads WHERE workload_key = ?");
    w.bind(1, workload_key);
    if (!w.step()) return out;
    workload_id = w.col_int(0);
  }
  for (int64_t target_id : matching_targets(s.conn, target, match)) {
    Stmt q = s.conn.query(sql);
    q.bind(1, workload_id).bind(2, target_id).bind(3, k);
    while (q.step()) out.push_back(detail::read_record(q));
  }
  tx.commit();
  // Merge the per-target lists: lowest time first, older record on ties.
  auto key = [by_min](const Record& r) { return std::pair(by_min ? *r.min_time : *r.median_time, r.id); };
  std::sort(out.begin(), out.end(), [&](const Record& a, const Record& b) { return key(a) < key(b); });
  if (out.size() > static_cast<size_t>(k)) out.resize(k);
  return out;
}

std::vector<TargetInfo> Database::targets_of(const std::string& workload_key) const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Transaction tx(s.conn, /*write=*/false);
  Stmt q = s.conn.query(
      "SELECT t.target, t.cpu_model, t.cpu_features, t.gpu_arch, t.kiln_version FROM targets t WHERE EXISTS ("
      "SELECT 1 FROM records r JOIN workloads w ON r.workload_id = w.id "
      "WHERE w.workload_key = ? AND r.target_id = t.id AND r.error_kind = 'none') ORDER BY t.id");
  q.bind(1, workload_key);
  std::vector<TargetInfo> out;
  while (q.step()) {
    TargetInfo t;
    t.target = q.col_text(0);
    t.cpu_model = q.col_text(1);
    t.cpu_features = detail::split_features(q.col_text(2));
    t.gpu_arch = q.col_text(3);
    t.kiln_version = q.col_text(4);
    out.push_back(std::move(t));
  }
  tx.commit();
  return out;
}

std::vector<Record> Database::records(const std::string& workload_key, bool with_features) const {
  RecordFilter f;
  f.workload_key = workload_key;
  f.with_features = with_features;
  return find(f);
}

std::optional<Record> Database::record(int64_t id, bool with_features) const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<Record> out;
  {
    Stmt q = s.conn.query(std::string(detail::kRecordSelect) + "WHERE r.id = ?");
    q.bind(1, id);
    if (!q.step()) return std::nullopt;
    out.push_back(detail::read_record(q));
  }
  if (with_features) detail::load_features(s.conn, out);
  return out.front();
}

std::vector<Record> Database::find(const RecordFilter& filter) const {
  KILN_USER_CHECK(filter.limit >= 0) << "RecordFilter::limit is " << filter.limit
                                     << "; use 0 for no limit or a positive count";
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  // One read transaction: records and their features come from one snapshot.
  Transaction tx(s.conn, /*write=*/false);
  std::vector<Record> out;
  {
    Stmt q = s.conn.query(detail::filter_sql(filter));
    detail::bind_filter(q, filter);
    while (q.step()) out.push_back(detail::read_record(q));
  }
  if (filter.with_features) detail::load_features(s.conn, out);
  tx.commit();
  return out;
}

std::vector<Record> Database::training_records(RecordFilter filter) const {
  filter.with_features = true;
  return find(filter);
}

void Database::set_features(int64_t record_id, const FeatureSet& features) { set_features({{record_id, features}}); }

void Database::set_features(const std::vector<std::pair<int64_t, FeatureSet>>& batch) {
  for (const auto& [id, features] : batch) detail::validate_features(features);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Transaction tx(s.conn);
  for (const auto& [record_id, features] : batch) {
    {
      Stmt q = s.conn.query("SELECT COUNT(*) FROM records WHERE id = ?");
      q.bind(1, record_id);
      q.step();
      KILN_USER_CHECK(q.col_int(0) == 1) << "set_features(): record " << record_id << " is not in '"
                                         << s.path << "'; pass an id returned by add_records()";
    }
    detail::store_features(s.conn, record_id, features);
  }
  tx.commit();
}

}  // namespace kiln::tuning_db
