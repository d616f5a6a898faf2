/** \file
 * kiln::tuning_db::Database: the SQLite file of tuning records.
 *
 * One Database object is one connection. Several processes may open the same
 * file and write at once (WAL mode; writers queue on a busy timeout). Each
 * write call is one transaction, so a process killed mid-call loses only that
 * call's work. Opening never modifies a file that is not a kiln database, is
 * from a newer kiln, or is damaged: it throws kiln::Error instead.
 * Methods are safe to call from several threads (an internal mutex serialises
 * them); every error is a kiln::Error.
 */
#ifndef KILN_TUNING_DB_DATABASE_H
#define KILN_TUNING_DB_DATABASE_H

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tuning_db/types.h"

namespace kiln::tuning_db {

namespace detail {
struct DatabaseState;
}

class Database {
 public:
  /** Opens (and, unless options say otherwise, creates or migrates) the file at `path`. */
  static Database open(const std::string& path, const OpenOptions& options = {});
  /** The schema version this build writes; files with a higher one are refused. */
  static int latest_schema_version();

  Database(Database&&) noexcept;
  Database& operator=(Database&&) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  ~Database();

  const std::string& path() const;
  int schema_version() const;

  // ---- workloads ----
  /** Adds a workload; adding the same key again is a no-op unless the DAG differs beyond its names (error). */
  void add_workload(const Workload& workload);
  std::optional<Workload> workload(const std::string& key) const;
  /** Every workload with its record counts, ordered by key. */
  std::vector<WorkloadSummary> workloads() const;

  // ---- tuning runs ----
  /** Registers a run; returns its uid (the given one, or a fresh one when empty). */
  std::string start_run(const TuningRun& run);
  /** Sets the end time of a run (now when not given). */
  void end_run(const std::string& uid, std::optional<double> ended_at = std::nullopt);
  std::optional<TuningRun> run(const std::string& uid) const;
  std::vector<TuningRun> runs() const;

  // ---- records ----
  /**
   * Adds a batch in one transaction: all records are stored or none. Returns
   * their ids in order. Validates every record first (workload known, trace is
   * a JSON array, run times finite, error kind consistent).
   */
  std::vector<int64_t> add_records(const std::vector<Record>& batch);
  /** The k valid records of a workload on a target with the lowest metric, best first. */
  std::vector<Record> best(const std::string& workload_key, const TargetInfo& target,
                           int64_t k = 1, TargetMatch match = TargetMatch::hardware,
                           Metric metric = Metric::median) const;
  /** The targets a workload has valid records on (each stored target once, in the order stored). */
  std::vector<TargetInfo> targets_of(const std::string& workload_key) const;
  /** Every record of a workload (all targets, errors included), oldest first. */
  std::vector<Record> records(const std::string& workload_key, bool with_features = false) const;
  std::optional<Record> record(int64_t id, bool with_features = false) const;
  /** Records selected by a filter, oldest first. */
  std::vector<Record> find(const RecordFilter& filter) const;
  /** Records for cost-model training: find() with features loaded. */
  std::vector<Record> training_records(RecordFilter filter) const;
  /** Attaches (or replaces) the features of a stored record. */
  void set_features(int64_t record_id, const FeatureSet& features);
  /** The same for many records in one transaction: all are replaced, or none (an unknown id or a bad set throws). */
  void set_features(const std::vector<std::pair<int64_t, FeatureSet>>& batch);

  // ---- claims: concurrent tuning sessions share out the traces they measure ----
  /**
   * In one write transaction, for each trace (JSON, canonicalised here) of
   * the workload on the target's hardware (kiln version aside): `measured`
   * when a record of it exists (errors too); else `held` when another owner
   * has a claim on it that has not expired; else `claimed`, now held by
   * `owner` until `ttl_s` seconds from now (an expired claim is taken over,
   * the owner's own is renewed). Needs a writable database.
   */
  std::vector<ClaimStatus> claim(const std::string& workload_key, const TargetInfo& target,
                                 const std::vector<std::string>& traces, const std::string& owner,
                                 double ttl_s);
  /** Extends every claim of `owner` to `ttl_s` seconds from now (a heartbeat); returns how many it has. */
  int64_t renew_claims(const std::string& owner, double ttl_s);
  /** Drops every claim of `owner` (its records are stored, or it ends); returns how many. */
  int64_t release_claims(const std::string& owner);
  /** Every stored claim, expired ones too until a claim() clears them, soonest expiry first (none on a read-only older file). */
  std::vector<Claim> claims() const;

  // ---- graph-level plans (tuner/graph_search.h) ----
  /** Stores (replaces) the model's plan on the target's hardware, with the checksum of its text. Needs a writable database. */
  void put_graph_plan(const GraphPlan& plan);
  /** The model's plan on this hardware (target string, CPU, features, GPU arch), or none (also on a read-only older file). */
  std::optional<GraphPlan> graph_plan(const std::string& model_key, const TargetInfo& target) const;
  /** Records a measured candidate; measuring the same (plan, against) again replaces it. */
  void add_graph_candidate(const GraphCandidate& candidate);
  /** Every candidate measured for the model on this hardware, oldest first. */
  std::vector<GraphCandidate> graph_candidates(const std::string& model_key, const TargetInfo& target) const;
  /** Deletes the model's plan and candidates on every target; returns how many rows went. */
  int64_t delete_graph_plans(const std::string& model_key);

  // ---- statistics and maintenance ----
  Stats stats() const;
  /** Deletes records by id; returns how many existed. */
  int64_t delete_records(const std::vector<int64_t>& ids);
  /** Deletes a workload and all its records; returns the number of records deleted. */
  int64_t delete_workload(const std::string& key);
  /** Deletes the records selected by the options; returns how many. */
  int64_t prune(const PruneOptions& options);
  /** Runs SQLite's integrity check; returns the problems found (empty when sound). */
  std::vector<std::string> check_integrity() const;

  // ---- JSON Lines exchange (one self-contained record per line) ----
  /** Writes the selected records, features always included; returns the count. */
  int64_t write_jsonl(std::ostream& out, const RecordFilter& filter = {}) const;
  /** Writes to a file atomically (a temporary file renamed into place). */
  int64_t export_jsonl(const std::string& file, const RecordFilter& filter = {}) const;
  /** Reads records in one transaction; a bad line aborts all with its line number. */
  ImportResult read_jsonl(std::istream& in);
  ImportResult import_jsonl(const std::string& file);

 private:
  explicit Database(std::unique_ptr<detail::DatabaseState> state);
  detail::DatabaseState& state() const;
  std::unique_ptr<detail::DatabaseState> state_;
};

}  // namespace kiln::tuning_db

#endif  // KILN_TUNING_DB_DATABASE_H
