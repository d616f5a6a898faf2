/** \file
 * The plain value types of the tuning database.
 *
 * Every type here is a plain struct of std::string, std::vector, std::optional
 * and numbers, so that the pybind11 binding is a list of def_readwrite calls.
 * Times are in seconds (double); timestamps are Unix seconds (UTC, double).
 */
#ifndef KILN_TUNING_DB_TYPES_H
#define KILN_TUNING_DB_TYPES_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::tuning_db {

/** Why a measured candidate has no valid run time (stored as text). */
enum class ErrorKind { none, build_error, run_error, timeout, wrong_result };

/** "none", "build_error", "run_error", "timeout" or "wrong_result". */
std::string to_string(ErrorKind kind);
/** Parses the text form; throws kiln::Error naming the allowed values. */
ErrorKind parse_error_kind(const std::string& text);

/**
 * A target string plus the facts that make two records comparable: the same
 * "llvm -mcpu=native" on another CPU, or from another kiln, is another target.
 */
struct TargetInfo {
  std::string target;                     ///< e.g. "llvm -mcpu=znver3 -num-cores=2"
  std::string cpu_model;                  ///< e.g. "AMD EPYC 7763 64-Core Processor"
  std::vector<std::string> cpu_features;  ///< e.g. {"avx2", "fma"}; stored sorted, unique
  std::string gpu_arch;                   ///< e.g. "sm_90"; empty for CPU targets
  std::string kiln_version;               ///< e.g. "0.1.0"
};

/** How a query's TargetInfo selects stored targets. */
enum class TargetMatch {
  exact,        ///< every field, kiln_version included
  hardware,     ///< target string, cpu model, features and gpu arch (any kiln version)
  string_only,  ///< only the target string
};

/** Which derived run time ranks records as "best" (lower is better). */
enum class Metric { median, min };

/** A distinct computation to tune: its structural hash and its compute DAG. */
struct Workload {
  std::string key;          ///< opaque; the compiler's 16-hex-digit structural hash
  std::string name;         ///< readable, e.g. "matmul_1024x1024x1024_float32"
  /** JSON text; stored in canonical (compact, sorted-key) form. Members named "name" are labels
   *  (tensor names), not identity: a DAG that differs from the stored one only there is the same
   *  workload, and the first one stored stays. */
  std::string compute_dag;
};

/** A workload with its record counts, as listed by Database::workloads(). */
struct WorkloadSummary {
  std::string key;
  std::string name;
  int64_t records = 0;
  int64_t errors = 0;
};

/** One tuning session; records point at it by uid so it survives export/import. */
struct TuningRun {
  std::string uid;                  ///< assigned by start_run() when empty
  double started_at = 0;            ///< 0 = now, at start_run()
  std::optional<double> ended_at;   ///< set by end_run()
  int64_t budget = 0;               ///< trials the run was allowed
  int64_t seed = 0;                 ///< random seed of the search
  std::string machine;              ///< host name or any description of the machine
};

/** Cost-model features of one record: a rows x cols float matrix, row-major. */
struct FeatureSet {
  std::string extractor;  ///< name and version of the extractor, e.g. "ansor-v1"
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> values;  ///< rows * cols finite values
};

/** One measured schedule of a workload on a target. */
struct Record {
  int64_t id = 0;             ///< assigned by the database (local to it); 0 before insert
  std::string uid;            ///< global identity, assigned when empty; import skips known uids
  std::string workload_key;   ///< must name a workload added with add_workload()
  TargetInfo target;
  std::string trace;          ///< schedule trace: JSON array of step objects (canonicalised)
  std::vector<double> run_times;       ///< every measured run time, seconds
  std::optional<double> min_time;      ///< derived from run_times on insert
  std::optional<double> median_time;   ///< derived from run_times on insert
  ErrorKind error_kind = ErrorKind::none;
  std::string error_msg;               ///< why the build/run failed; empty when none
  std::optional<double> build_time;    ///< seconds spent building the candidate
  std::string run_uid;                 ///< the TuningRun it came from; empty = none
  double timestamp = 0;                ///< Unix seconds; 0 = now, at insert
  std::optional<FeatureSet> features;  ///< side table; only loaded where asked for
};

/** Selects records for find(), training_records() and export. */
struct RecordFilter {
  std::optional<std::string> workload_key;
  std::optional<TargetInfo> target;
  TargetMatch match = TargetMatch::hardware;
  bool include_errors = true;                   ///< failed records teach a cost model too
  std::optional<std::string> feature_extractor; ///< only records with these features
  bool with_features = false;                   ///< load the feature side table
  int64_t limit = 0;                            ///< 0 = no limit
  /** Only records with a larger id: what was added since a record seen earlier (ids grow as records are added). */
  std::optional<int64_t> after_id;
};

/** What Database::claim() found for one trace. */
enum class ClaimStatus {
  claimed,   ///< the caller holds the claim now (new, renewed, or taken over from an expired one)
  measured,  ///< a record of the trace exists on the same hardware: do not measure it
  held,      ///< another owner's live claim: that session is measuring it
};

/** "claimed", "measured" or "held". */
std::string to_string(ClaimStatus status);

/**
 * A tuning session's claim on a trace it is about to measure, so that
 * concurrent sessions on the same workload and hardware pass it over. It
 * lapses at `expires_at` unless renewed (a crashed session's claims are taken
 * over then), and goes when its record is stored and the owner releases it.
 */
struct Claim {
  std::string workload_key;
  TargetInfo target;   ///< the hardware facts; kiln_version is not part of a claim (empty)
  std::string trace;   ///< canonical JSON
  std::string owner;   ///< the claiming session (a tuning run's uid)
  double expires_at = 0;  ///< Unix seconds
};

/**
 * The graph-level plan a search found fastest for one model on one
 * hardware (tuner/graph_search.h): the plan's text (JSON, the graph
 * compiler reads it), a checksum of that text written with it and checked
 * before use, and the model's times under it and under the plan compiling
 * without it would take.
 */
struct GraphPlan {
  std::string model_key;
  TargetInfo target;                   ///< the hardware facts (kiln_version not part of it)
  std::string plan;                    ///< JSON text
  std::string checksum;                ///< of `plan` (graph_plan_checksum); set by put_graph_plan
  std::optional<double> time;          ///< seconds, the model under the plan
  std::optional<double> baseline_time; ///< seconds, the model under the plan it replaced
  double updated_at = 0;               ///< Unix seconds; 0 = now, at put_graph_plan
};

/** The checksum put_graph_plan stores with a plan's text ("fnv1a64:<16 hex digits>"). */
std::string graph_plan_checksum(const std::string& text);

/** One candidate plan a graph search measured, against the plan it tried to beat. */
struct GraphCandidate {
  std::string model_key;
  TargetInfo target;
  std::string plan;                    ///< JSON text of the candidate
  std::string against;                 ///< JSON text of the plan it was timed against
  std::optional<double> ratio;         ///< candidate / against, median of interleaved rounds; none on error
  std::optional<double> time;          ///< seconds, the candidate's median
  std::string error_msg;               ///< why it could not be compiled or run (empty when measured)
  double created_at = 0;               ///< 0 = now, at add_graph_candidate
};

/** Record counts and the best run time of one workload on one target. */
struct WorkloadTargetStats {
  std::string workload_key;
  std::string workload_name;
  TargetInfo target;
  int64_t records = 0;
  int64_t errors = 0;
  std::optional<double> best_median;
  std::optional<double> best_min;
};

/** Totals of a database and the best result per workload and target. */
struct Stats {
  int64_t workloads = 0;
  int64_t targets = 0;
  int64_t tuning_runs = 0;
  int64_t records = 0;
  int64_t errors = 0;
  std::map<std::string, int64_t> errors_by_kind;  ///< error kind text -> count (errors only)
  std::vector<WorkloadTargetStats> per_workload;  ///< ordered by workload key, target
};

/**
 * What prune() deletes: a record goes when any enabled rule selects it.
 * Workloads, targets and runs stay (they are small and records may return).
 */
struct PruneOptions {
  std::optional<int64_t> keep_best;  ///< keep the k best valid records per workload and target
  Metric metric = Metric::median;    ///< ranking used by keep_best
  bool drop_errors = false;          ///< delete every failed record
  std::optional<double> older_than;  ///< delete records with timestamp < this (Unix seconds)
  bool vacuum = false;               ///< give the freed pages back to the file system
};

/** Outcome of an import. */
struct ImportResult {
  int64_t added = 0;    ///< records inserted
  int64_t skipped = 0;  ///< records whose uid was already present
};

/** How Database::open treats the file. */
struct OpenOptions {
  bool read_only = false;          ///< never write; fails on a database that needs migrating
  bool create_if_missing = true;   ///< create a new database at a missing or empty path
  int busy_timeout_ms = 60000;     ///< how long to wait for another writer's lock
  int cache_size_mib = 16;         ///< SQLite page cache of this connection
};

}  // namespace kiln::tuning_db

#endif  // KILN_TUNING_DB_TYPES_H
