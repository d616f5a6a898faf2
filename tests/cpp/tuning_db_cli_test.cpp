// The kiln-db command-line tool (path: KILN_DB_CLI), run as a user would.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "kiln/tuning_db/database.h"
#include "tuning_db_tools/test_util.h"

namespace kiln::tuning_db {
namespace {

using testing::failed_record;
using testing::read_bytes;
using testing::sample_record;
using testing::sample_workload;
using testing::TempDir;
using testing::write_bytes;

struct Result {
  int status;
  std::string output;  // stdout and stderr together
};

Result kiln_db(const std::string& args) {
  std::string cmd = std::string(KILN_DB_CLI) + " " + args + " 2>&1";
  Result r{-1, ""};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class TuningDbCli : public ::testing::Test {
 protected:
  TempDir dir;
  std::string db_path = dir.file("tune.db");
  const std::string key = "0123456789abcdef";
  void SetUp() override {
    Database db = Database::open(db_path);
    db.add_workload(sample_workload(key, "matmul_64"));
    db.add_records({sample_record(key, 2e-3, 1), sample_record(key, 1e-3, 2),
                    sample_record(key, 3e-3, 3), failed_record(key, ErrorKind::timeout, "slow")});
  }
  bool has(const Result& r, const std::string& text) {
    return r.output.find(text) != std::string::npos;
  }
};

TEST_F(TuningDbCli, UsageErrorsExitWithTwo) {
  Result r = kiln_db("");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r, "usage: kiln-db")) << r.output;
  r = kiln_db("frobnicate " + db_path);
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r, "unknown command 'frobnicate'")) << r.output;
  r = kiln_db("show " + db_path + " " + key + " -k");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r, "-k needs a value")) << r.output;
  EXPECT_EQ(kiln_db("--help").status, 0);
}

TEST_F(TuningDbCli, ListStatsShowAndCheck) {
  Result r = kiln_db("list " + db_path);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, key) && has(r, "matmul_64")) << r.output;
  r = kiln_db("stats " + db_path);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "records 4, errors 1")) << r.output;
  EXPECT_TRUE(has(r, "timeout")) << r.output;
  EXPECT_TRUE(has(r, "1.000 ms")) << r.output;  // best median
  r = kiln_db("show " + db_path + " " + key + " -k 2 --trace");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "1.000 ms") && has(r, "2.000 ms") && !has(r, "3.000 ms")) << r.output;
  EXPECT_TRUE(has(r, "\"factor\":3")) << r.output;  // trace of the 1 ms record (step 2)
  r = kiln_db("show " + db_path + " ffffffffffffffff");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r, "kiln-db list")) << r.output;
  r = kiln_db("check " + db_path);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, ": ok")) << r.output;
}

TEST_F(TuningDbCli, ExportImportAndPrune) {
  std::string file = dir.file("out.jsonl");
  Result r = kiln_db("export " + db_path + " " + file + " --no-errors");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "exported 3 records")) << r.output;
  std::string copy = dir.file("copy.db");
  r = kiln_db("import " + copy + " " + file);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "imported 3 records, skipped 0")) << r.output;
  r = kiln_db("import " + copy + " - < " + file);
  EXPECT_TRUE(has(r, "imported 0 records, skipped 3")) << r.output;
  r = kiln_db("prune " + copy + " --keep-best 1 --vacuum");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "deleted 2 records")) << r.output;
  EXPECT_EQ(Database::open(copy).stats().records, 1);
  EXPECT_EQ(kiln_db("prune " + copy).status, 2);  // no rule given
}

TEST_F(TuningDbCli, RefusesMissingAndForeignFilesWithoutTouchingThem) {
  std::string missing = dir.file("missing.db");
  Result r = kiln_db("stats " + missing);
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r, "does not exist")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(missing));
  std::string foreign = dir.file("foreign.txt");
  write_bytes(foreign, std::string(4096, 'z'));
  r = kiln_db("prune " + foreign + " --drop-errors");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r, "not a kiln tuning database")) << r.output;
  EXPECT_EQ(read_bytes(foreign), std::string(4096, 'z'));
}

}  // namespace
}  // namespace kiln::tuning_db
