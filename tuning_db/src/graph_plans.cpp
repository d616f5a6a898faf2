// Graph-level plans: the plan of graph choices a search found fastest for a
// model (keyed by the model's key and the hardware, as records are), and the
// candidates it measured on the way, so a resumed search measures none twice.
// The plan's text is opaque here (the graph compiler reads it); a checksum
// of it is written with it, so a reader can tell an edited or damaged row.
#include <cmath>
#include <cstdio>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln/tuning_db/detail.h"

namespace kiln::tuning_db {

using detail::Stmt;
using detail::Transaction;

std::string graph_plan_checksum(const std::string& text) {
  // FNV-1a, 64 bits: a guard against damage and hand edits, not an attacker.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {

constexpr const char* kHardware = "model_key = ? AND target = ? AND cpu_model = ? AND cpu_features = ? AND gpu_arch = ?";

void require_graph_tables(const detail::DatabaseState& s, const char* call) {
  KILN_USER_CHECK(!s.options.read_only && s.schema_version >= 4)
      << call << ": tuning database '" << s.path << "' is open read-only; graph plans are written, "
      << "so open it writable (a tuning session does)";
}

void check_key(const std::string& model_key, const TargetInfo& target, const char* call) {
  KILN_USER_CHECK(!model_key.empty() && !target.target.empty()) << call << ": the model key and target string must not be empty";
}

int bind_hardware(Stmt& q, int i, const std::string& model_key, const TargetInfo& target) {
  q.bind(i, model_key).bind(i + 1, target.target).bind(i + 2, target.cpu_model);
  q.bind(i + 3, detail::join_features(target.cpu_features)).bind(i + 4, target.gpu_arch);
  return i + 5;
}

void bind_opt(Stmt& q, int i, const std::optional<double>& v, const char* what, const char* call) {
  KILN_USER_CHECK(!v || (std::isfinite(*v) && *v >= 0)) << call << ": " << what << " is " << *v << "; give a finite time of at least 0 s";
  q.bind(i, v);
}

}  // namespace

void Database::put_graph_plan(const GraphPlan& plan) {
  check_key(plan.model_key, plan.target, "put_graph_plan()");
  KILN_USER_CHECK(!plan.plan.empty()) << "put_graph_plan(): the plan text is empty";
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  require_graph_tables(s, "put_graph_plan()");
  Transaction tx(s.conn);
  Stmt q = s.conn.query(
      "INSERT INTO graph_plans(model_key, target, cpu_model, cpu_features, gpu_arch, plan, checksum, time, baseline_time, updated_at) "
      "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
      "ON CONFLICT(model_key, target, cpu_model, cpu_features, gpu_arch) DO UPDATE SET plan = excluded.plan, "
      "checksum = excluded.checksum, time = excluded.time, baseline_time = excluded.baseline_time, updated_at = excluded.updated_at");
  int i = bind_hardware(q, 1, plan.model_key, plan.target);
  q.bind(i, plan.plan).bind(i + 1, graph_plan_checksum(plan.plan));
  bind_opt(q, i + 2, plan.time, "the plan's time", "put_graph_plan()");
  bind_opt(q, i + 3, plan.baseline_time, "the baseline time", "put_graph_plan()");
  q.bind(i + 4, plan.updated_at > 0 ? plan.updated_at : detail::now_seconds());
  q.run();
  tx.commit();
}

std::optional<GraphPlan> Database::graph_plan(const std::string& model_key, const TargetInfo& target) const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.schema_version < 4) return std::nullopt;  // an older file opened read-only: no table, no plan
  Stmt q = s.conn.query(std::string("SELECT plan, checksum, time, baseline_time, updated_at FROM graph_plans WHERE ") + kHardware);
  bind_hardware(q, 1, model_key, target);
  if (!q.step()) return std::nullopt;
  GraphPlan p;
  p.model_key = model_key;
  p.target = target;
  p.target.kiln_version.clear();
  p.plan = q.col_text(0);
  p.checksum = q.col_text(1);
  p.time = q.col_opt_double(2);
  p.baseline_time = q.col_opt_double(3);
  p.updated_at = q.col_double(4);
  return p;
}

void Database::add_graph_candidate(const GraphCandidate& c) {
  check_key(c.model_key, c.target, "add_graph_candidate()");
  KILN_USER_CHECK(!c.plan.empty() && !c.against.empty()) << "add_graph_candidate(): the candidate's and its rival's plan texts must not be empty";
  KILN_USER_CHECK(c.ratio.has_value() != !c.error_msg.empty())
      << "add_graph_candidate(): a candidate has either a ratio (measured) or an error message (not measured), not both or neither";
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  require_graph_tables(s, "add_graph_candidate()");
  Transaction tx(s.conn);
  Stmt q = s.conn.query(
      "INSERT OR REPLACE INTO graph_candidates(model_key, target, cpu_model, cpu_features, gpu_arch, plan, against, ratio, time, "
      "error_msg, created_at) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  int i = bind_hardware(q, 1, c.model_key, c.target);
  q.bind(i, c.plan).bind(i + 1, c.against);
  bind_opt(q, i + 2, c.ratio, "the ratio", "add_graph_candidate()");
  bind_opt(q, i + 3, c.time, "the time", "add_graph_candidate()");
  q.bind(i + 4, c.error_msg).bind(i + 5, c.created_at > 0 ? c.created_at : detail::now_seconds());
  q.run();
  tx.commit();
}

std::vector<GraphCandidate> Database::graph_candidates(const std::string& model_key, const TargetInfo& target) const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<GraphCandidate> out;
  if (s.schema_version < 4) return out;
  Stmt q = s.conn.query(std::string("SELECT plan, against, ratio, time, error_msg, created_at FROM graph_candidates WHERE ") + kHardware +
                        " ORDER BY id");
  bind_hardware(q, 1, model_key, target);
  while (q.step()) {
    GraphCandidate c;
    c.model_key = model_key;
    c.target = target;
    c.target.kiln_version.clear();
    c.plan = q.col_text(0);
    c.against = q.col_text(1);
    c.ratio = q.col_opt_double(2);
    c.time = q.col_opt_double(3);
    c.error_msg = q.col_text(4);
    c.created_at = q.col_double(5);
    out.push_back(std::move(c));
  }
  return out;
}

int64_t Database::delete_graph_plans(const std::string& model_key) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  require_graph_tables(s, "delete_graph_plans()");
  Transaction tx(s.conn);
  int64_t n = 0;
  for (const char* table : {"graph_plans", "graph_candidates"}) {
    Stmt q = s.conn.query(std::string("DELETE FROM ") + table + " WHERE model_key = ?");
    q.bind(1, model_key);
    q.run();
    n += s.conn.changes();
  }
  tx.commit();
  return n;
}

}  // namespace kiln::tuning_db
