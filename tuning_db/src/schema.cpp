// The versioned schema: migrations, and the checks that keep foreign, newer
// and damaged files untouched.
//
// Identity lives in the SQLite header: application_id = "KILN" marks a kiln
// tuning database and user_version is its schema version. Both are read from
// the raw bytes before SQLite opens the file, so a file we refuse is never
// even opened for writing.
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kiln/support/error.h"
#include "kiln/tuning_db/detail.h"

namespace kiln::tuning_db::detail {

namespace {

/**
 * Migration i (0-based) takes a database from schema version i to i + 1.
 * `readers_need` says whether reading records needs what it adds: a
 * read-only open of a file that lacks only migrations readers do not need
 * works (and changes nothing); one that lacks any other is refused.
 */
struct Migration {
  bool readers_need;
  std::vector<const char*> statements;
};

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> list = {
      // v1: workloads, targets, tuning runs, records.
      {true, {
          R"(CREATE TABLE workloads(
               id INTEGER PRIMARY KEY,
               workload_key TEXT NOT NULL UNIQUE,
               name TEXT NOT NULL DEFAULT '',
               compute_dag TEXT NOT NULL,
               created_at REAL NOT NULL))",
          R"(CREATE TABLE targets(
               id INTEGER PRIMARY KEY,
               target TEXT NOT NULL,
               cpu_model TEXT NOT NULL DEFAULT '',
               cpu_features TEXT NOT NULL DEFAULT '',
               gpu_arch TEXT NOT NULL DEFAULT '',
               kiln_version TEXT NOT NULL DEFAULT '',
               UNIQUE(target, cpu_model, cpu_features, gpu_arch, kiln_version)))",
          R"(CREATE TABLE tuning_runs(
               id INTEGER PRIMARY KEY,
               uid TEXT NOT NULL UNIQUE,
               started_at REAL NOT NULL,
               ended_at REAL,
               budget INTEGER NOT NULL DEFAULT 0,
               seed INTEGER NOT NULL DEFAULT 0,
               machine TEXT NOT NULL DEFAULT ''))",
          R"(CREATE TABLE records(
               id INTEGER PRIMARY KEY,
               uid TEXT NOT NULL UNIQUE,
               workload_id INTEGER NOT NULL REFERENCES workloads(id) ON DELETE CASCADE,
               target_id INTEGER NOT NULL REFERENCES targets(id),
               run_id INTEGER REFERENCES tuning_runs(id) ON DELETE SET NULL,
               trace TEXT NOT NULL,
               run_times TEXT NOT NULL,
               min_time REAL,
               median_time REAL,
               error_kind TEXT NOT NULL CHECK(error_kind IN
                 ('none', 'build_error', 'run_error', 'timeout', 'wrong_result')),
               error_msg TEXT NOT NULL DEFAULT '',
               build_time REAL,
               created_at REAL NOT NULL))",
          // Serves best-k (equality on the first three, ordered by median) and
          // "all records of a workload" (prefix), and the cascade from workloads.
          "CREATE INDEX records_by_median ON records(workload_id, target_id, error_kind, "
          "median_time)",
          "CREATE INDEX records_by_run ON records(run_id)",
      }},
      // v2: cost-model features in a side table; best-k by min time.
      {true, {
          R"(CREATE TABLE record_features(
               record_id INTEGER PRIMARY KEY REFERENCES records(id) ON DELETE CASCADE,
               extractor TEXT NOT NULL,
               num_rows INTEGER NOT NULL,
               num_cols INTEGER NOT NULL,
               data BLOB NOT NULL))",
          "CREATE INDEX record_features_by_extractor ON record_features(extractor)",
          "CREATE INDEX records_by_min ON records(workload_id, target_id, error_kind, min_time)",
      }},
      // v3: claims of concurrent tuning sessions on the traces they are
      // measuring (Database::claim). Keyed like a record's identity on the
      // same hardware: workload, target facts but the kiln version, and the
      // canonical trace. No foreign keys: a claim is transient, and one that
      // outlives its workload just expires. A hash of each record's trace,
      // indexed per workload, lets a claim find a trace's records without
      // reading every record of the workload (0.7 s for 32 traces among
      // 12,000 records without it). Readers need neither.
      {false, {
          "ALTER TABLE records ADD COLUMN trace_hash INTEGER",
          "UPDATE records SET trace_hash = kiln_trace_hash(trace)",
          "CREATE INDEX records_by_trace ON records(workload_id, trace_hash)",
          R"(CREATE TABLE claims(
               workload_key TEXT NOT NULL,
               target TEXT NOT NULL,
               cpu_model TEXT NOT NULL,
               cpu_features TEXT NOT NULL,
               gpu_arch TEXT NOT NULL,
               trace TEXT NOT NULL,
               owner TEXT NOT NULL,
               expires_at REAL NOT NULL,
               PRIMARY KEY(workload_key, target, cpu_model, cpu_features, gpu_arch, trace)))",
          "CREATE INDEX claims_by_owner ON claims(owner)",
      }},
      // v4: graph-level tuning (tuner/graph_search.h): per model (its
      // model key) and hardware, the plan of graph choices a search found
      // fastest, with a checksum of its text, and every candidate plan the
      // search measured, so that a resumed search measures none twice.
      // compile(db=) reads the plan when present; reading records needs
      // neither.
      {false, {
          R"(CREATE TABLE graph_plans(
               model_key TEXT NOT NULL,
               target TEXT NOT NULL,
               cpu_model TEXT NOT NULL,
               cpu_features TEXT NOT NULL,
               gpu_arch TEXT NOT NULL,
               plan TEXT NOT NULL,
               checksum TEXT NOT NULL,
               time REAL,
               baseline_time REAL,
               updated_at REAL NOT NULL,
               PRIMARY KEY(model_key, target, cpu_model, cpu_features, gpu_arch)))",
          R"(CREATE TABLE graph_candidates(
               id INTEGER PRIMARY KEY,
               model_key TEXT NOT NULL,
               target TEXT NOT NULL,
               cpu_model TEXT NOT NULL,
               cpu_features TEXT NOT NULL,
               gpu_arch TEXT NOT NULL,
               plan TEXT NOT NULL,
               against TEXT NOT NULL,
               ratio REAL,
               time REAL,
               error_msg TEXT NOT NULL DEFAULT '',
               created_at REAL NOT NULL,
               UNIQUE(model_key, target, cpu_model, cpu_features, gpu_arch, plan, against)))",
      }},
  };
  return list;
}

uint32_t be32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  KILN_USER_CHECK(S_ISREG(st.st_mode))
      << "tuning database '" << path << "' is not a regular file; pass the path of a "
      << "database file (or a new path to create one)";
  return st.st_size;
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw Error("tuning database '" + path + "': " + why + ". The file was not modified.");
}

/** Checks the raw header: SQLite magic, application id, version, size. */
void check_header(const std::string& path, const std::array<unsigned char, 100>& h,
                  int64_t size) {
  static const char kMagic[] = "SQLite format 3";  // 16 bytes with the NUL
  if (size < 100 || !std::equal(kMagic, kMagic + 16, h.begin()))
    refuse(path, "is not a kiln tuning database (not an SQLite file); pass the path of a "
                 "tuning database, or a new path to create one");
  uint32_t app_id = be32(&h[68]);
  uint32_t version = be32(&h[60]);
  if (app_id != 0 && app_id != static_cast<uint32_t>(kApplicationId)) {
    std::ostringstream os;
    os << "is an SQLite database of another application (application_id 0x" << std::hex
       << app_id << "), not a kiln tuning database; pass another path";
    refuse(path, os.str());
  }
  if (app_id != 0 && version > static_cast<uint32_t>(latest_schema_version()))
    refuse(path, "has schema version " + std::to_string(version) + ", newer than this kiln (" +
                     std::to_string(latest_schema_version()) +
                     "); open it with the kiln that wrote it, or upgrade kiln");
  uint32_t page_size = (uint32_t(h[16]) << 8) | h[17];
  if (page_size == 1) page_size = 65536;
  if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0)
    refuse(path, "is corrupt (invalid page size in the header); restore it from a backup");
  // The header's page count is trusted only when its "valid-for" counter matches.
  bool count_valid = be32(&h[92]) == be32(&h[24]);
  int64_t expected = int64_t(be32(&h[28])) * page_size;
  // With a non-empty -wal file the main file may be mid-checkpoint; SQLite repairs that.
  bool wal_pending = file_size(path + "-wal") > 0;
  if (!wal_pending && (size % page_size != 0 || (count_valid && size < expected)))
    refuse(path, "is truncated or corrupt: the header promises " + std::to_string(expected) +
                     " bytes but the file has " + std::to_string(size) +
                     "; restore it from a backup");
}

void apply_migration(Connection& conn, int to_version) {
  for (const char* sql : migrations().at(to_version - 1).statements) conn.exec(sql);
  // PRAGMA takes no bound parameters; the value is our own integer.
  conn.exec("PRAGMA user_version = " + std::to_string(to_version));
}

/** Tables every version has; their absence means a damaged or foreign file. */
void check_tables(Connection& conn, int version) {
  std::vector<std::string> tables = {"workloads", "targets", "tuning_runs", "records"};
  if (version >= 2) tables.push_back("record_features");
  if (version >= 3) tables.push_back("claims");
  if (version >= 4) {
    tables.push_back("graph_plans");
    tables.push_back("graph_candidates");
  }
  for (const auto& table : tables) {
    Stmt stmt = conn.query("SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = ?");
    stmt.bind(1, table);
    stmt.step();
    if (stmt.col_int(0) == 0)
      refuse(conn.path(), "is marked as a kiln tuning database but lacks the table '" + table +
                              "'; it is damaged: restore it from a backup");
  }
}

struct FileIdentity {
  int64_t app_id;
  int64_t version;
  int64_t objects;
};

FileIdentity identify(Connection& conn) {
  return {conn.scalar("PRAGMA application_id"), conn.scalar("PRAGMA user_version"),
          conn.scalar("SELECT COUNT(*) FROM sqlite_schema")};
}

/** Refuses what cannot be used; returns true when the file needs init or migration. */
bool validate(Connection& conn, const FileIdentity& id) {
  if (id.app_id == 0 && id.objects == 0) return true;  // an empty SQLite file: initialise
  if (id.app_id != kApplicationId)
    refuse(conn.path(), "is an SQLite database of another application, not a kiln tuning "
                        "database; pass another path");
  if (id.version > latest_schema_version())
    refuse(conn.path(), "has schema version " + std::to_string(id.version) +
                            ", newer than this kiln (" + std::to_string(latest_schema_version()) +
                            "); upgrade kiln");
  if (id.version < 1)
    refuse(conn.path(), "is marked as a kiln tuning database but has no schema version; it is "
                        "damaged: restore it from a backup");
  check_tables(conn, static_cast<int>(id.version));
  return id.version < latest_schema_version();
}

/** Whether a migration past `version` adds something that reading records needs. */
bool readers_need_migration(int version) {
  for (int v = version + 1; v <= latest_schema_version(); ++v)
    if (migrations().at(v - 1).readers_need) return true;
  return false;
}

}  // namespace

int latest_schema_version() { return static_cast<int>(migrations().size()); }

bool precheck_file(const std::string& path) {
  int64_t size = file_size(path);
  if (size <= 0) return false;
  std::array<unsigned char, 100> header{};
  std::ifstream in(path, std::ios::binary);
  KILN_USER_CHECK(in.good()) << "tuning database '" << path
                             << "' cannot be read; check its permissions";
  in.read(reinterpret_cast<char*>(header.data()), header.size());
  check_header(path, header, size);
  return true;
}

int prepare_schema(Connection& conn, bool read_only) {
  // First look with a read transaction only: reading never changes the file.
  FileIdentity id{};
  bool needs_work = false;
  {
    Transaction read(conn, /*write=*/false);
    id = identify(conn);
    needs_work = validate(conn, id);
    read.commit();
  }
  if (!needs_work) return static_cast<int>(id.version);
  // Reading needs none of the missing migrations: read the file as it is.
  if (read_only && id.version >= 1 && !readers_need_migration(static_cast<int>(id.version)))
    return static_cast<int>(id.version);
  KILN_USER_CHECK(!read_only)
      << "tuning database '" << conn.path() << "' has schema version " << id.version
      << " and this kiln needs " << latest_schema_version()
      << "; open it once without read_only to migrate it";
  // Re-check under the write lock: another process may have migrated meanwhile.
  Transaction write(conn);
  id = identify(conn);
  validate(conn, id);
  if (id.app_id == 0) conn.exec("PRAGMA application_id = " + std::to_string(kApplicationId));
  for (int v = static_cast<int>(id.version) + 1; v <= latest_schema_version(); ++v)
    apply_migration(conn, v);
  write.commit();
  return latest_schema_version();
}

void create_schema_at(Connection& conn, int version) {
  KILN_CHECK(version >= 1 && version <= latest_schema_version()) << "version " << version;
  Transaction write(conn);
  conn.exec("PRAGMA application_id = " + std::to_string(kApplicationId));
  for (int v = 1; v <= version; ++v) apply_migration(conn, v);
  write.commit();
}

}  // namespace kiln::tuning_db::detail
