// Claims: how concurrent tuning sessions on one workload share out the
// traces they measure. Before measuring a batch a session claims its traces
// in one write transaction; a trace already recorded, or claimed by another
// session whose claim has not expired, is passed over. Claims expire unless
// renewed, so a crashed session's traces are taken over later, not lost.
#include <algorithm>
#include <cmath>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln/tuning_db/detail.h"
#include "kiln/tuning_db/jsonl.h"

namespace kiln::tuning_db {

using detail::Stmt;
using detail::Transaction;

std::string to_string(ClaimStatus status) {
  switch (status) {
    case ClaimStatus::claimed: return "claimed";
    case ClaimStatus::measured: return "measured";
    case ClaimStatus::held: return "held";
  }
  KILN_UNREACHABLE() << "unknown ClaimStatus " << static_cast<int>(status);
  return {};
}

namespace {

/** Claims are written, and need the v3 table: a read-only handle (maybe of an older file) cannot. */
void require_claims(const detail::DatabaseState& s, const char* call) {
  KILN_USER_CHECK(!s.options.read_only && s.schema_version >= 3)
      << call << ": tuning database '" << s.path << "' is open read-only; claims are written, "
      << "so open it writable (a tuning session does)";
}

void check_ttl(double ttl_s, const char* call) {
  KILN_USER_CHECK(std::isfinite(ttl_s) && ttl_s > 0)
      << call << ": the claim lifetime is " << ttl_s << " s; pass a positive number of seconds";
}

/** Whether the workload (id, or 0 when unknown) has a record of the (canonical) trace on one of the targets. */
bool recorded(detail::Connection& conn, int64_t workload_id, const std::vector<int64_t>& targets,
              const std::string& trace) {
  if (workload_id == 0 || targets.empty()) return false;
  // records_by_trace narrows the search to the workload's records with this
  // hash (one, bar a collision); the target and the text decide.
  Stmt q = conn.query(
      "SELECT target_id FROM records INDEXED BY records_by_trace "
      "WHERE workload_id = ? AND trace_hash = ? AND trace = ?");
  q.bind(1, workload_id).bind(2, detail::trace_hash(trace)).bind(3, trace);
  while (q.step())
    if (std::find(targets.begin(), targets.end(), q.col_int(0)) != targets.end()) return true;
  return false;
}

}  // namespace

std::vector<ClaimStatus> Database::claim(const std::string& workload_key, const TargetInfo& target,
                                         const std::vector<std::string>& traces,
                                         const std::string& owner, double ttl_s) {
  KILN_USER_CHECK(!workload_key.empty() && !target.target.empty() && !owner.empty())
      << "claim(): the workload key, target string and owner must not be empty";
  check_ttl(ttl_s, "claim()");
  // Canonical JSON before taking the lock: equal traces must be equal text.
  std::vector<std::string> canonical;
  canonical.reserve(traces.size());
  for (const std::string& t : traces)
    canonical.push_back(canonical_json(t, "a trace claimed for workload " + workload_key));
  const std::string features = detail::join_features(target.cpu_features);

  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  require_claims(s, "claim()");
  Transaction tx(s.conn);
  const double now = detail::now_seconds();
  // Expired claims go first; what remains of another owner is live.
  {
    Stmt q = s.conn.query("DELETE FROM claims WHERE expires_at <= ?");
    q.bind(1, now);
    q.run();
  }
  int64_t workload_id = 0;
  {
    Stmt w = s.conn.query("SELECT id FROM workloads WHERE workload_key = ?");
    w.bind(1, workload_key);
    if (w.step()) workload_id = w.col_int(0);
  }
  std::vector<int64_t> targets;
  if (workload_id != 0) {
    Stmt q = s.conn.query("SELECT id FROM targets t WHERE " + detail::target_condition(TargetMatch::hardware));
    detail::bind_target(q, 1, target, TargetMatch::hardware);
    while (q.step()) targets.push_back(q.col_int(0));
  }
  std::vector<ClaimStatus> out;
  out.reserve(canonical.size());
  for (const std::string& trace : canonical) {
    if (recorded(s.conn, workload_id, targets, trace)) {
      out.push_back(ClaimStatus::measured);
      continue;
    }
    // A new claim, or the owner's own renewed; another owner's live claim stays.
    Stmt q = s.conn.query(
        "INSERT INTO claims(workload_key, target, cpu_model, cpu_features, gpu_arch, trace, owner, "
        "expires_at) VALUES(?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(workload_key, target, cpu_model, cpu_features, gpu_arch, trace) "
        "DO UPDATE SET expires_at = excluded.expires_at WHERE claims.owner = excluded.owner");
    q.bind(1, workload_key).bind(2, target.target).bind(3, target.cpu_model).bind(4, features);
    q.bind(5, target.gpu_arch).bind(6, trace).bind(7, owner).bind(8, now + ttl_s);
    q.run();
    out.push_back(s.conn.changes() == 1 ? ClaimStatus::claimed : ClaimStatus::held);
  }
  tx.commit();
  return out;
}

int64_t Database::renew_claims(const std::string& owner, double ttl_s) {
  check_ttl(ttl_s, "renew_claims()");
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  require_claims(s, "renew_claims()");
  Stmt q = s.conn.query("UPDATE claims SET expires_at = ? WHERE owner = ?");
  q.bind(1, detail::now_seconds() + ttl_s).bind(2, owner);
  q.run();
  return s.conn.changes();
}

int64_t Database::release_claims(const std::string& owner) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  require_claims(s, "release_claims()");
  Stmt q = s.conn.query("DELETE FROM claims WHERE owner = ?");
  q.bind(1, owner);
  q.run();
  return s.conn.changes();
}

std::vector<Claim> Database::claims() const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<Claim> out;
  if (s.schema_version < 3) return out;  // a read-only open of an older file: no table, no claims
  Stmt q = s.conn.query(
      "SELECT workload_key, target, cpu_model, cpu_features, gpu_arch, trace, owner, expires_at "
      "FROM claims ORDER BY expires_at, rowid");
  while (q.step()) {
    Claim c;
    c.workload_key = q.col_text(0);
    c.target.target = q.col_text(1);
    c.target.cpu_model = q.col_text(2);
    c.target.cpu_features = detail::split_features(q.col_text(3));
    c.target.gpu_arch = q.col_text(4);
    c.trace = q.col_text(5);
    c.owner = q.col_text(6);
    c.expires_at = q.col_double(7);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace kiln::tuning_db
