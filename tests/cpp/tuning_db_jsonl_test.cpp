// JSON Lines export and import: a round trip keeps every field; bad input is
// refused with its line number and imports nothing.
#include <gtest/gtest.h>

#include <sstream>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln/tuning_db/jsonl.h"
#include "tuning_db_tools/test_util.h"

namespace kiln::tuning_db {
namespace {

using testing::failed_record;
using testing::read_bytes;
using testing::sample_record;
using testing::sample_workload;
using testing::TempDir;
using testing::write_bytes;

const std::string kA = "00000000000000a1";
const std::string kB = "00000000000000b2";

/** Every field of two records but the database-local id. */
void expect_same_record(const Record& x, const Record& y) {
  EXPECT_EQ(x.uid, y.uid);
  EXPECT_EQ(x.workload_key, y.workload_key);
  EXPECT_EQ(x.target.target, y.target.target);
  EXPECT_EQ(x.target.cpu_model, y.target.cpu_model);
  EXPECT_EQ(x.target.cpu_features, y.target.cpu_features);
  EXPECT_EQ(x.target.gpu_arch, y.target.gpu_arch);
  EXPECT_EQ(x.target.kiln_version, y.target.kiln_version);
  EXPECT_EQ(x.trace, y.trace);
  EXPECT_EQ(x.run_times, y.run_times);  // exact: doubles survive the text form
  EXPECT_EQ(x.min_time, y.min_time);
  EXPECT_EQ(x.median_time, y.median_time);
  EXPECT_EQ(x.error_kind, y.error_kind);
  EXPECT_EQ(x.error_msg, y.error_msg);
  EXPECT_EQ(x.build_time, y.build_time);
  EXPECT_EQ(x.run_uid, y.run_uid);
  EXPECT_EQ(x.timestamp, y.timestamp);
  ASSERT_EQ(x.features.has_value(), y.features.has_value());
  if (x.features) {
    EXPECT_EQ(x.features->extractor, y.features->extractor);
    EXPECT_EQ(x.features->rows, y.features->rows);
    EXPECT_EQ(x.features->cols, y.features->cols);
    EXPECT_EQ(x.features->values, y.features->values);
  }
}

/** A database exercising every field: runs, GPU target, errors, features, odd numbers. */
void fill(Database& db) {
  db.add_workload(sample_workload(kA, "matmul"));
  db.add_workload({kB, "conv2d \xc3\xa9t\xc3\xa9", R"({"ops":[{"op":"conv2d","pad":[1,1]}]})"});
  TuningRun run{"", 1700000000.123456, 1700000500.5, 2000, -7, "box \"one\""};
  std::string uid = db.start_run(run);
  Record a = sample_record(kA, 1.0 / 3.0, 1);
  a.run_uid = uid;
  a.run_times = {0.1, 1e-9, 0.30000000000000004, 123456.789};
  a.timestamp = 1700000001.000001;
  a.features = FeatureSet{"ansor-v1", 2, 2, {0.1f, -3.5f, 1e-20f, 7.0f}};
  Record gpu = sample_record(kB, 2e-5, 2);
  gpu.target = {"cuda -arch=sm_90", "", {}, "sm_90", "0.1.0"};
  gpu.build_time.reset();
  Record bad = failed_record(kB, ErrorKind::build_error, "line 1:\n\tunknown \"axis\" \xe2\x9c\x97");
  bad.run_uid = uid;
  db.add_records({a, gpu, bad, failed_record(kA, ErrorKind::timeout, "")});
}

TEST(TuningDbJsonl, RoundTripPreservesEveryField) {
  TempDir dir;
  Database src = Database::open(dir.file("src.db"));
  fill(src);
  std::string file = dir.file("records.jsonl");
  EXPECT_EQ(src.export_jsonl(file), 4);
  Database dst = Database::open(dir.file("dst.db"));
  ImportResult r = dst.import_jsonl(file);
  EXPECT_EQ(r.added, 4);
  EXPECT_EQ(r.skipped, 0);

  for (const std::string& key : {kA, kB}) {
    EXPECT_EQ(src.workload(key)->name, dst.workload(key)->name);
    EXPECT_EQ(src.workload(key)->compute_dag, dst.workload(key)->compute_dag);
    auto x = src.records(key, true), y = dst.records(key, true);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) expect_same_record(x[i], y[i]);
  }
  ASSERT_EQ(dst.runs().size(), 1u);
  TuningRun a = src.runs()[0], b = dst.runs()[0];
  EXPECT_EQ(a.uid, b.uid);
  EXPECT_EQ(a.started_at, b.started_at);
  EXPECT_EQ(a.ended_at, b.ended_at);
  EXPECT_EQ(a.budget, b.budget);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.machine, b.machine);
  // The strongest check: exporting the copy gives the same bytes.
  std::string again = dir.file("again.jsonl");
  dst.export_jsonl(again);
  EXPECT_EQ(read_bytes(again), read_bytes(file));
}

TEST(TuningDbJsonl, ImportSkipsRecordsAlreadyPresent) {
  TempDir dir;
  Database db = Database::open(dir.file("a.db"));
  fill(db);
  std::stringstream lines;
  EXPECT_EQ(db.write_jsonl(lines), 4);
  ImportResult r = db.read_jsonl(lines);
  EXPECT_EQ(r.added, 0);
  EXPECT_EQ(r.skipped, 4);
  EXPECT_EQ(db.stats().records, 4);
}

TEST(TuningDbJsonl, ExportHonoursTheFilter) {
  TempDir dir;
  Database db = Database::open(dir.file("a.db"));
  fill(db);
  RecordFilter f;
  f.workload_key = kB;
  f.include_errors = false;
  std::stringstream lines;
  EXPECT_EQ(db.write_jsonl(lines, f), 1);
  ExchangeRecord e = parse_json_line(lines.str().substr(0, lines.str().find('\n')));
  EXPECT_EQ(e.record.target.gpu_arch, "sm_90");
  EXPECT_EQ(e.workload.name, "conv2d \xc3\xa9t\xc3\xa9");
  EXPECT_FALSE(e.run);
}

TEST(TuningDbJsonl, LinesAreSelfContained) {
  TempDir dir;
  Database db = Database::open(dir.file("a.db"));
  fill(db);
  std::stringstream lines;
  db.write_jsonl(lines);
  std::string first = lines.str().substr(0, lines.str().find('\n'));
  EXPECT_EQ(first.rfind("{\"format\":\"kiln-tuning-record\",\"format_version\":1,", 0), 0u);
  ExchangeRecord e = parse_json_line(first);
  EXPECT_EQ(e.workload.key, kA);
  EXPECT_NE(e.workload.compute_dag.find("matmul"), std::string::npos);
  ASSERT_TRUE(e.run);
  EXPECT_EQ(e.run->budget, 2000);
  ASSERT_TRUE(e.record.features);
  EXPECT_EQ(to_json_line(e), first);  // parse -> serialise is the identity
}

TEST(TuningDbJsonl, BadLineAbortsTheWholeImportNamingTheLine) {
  TempDir dir;
  Database src = Database::open(dir.file("src.db"));
  fill(src);
  std::stringstream good;
  src.write_jsonl(good);
  std::string text = good.str();
  size_t second = text.find('\n') + 1;
  std::string broken = text.substr(0, second) + "\n{\"format\":\"kiln-tuning-record\"}\n" +
                       text.substr(second);
  Database dst = Database::open(dir.file("dst.db"));
  std::stringstream in(broken);
  try {
    dst.read_jsonl(in);
    ADD_FAILURE() << "import of a broken line should fail";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("line 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("format_version"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nothing was imported"), std::string::npos) << msg;
  }
  EXPECT_EQ(dst.stats().records, 0);
  EXPECT_EQ(dst.stats().workloads, 0);
}

TEST(TuningDbJsonl, ParseErrorsNameTheField) {
  auto error_of = [](const std::string& line) {
    try {
      parse_json_line(line);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("{oops").find("not a valid kiln tuning record"), std::string::npos);
  EXPECT_NE(error_of(R"({"format":"other"})").find("not a kiln tuning record"), std::string::npos);
  EXPECT_NE(error_of(R"({"format":"kiln-tuning-record","format_version":99})").find("newer"),
            std::string::npos);
  TempDir dir;
  Database db = Database::open(dir.file("a.db"));
  fill(db);
  std::stringstream lines;
  db.write_jsonl(lines);
  std::string line = lines.str().substr(0, lines.str().find('\n'));
  std::string no_uid = line;
  no_uid.replace(no_uid.find("\"uid\":"), 6, "\"xid\":");
  EXPECT_NE(error_of(no_uid).find("field 'uid' is missing"), std::string::npos);
  std::string bad_kind = line;
  bad_kind.replace(bad_kind.find("\"error_kind\":\"none\""), 19, "\"error_kind\":\"oops\"");
  EXPECT_NE(error_of(bad_kind).find("unknown error kind 'oops'"), std::string::npos);
  std::string bad_times = line;
  bad_times.replace(bad_times.find("\"run_times\":["), 13, "\"run_times\":[\"x\",");
  EXPECT_NE(error_of(bad_times).find("field 'run_times' must be an array of numbers"),
            std::string::npos);
}

TEST(TuningDbJsonl, ImportRefusesAWorkloadKeyWithAnotherDag) {
  TempDir dir;
  Database src = Database::open(dir.file("src.db"));
  fill(src);
  std::string file = dir.file("r.jsonl");
  src.export_jsonl(file);
  Database dst = Database::open(dir.file("dst.db"));
  dst.add_workload({kA, "matmul", R"({"ops":["different"]})"});
  try {
    dst.import_jsonl(file);
    ADD_FAILURE() << "a conflicting DAG should stop the import";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different compute DAG"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dst.stats().records, 0);
}

TEST(TuningDbJsonl, MissingImportFileIsAClearError) {
  TempDir dir;
  Database db = Database::open(dir.file("a.db"));
  try {
    db.import_jsonl(dir.file("nope.jsonl"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
  write_bytes(dir.file("empty.jsonl"), "\n\n");
  EXPECT_EQ(db.import_jsonl(dir.file("empty.jsonl")).added, 0);
}

}  // namespace
}  // namespace kiln::tuning_db
