// The RAII layer over SQLite: every failure becomes a kiln::Error with a hint.
#include <sqlite3.h>

#include <limits>

#include "kiln/support/error.h"
#include "kiln/tuning_db/detail.h"

namespace kiln::tuning_db::detail {

namespace {

/** What the user can do about a failure, by primary result code. */
const char* hint_for(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return "another process held the database lock longer than the busy timeout; "
             "retry, or raise OpenOptions::busy_timeout_ms";
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return "the file is damaged; restore it from a backup, or salvage it with "
             "`sqlite3 FILE .recover` and import the result";
    case SQLITE_READONLY:
      return "the database is read-only (opened read-only, or the file or its directory "
             "is not writable); open it writable to change it";
    case SQLITE_FULL:
      return "the disk is full; free space and retry";
    case SQLITE_CANTOPEN:
      return "check that the directory exists and that the file and directory are "
             "readable (and writable, for writing)";
    case SQLITE_IOERR:
      return "an I/O error occurred; check the disk and the file system";
    case SQLITE_CONSTRAINT:
      return "the data breaks a rule of the schema (a duplicate uid, or an unknown "
             "workload, target or run)";
    default:
      return "";
  }
}

/** kiln_trace_hash(text): trace_hash() in SQL, with which a migration fills in existing records. */
void sql_trace_hash(sqlite3_context* ctx, int, sqlite3_value** argv) {
  const unsigned char* text = sqlite3_value_text(argv[0]);
  if (!text) {
    sqlite3_result_null(ctx);
    return;
  }
  std::string s(reinterpret_cast<const char*>(text), static_cast<size_t>(sqlite3_value_bytes(argv[0])));
  sqlite3_result_int64(ctx, trace_hash(s));
}

}  // namespace

void throw_sqlite(int rc, sqlite3* db, const std::string& path, const std::string& what) {
  std::string detail = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string hint = hint_for(rc);
  if (auto at = hint.find("FILE"); at != std::string::npos) hint.replace(at, 4, path);
  // Thrown directly (not through the streaming macro) so [[noreturn]] holds.
  throw SqliteError("tuning database '" + path + "': " + what + " failed: " + detail + (hint.empty() ? "" : "; " + hint), rc);
}

bool SqliteError::busy() const { return (code_ & 0xff) == SQLITE_BUSY || (code_ & 0xff) == SQLITE_LOCKED; }

// ---- Stmt ----

Stmt::Stmt(sqlite3_stmt* stmt, sqlite3* db, const std::string* path)
    : stmt_(stmt), db_(db), path_(path) {}

Stmt::~Stmt() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

namespace {
void check_bind(int rc, sqlite3* db, const std::string* path) {
  if (rc != SQLITE_OK) throw_sqlite(rc, db, *path, "binding a value");
}
}  // namespace

Stmt& Stmt::bind(int index, int64_t value) {
  check_bind(sqlite3_bind_int64(stmt_, index, value), db_, path_);
  return *this;
}

Stmt& Stmt::bind(int index, double value) {
  check_bind(sqlite3_bind_double(stmt_, index, value), db_, path_);
  return *this;
}

Stmt& Stmt::bind(int index, const std::string& value) {
  KILN_USER_CHECK(value.size() < static_cast<size_t>(std::numeric_limits<int>::max()))
      << "tuning database: a text value of " << value.size() << " bytes is too large to store";
  check_bind(sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()),
                               SQLITE_TRANSIENT),
             db_, path_);
  return *this;
}

Stmt& Stmt::bind(int index, const std::optional<double>& value) {
  return value ? bind(index, *value) : bind_null(index);
}

Stmt& Stmt::bind_null(int index) {
  check_bind(sqlite3_bind_null(stmt_, index), db_, path_);
  return *this;
}

Stmt& Stmt::bind_blob(int index, const void* data, size_t size) {
  KILN_USER_CHECK(size < static_cast<size_t>(std::numeric_limits<int>::max()))
      << "tuning database: a blob of " << size << " bytes is too large to store";
  check_bind(sqlite3_bind_blob(stmt_, index, data, static_cast<int>(size), SQLITE_TRANSIENT),
             db_, path_);
  return *this;
}

bool Stmt::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw_sqlite(rc, db_, *path_, std::string("running `") + sqlite3_sql(stmt_) + "`");
}

void Stmt::run() {
  while (step()) {
  }
}

bool Stmt::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

int64_t Stmt::col_int(int col) const { return sqlite3_column_int64(stmt_, col); }

double Stmt::col_double(int col) const { return sqlite3_column_double(stmt_, col); }

std::optional<double> Stmt::col_opt_double(int col) const {
  if (is_null(col)) return std::nullopt;
  return col_double(col);
}

std::string Stmt::col_text(int col) const {
  const unsigned char* text = sqlite3_column_text(stmt_, col);
  int size = sqlite3_column_bytes(stmt_, col);
  return text ? std::string(reinterpret_cast<const char*>(text), size) : std::string();
}

std::vector<unsigned char> Stmt::col_blob(int col) const {
  const auto* data = static_cast<const unsigned char*>(sqlite3_column_blob(stmt_, col));
  int size = sqlite3_column_bytes(stmt_, col);
  return data ? std::vector<unsigned char>(data, data + size) : std::vector<unsigned char>();
}

// ---- Connection ----

Connection::Connection(const std::string& path, bool read_only, bool create, int busy_timeout_ms)
    : path_(path) {
  int flags = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
  if (create && !read_only) flags |= SQLITE_OPEN_CREATE;
  // NOMUTEX: DatabaseState's mutex already serialises every use of the connection.
  flags |= SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw_sqlite(rc, nullptr, path, "opening the file (" + msg + ")");
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, busy_timeout_ms);
  // DIRECTONLY: usable in our statements, never from a trigger or view of the file.
  rc = sqlite3_create_function_v2(db_, "kiln_trace_hash", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY,
                                  nullptr, &sql_trace_hash, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw_sqlite(rc, nullptr, path, "registering the function kiln_trace_hash");
  }
}

Connection::~Connection() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

Stmt Connection::query(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) throw_sqlite(rc, db_, path_, "preparing `" + sql + "`");
    it = cache_.emplace(sql, stmt).first;
  }
  return Stmt(it->second, db_, &path_);
}

void Connection::exec(const std::string& sql) {
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) throw_sqlite(rc, db_, path_, "running `" + sql + "`");
}

int64_t Connection::scalar(const std::string& sql) {
  Stmt stmt = query(sql);
  KILN_CHECK(stmt.step()) << "`" << sql << "` returned no row";
  return stmt.col_int(0);
}

int64_t Connection::last_insert_id() const { return sqlite3_last_insert_rowid(db_); }

int64_t Connection::changes() const { return sqlite3_changes64(db_); }

// ---- Transaction ----

Transaction::Transaction(Connection& conn, bool write) : conn_(conn) {
  // IMMEDIATE takes the write lock up front, so a waiting writer blocks in the
  // busy handler instead of failing later when a read lock cannot be upgraded.
  conn_.exec(write ? "BEGIN IMMEDIATE" : "BEGIN");
}

Transaction::~Transaction() {
  if (!open_) return;
  // Best effort: a failed rollback leaves SQLite to roll back on close.
  sqlite3_exec(conn_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  conn_.exec("COMMIT");
  open_ = false;
}

}  // namespace kiln::tuning_db::detail
