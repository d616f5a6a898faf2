/** \file
 * Internals of the tuning database shared by its source files. Not part of
 * the API: a thin RAII layer over SQLite (connections, cached prepared
 * statements, transactions) that turns every SQLite failure into a
 * kiln::Error with a hint. sqlite3.h stays out of the public headers.
 */
#ifndef KILN_TUNING_DB_DETAIL_H
#define KILN_TUNING_DB_DETAIL_H

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/support/error.h"
#include "kiln/tuning_db/types.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kiln::tuning_db::detail {

/**
 * The user error for a failed SQLite call, with its result code: callers that
 * retry (a lock held by another process) test the code, not the message.
 */
class SqliteError : public Error {
 public:
  SqliteError(const std::string& msg, int code) : Error(msg), code_(code) {}
  /** SQLite's result code (possibly extended: `code() & 0xff` is the primary one). */
  int code() const { return code_; }
  /** SQLITE_BUSY or SQLITE_LOCKED: another connection held a lock. */
  bool busy() const;

 private:
  int code_;
};

/** Throws SqliteError for SQLite result code `rc`, naming the file and what failed. */
[[noreturn]] void throw_sqlite(int rc, sqlite3* db, const std::string& path,
                               const std::string& what);

/**
 * A cached prepared statement in use. Binding indexes start at 1. The
 * statement is reset and its bindings cleared when the Stmt goes away, so the
 * cache can hand it out again.
 */
class Stmt {
 public:
  Stmt(sqlite3_stmt* stmt, sqlite3* db, const std::string* path);
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt();

  Stmt& bind(int index, int64_t value);
  Stmt& bind(int index, double value);
  Stmt& bind(int index, const std::string& value);
  Stmt& bind(int index, const std::optional<double>& value);
  Stmt& bind_null(int index);
  Stmt& bind_blob(int index, const void* data, size_t size);

  /** Advances; true while a row is available. */
  bool step();
  /** Runs a statement that returns no rows. */
  void run();

  bool is_null(int col) const;
  int64_t col_int(int col) const;
  double col_double(int col) const;
  std::optional<double> col_opt_double(int col) const;
  std::string col_text(int col) const;
  std::vector<unsigned char> col_blob(int col) const;

 private:
  sqlite3_stmt* stmt_;
  sqlite3* db_;
  const std::string* path_;
};

/** One SQLite connection with a cache of prepared statements keyed by SQL text. */
class Connection {
 public:
  Connection(const std::string& path, bool read_only, bool create, int busy_timeout_ms);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  /** Prepares (once) and returns the statement for fixed SQL text; bind values, never splice. */
  Stmt query(const std::string& sql);
  /** Runs fixed SQL without parameters (DDL, PRAGMA, BEGIN/COMMIT). */
  void exec(const std::string& sql);
  /** A single integer from fixed SQL (PRAGMA user_version, COUNT(*)). */
  int64_t scalar(const std::string& sql);
  int64_t last_insert_id() const;
  int64_t changes() const;
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
  std::map<std::string, sqlite3_stmt*> cache_;
};

/** BEGIN IMMEDIATE (or deferred for reads) ... COMMIT; rolls back unless committed. */
class Transaction {
 public:
  explicit Transaction(Connection& conn, bool write = true);
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();
  void commit();

 private:
  Connection& conn_;
  bool open_ = true;
};

/** The state behind a Database handle. */
struct DatabaseState {
  DatabaseState(const std::string& path, const OpenOptions& options);
  std::string path;
  OpenOptions options;
  Connection conn;
  int schema_version = 0;
  mutable std::mutex mutex;
};

// ---- schema.cpp ----
/** The application_id stamped into every kiln tuning database ("KILN"). */
inline constexpr int32_t kApplicationId = 0x4B494C4E;
int latest_schema_version();
/**
 * Checks the file at `path` without letting SQLite touch it: magic bytes,
 * application id, schema version, and a size that matches the header.
 * Returns false when the file is missing or empty (a new database).
 */
bool precheck_file(const std::string& path);
/** Validates, creates or migrates the schema; returns the version in the file. */
int prepare_schema(Connection& conn, bool read_only);
/** Testing only: creates a database at an older schema version. */
void create_schema_at(Connection& conn, int version);

// ---- records.cpp (reading rows, shared by queries and export) ----
/** The SELECT list and joins that read_record() understands. */
extern const char* const kRecordSelect;
Record read_record(const Stmt& stmt);
/** Loads the features of the records in place (one query per record). */
void load_features(Connection& conn, std::vector<Record>& records);
/** Little-endian float32 bytes, the storage form of FeatureSet::values. */
std::vector<unsigned char> encode_floats(const std::vector<float>& values);
/** The WHERE fragment and values for a target under a match mode. */
std::string target_condition(TargetMatch match);
int bind_target(Stmt& stmt, int index, const TargetInfo& target, TargetMatch match);
std::string join_features(std::vector<std::string> features);
std::vector<std::string> split_features(const std::string& text);
/** SELECT text for a filter (kRecordSelect + WHERE + ORDER BY id), and its bindings. */
std::string filter_sql(const RecordFilter& filter);
void bind_filter(Stmt& stmt, const RecordFilter& filter);

// ---- insert.cpp (writing, shared by add_records and import) ----
/** Validates a record and fills the derived fields (canonical trace, min/median, uid, time). */
Record normalise_record(const Record& record);
/** Adds a workload, or checks that the stored one has the same compute DAG. */
void upsert_workload(Connection& conn, const Workload& workload);
/** Adds a tuning run unless its uid is known; returns the uid. */
std::string upsert_run(Connection& conn, const TuningRun& run);
/** Per-transaction caches of row ids, so a batch looks each key up once. */
struct InsertCache {
  std::map<std::string, int64_t> workloads, targets, runs;
};
/**
 * Inserts a normalised record inside an open transaction; returns its id, or
 * nothing when `skip_known_uid` and the uid is already present.
 */
std::optional<int64_t> insert_record(Connection& conn, InsertCache& cache, const Record& record,
                                     bool skip_known_uid);
void store_features(Connection& conn, int64_t record_id, const FeatureSet& features);
void validate_features(const FeatureSet& features);

double now_seconds();
std::string new_uid();
/**
 * A 64-bit hash (FNV-1a) of a canonical trace, the records.trace_hash column:
 * it narrows a lookup by trace to a few rows; the text is still compared.
 * SQL sees it as kiln_trace_hash(text) on every connection.
 */
int64_t trace_hash(const std::string& canonical_trace);

}  // namespace kiln::tuning_db::detail

#endif  // KILN_TUNING_DB_DETAIL_H
