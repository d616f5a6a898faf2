// Database: statistics, deletion, pruning and the integrity check.
#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln/tuning_db/detail.h"

namespace kiln::tuning_db {

using detail::Stmt;
using detail::Transaction;

namespace {

std::vector<WorkloadTargetStats> per_workload_stats(detail::Connection& conn) {
  Stmt q = conn.query(
      "SELECT w.workload_key, w.name, t.target, t.cpu_model, t.cpu_features, t.gpu_arch, "
      "t.kiln_version, COUNT(*), SUM(r.error_kind <> 'none'), "
      "MIN(CASE WHEN r.error_kind = 'none' THEN r.median_time END), "
      "MIN(CASE WHEN r.error_kind = 'none' THEN r.min_time END) "
      "FROM records r JOIN workloads w ON w.id = r.workload_id "
      "JOIN targets t ON t.id = r.target_id "
      "GROUP BY r.workload_id, r.target_id ORDER BY w.workload_key, t.target, t.id");
  std::vector<WorkloadTargetStats> out;
  while (q.step()) {
    WorkloadTargetStats w;
    w.workload_key = q.col_text(0);
    w.workload_name = q.col_text(1);
    w.target = {q.col_text(2), q.col_text(3), detail::split_features(q.col_text(4)),
                q.col_text(5), q.col_text(6)};
    w.records = q.col_int(7);
    w.errors = q.col_int(8);
    w.best_median = q.col_opt_double(9);
    w.best_min = q.col_opt_double(10);
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

Stats Database::stats() const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Transaction tx(s.conn, /*write=*/false);
  Stats st;
  st.workloads = s.conn.scalar("SELECT COUNT(*) FROM workloads");
  st.targets = s.conn.scalar("SELECT COUNT(*) FROM targets");
  st.tuning_runs = s.conn.scalar("SELECT COUNT(*) FROM tuning_runs");
  st.records = s.conn.scalar("SELECT COUNT(*) FROM records");
  {
    Stmt q = s.conn.query(
        "SELECT error_kind, COUNT(*) FROM records WHERE error_kind <> 'none' GROUP BY error_kind");
    while (q.step()) {
      st.errors_by_kind[q.col_text(0)] = q.col_int(1);
      st.errors += q.col_int(1);
    }
  }
  st.per_workload = per_workload_stats(s.conn);
  tx.commit();
  return st;
}

int64_t Database::delete_records(const std::vector<int64_t>& ids) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Transaction tx(s.conn);
  int64_t deleted = 0;
  for (int64_t id : ids) {
    // Features go with the record (ON DELETE CASCADE).
    Stmt q = s.conn.query("DELETE FROM records WHERE id = ?");
    q.bind(1, id);
    q.run();
    deleted += s.conn.changes();
  }
  tx.commit();
  return deleted;
}

int64_t Database::delete_workload(const std::string& key) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Transaction tx(s.conn);
  int64_t records = 0;
  {
    Stmt q = s.conn.query(
        "SELECT COUNT(*) FROM records r JOIN workloads w ON w.id = r.workload_id "
        "WHERE w.workload_key = ?");
    q.bind(1, key);
    q.step();
    records = q.col_int(0);
  }
  Stmt del = s.conn.query("DELETE FROM workloads WHERE workload_key = ?");
  del.bind(1, key);
  del.run();
  tx.commit();
  return records;
}

namespace {

int64_t run_delete(detail::Connection& conn, const std::string& sql,
                   std::optional<double> value = std::nullopt,
                   std::optional<int64_t> count = std::nullopt) {
  Stmt q = conn.query(sql);
  if (value) q.bind(1, *value);
  if (count) q.bind(1, *count);
  q.run();
  return conn.changes();
}

int64_t prune_keep_best(detail::Connection& conn, int64_t k, Metric metric) {
  const char* column = metric == Metric::min ? "min_time" : "median_time";
  std::string sql = std::string(
      "DELETE FROM records WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER "
      "(PARTITION BY workload_id, target_id ORDER BY ") + column + ", id) AS rn "
      "FROM records WHERE error_kind = 'none') WHERE rn > ?)";
  return run_delete(conn, sql, std::nullopt, k);
}

}  // namespace

int64_t Database::prune(const PruneOptions& o) {
  KILN_USER_CHECK(!o.keep_best || *o.keep_best >= 1)
      << "prune(): keep_best is " << *o.keep_best << "; keep at least 1 record per workload "
      << "and target (use delete_workload() to drop a workload)";
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  int64_t deleted = 0;
  {
    Transaction tx(s.conn);
    if (o.drop_errors)
      deleted += run_delete(s.conn, "DELETE FROM records WHERE error_kind <> 'none'");
    if (o.older_than)
      deleted += run_delete(s.conn, "DELETE FROM records WHERE created_at < ?", *o.older_than);
    if (o.keep_best) deleted += prune_keep_best(s.conn, *o.keep_best, o.metric);
    tx.commit();
  }
  // VACUUM cannot run inside a transaction; it rewrites the file to drop free pages.
  if (o.vacuum) s.conn.exec("VACUUM");
  return deleted;
}

std::vector<std::string> Database::check_integrity() const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<std::string> problems;
  try {
    {
      Stmt q = s.conn.query("PRAGMA integrity_check");
      while (q.step()) problems.push_back(q.col_text(0));
    }
    if (problems.size() == 1 && problems[0] == "ok") problems.clear();
    Stmt fk = s.conn.query("PRAGMA foreign_key_check");
    while (fk.step())
      problems.push_back("table " + fk.col_text(0) + " row " + std::to_string(fk.col_int(1)) +
                         " refers to a missing row of " + fk.col_text(2));
  } catch (const Error& e) {
    // Damage bad enough to stop a check is itself a finding.
    problems.push_back(e.what());
  }
  return problems;
}

}  // namespace kiln::tuning_db
