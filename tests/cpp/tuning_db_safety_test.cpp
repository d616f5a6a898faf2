// Files the tuning DB must refuse without modifying them (foreign, truncated,
// newer schema, corrupt), and the migration of an older schema.
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln/tuning_db/detail.h"
#include "tuning_db_tools/test_util.h"

namespace kiln::tuning_db {
namespace {

using testing::read_bytes;
using testing::sample_record;
using testing::sample_workload;
using testing::TempDir;
using testing::write_bytes;

const std::string kKey = "0123456789abcdef";

/** Opens `path` expecting a kiln::Error containing `needle`; checks the bytes did not change. */
void expect_refused_untouched(const std::string& path, const std::string& needle,
                              const OpenOptions& options = {}) {
  const std::string before = read_bytes(path);
  ASSERT_FALSE(before.empty());
  try {
    Database::open(path, options);
    ADD_FAILURE() << "opening " << path << " should have failed";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << "the message should name the file: " << msg;
    EXPECT_NE(msg.find("not modified"), std::string::npos) << "message: " << msg;
  }
  EXPECT_EQ(read_bytes(path), before) << "the refused file was modified";
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-journal"));
}

/** A closed kiln database of `n` records with padded traces (so it spans many pages). */
std::string make_database(const TempDir& dir, int n) {
  std::string path = dir.file("tune.db");
  Database db = Database::open(path);
  db.add_workload(sample_workload(kKey));
  std::vector<Record> batch;
  for (int i = 0; i < n; ++i) {
    Record r = sample_record(kKey, 1e-3 * (i + 1), i);
    r.error_msg = std::string(200, 'p');
    batch.push_back(r);
  }
  db.add_records(batch);
  return path;  // the handle closes here; the WAL is checkpointed into the file
}

TEST(TuningDbSafety, ForeignTextFileIsRefusedUntouched) {
  TempDir dir;
  std::string path = dir.file("notes.txt");
  std::string text;
  for (int i = 0; i < 100; ++i) text += "this is a text file, not a database\n";
  write_bytes(path, text);
  expect_refused_untouched(path, "not an SQLite file");
  OpenOptions ro;
  ro.read_only = true;
  expect_refused_untouched(path, "not an SQLite file", ro);
}

TEST(TuningDbSafety, ShortForeignFileIsRefusedUntouched) {
  TempDir dir;
  std::string path = dir.file("tiny");
  write_bytes(path, "SQLite");
  expect_refused_untouched(path, "not an SQLite file");
}

TEST(TuningDbSafety, OtherApplicationsSqliteDatabaseIsRefusedUntouched) {
  TempDir dir;
  std::string plain = dir.file("plain.sqlite");
  {
    detail::Connection raw(plain, false, true, 1000);
    raw.exec("CREATE TABLE people(name TEXT)");
    raw.exec("INSERT INTO people VALUES('ada')");
  }
  expect_refused_untouched(plain, "another application");
  std::string stamped = dir.file("stamped.sqlite");
  {
    detail::Connection raw(stamped, false, true, 1000);
    raw.exec("PRAGMA application_id = 1234");
    raw.exec("CREATE TABLE t(x)");
  }
  expect_refused_untouched(stamped, "another application");
}

TEST(TuningDbSafety, TruncatedFileIsRefusedUntouched) {
  TempDir dir;
  std::string path = make_database(dir, 2000);
  std::string bytes = read_bytes(path);
  ASSERT_GT(bytes.size(), 64u * 4096u);
  write_bytes(path, bytes.substr(0, bytes.size() / 2 / 4096 * 4096));  // whole pages lost
  expect_refused_untouched(path, "truncated");
  write_bytes(path, bytes.substr(0, bytes.size() / 2 + 123));  // cut mid-page
  expect_refused_untouched(path, "truncated");
}

// A failed SQLite call is a typed user error with its result code: a lock
// held by another connection is told by the code, not by the message.
TEST(TuningDbSafety, SqliteFailuresCarryTheirCode) {
  TempDir dir;
  std::string path = make_database(dir, 1);
  detail::Connection holder(path, false, false, 1000);
  detail::Connection probe(path, false, false, /*busy_timeout_ms=*/0);
  holder.exec("BEGIN IMMEDIATE");
  try {
    probe.exec("BEGIN IMMEDIATE");
    ADD_FAILURE() << "a second writer got the lock";
  } catch (const detail::SqliteError& e) {
    EXPECT_TRUE(e.busy()) << e.code() << ": " << e.what();
  }
  holder.exec("ROLLBACK");
  try {
    probe.exec("SELECT * FROM no_such_table");
    ADD_FAILURE() << "no error for a missing table";
  } catch (const detail::SqliteError& e) {
    EXPECT_FALSE(e.busy()) << e.code() << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("no_such_table"), std::string::npos) << e.what();
  }
}

TEST(TuningDbSafety, NewerSchemaIsRefusedUntouched) {
  TempDir dir;
  std::string path = make_database(dir, 10);
  {
    detail::Connection raw(path, false, false, 1000);
    raw.exec("PRAGMA user_version = " + std::to_string(Database::latest_schema_version() + 1));
  }
  expect_refused_untouched(path, "newer than this kiln");
  OpenOptions ro;
  ro.read_only = true;
  expect_refused_untouched(path, "newer than this kiln", ro);
}

TEST(TuningDbSafety, InvalidHeaderIsRefusedUntouched) {
  TempDir dir;
  std::string path = make_database(dir, 10);
  std::string bytes = read_bytes(path);
  bytes[16] = 0x03;  // page size 0x03xx: not a power of two
  bytes[17] = 0x01;
  write_bytes(path, bytes);
  expect_refused_untouched(path, "corrupt");
}

TEST(TuningDbSafety, MarkedDatabaseWithoutTablesIsRefusedUntouched) {
  TempDir dir;
  std::string path = make_database(dir, 10);
  {
    detail::Connection raw(path, false, false, 1000);
    raw.exec("DROP TABLE record_features");
  }
  expect_refused_untouched(path, "lacks the table");
}

TEST(TuningDbSafety, CorruptPageGivesClearErrorNotCrash) {
  TempDir dir;
  std::string path = make_database(dir, 2000);
  std::string bytes = read_bytes(path);
  // Scribble over a run of pages in the middle, where the records' b-tree lives.
  for (size_t i = bytes.size() / 3; i < bytes.size() / 3 + 8 * 4096; ++i)
    bytes[i] = static_cast<char>(0xA5 ^ (i * 7));
  write_bytes(path, bytes);
  // The header and schema (page 1) are intact, so the file opens; the damage is
  // found by the integrity check, and reading through it throws kiln::Error.
  Database db = Database::open(path);
  auto problems = db.check_integrity();
  ASSERT_FALSE(problems.empty()) << "corruption went unnoticed";
  try {
    for (const Record& r : db.records(kKey)) (void)r;
    db.stats();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("damaged"), std::string::npos) << msg;
  }
}

TEST(TuningDbSafety, EmptyFileBecomesANewDatabase) {
  TempDir dir;
  std::string path = dir.file("empty.db");
  write_bytes(path, "");
  Database db = Database::open(path);
  EXPECT_EQ(db.schema_version(), Database::latest_schema_version());
  EXPECT_TRUE(db.workloads().empty());
}

TEST(TuningDbSafety, DirectoryIsRefused) {
  TempDir dir;
  try {
    Database::open(dir.path());
    ADD_FAILURE() << "a directory should be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

TEST(TuningDbSafety, MissingDirectoryGivesClearError) {
  TempDir dir;
  try {
    Database::open(dir.file("no/such/dir/tune.db"));
    ADD_FAILURE() << "a missing directory should be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("directory exists"), std::string::npos) << e.what();
  }
}

/** A version-1 database with one workload, target and record, written with raw SQL. */
std::string make_v1_database(const TempDir& dir) {
  std::string path = dir.file("v1.db");
  detail::Connection raw(path, false, true, 1000);
  raw.exec("PRAGMA journal_mode = WAL");
  detail::create_schema_at(raw, 1);
  raw.exec("INSERT INTO workloads VALUES(1, '0123456789abcdef', 'mm', '{}', 1.0)");
  raw.exec("INSERT INTO targets VALUES(1, 'llvm', '', '', '', '0.0.1')");
  raw.exec("INSERT INTO records VALUES(1, 'uid-1', 1, 1, NULL, '[]', '[0.5,0.25]', 0.25, 0.375, "
           "'none', '', NULL, 2.0)");
  return path;
}

TEST(TuningDbSafety, ReadOnlyOpenOfOldSchemaAsksForMigrationUntouched) {
  TempDir dir;
  std::string path = make_v1_database(dir);
  OpenOptions ro;
  ro.read_only = true;
  const std::string before = read_bytes(path);
  try {
    Database::open(path, ro);
    ADD_FAILURE() << "read-only open of a v1 database should fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("migrate"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_bytes(path), before);
}

TEST(TuningDbSafety, OldSchemaIsMigratedKeepingRecords) {
  TempDir dir;
  std::string path = make_v1_database(dir);
  Database db = Database::open(path);
  EXPECT_EQ(db.schema_version(), Database::latest_schema_version());
  auto records = db.records(kKey);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].uid, "uid-1");
  EXPECT_EQ(records[0].median_time, 0.375);
  EXPECT_EQ(records[0].target.kiln_version, "0.0.1");
  // The version-2 side table and index work on the migrated file.
  db.set_features(records[0].id, {"ansor-v1", 1, 2, {1, 2}});
  EXPECT_EQ(db.training_records({}).at(0).features->values, (std::vector<float>{1, 2}));
  EXPECT_EQ(db.best(kKey, {"llvm", "", {}, "", ""}, 1, TargetMatch::string_only, Metric::min)
                .at(0).min_time, 0.25);
  EXPECT_TRUE(db.check_integrity().empty());
  detail::Connection raw(path, true, false, 1000);
  EXPECT_EQ(raw.scalar("PRAGMA user_version"), Database::latest_schema_version());
}

}  // namespace
}  // namespace kiln::tuning_db
