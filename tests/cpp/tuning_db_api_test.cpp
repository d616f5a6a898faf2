// Unit tests of every operation of kiln::tuning_db::Database.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln/tuning_db/detail.h"
#include "tuning_db_tools/test_util.h"

namespace kiln::tuning_db {
namespace {

using testing::error_of;
using testing::failed_record;
using testing::sample_record;
using testing::sample_target;
using testing::sample_workload;
using testing::TempDir;

/** Runs `fn` and returns the kiln::Error message it throws ("" when none). */
class TuningDbApi : public ::testing::Test {
 protected:
  TempDir dir;
  std::string path = dir.file("tune.db");
  Database db = Database::open(path);
  const std::string key = "0123456789abcdef";
  void SetUp() override { db.add_workload(sample_workload(key)); }
};

TEST_F(TuningDbApi, OpenCreatesWalDatabaseAtLatestSchema) {
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(db.schema_version(), Database::latest_schema_version());
  EXPECT_EQ(db.path(), path);
  detail::Connection raw(path, /*read_only=*/true, false, 1000);
  EXPECT_EQ(raw.scalar("PRAGMA application_id"), detail::kApplicationId);
  Database again = Database::open(path);
  EXPECT_EQ(again.workloads().size(), 1u);
}

TEST_F(TuningDbApi, OpenRefusesMissingFileWithoutCreate) {
  OpenOptions o;
  o.create_if_missing = false;
  std::string missing = dir.file("missing.db");
  EXPECT_NE(error_of([&] { Database::open(missing, o); }).find("does not exist"), std::string::npos);
  o = {};
  o.read_only = true;
  EXPECT_NE(error_of([&] { Database::open(missing, o); }).find("does not exist"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(missing));
}

TEST_F(TuningDbApi, ReadOnlyDatabaseRefusesWrites) {
  db.add_records({sample_record(key, 1e-3)});
  OpenOptions o;
  o.read_only = true;
  Database ro = Database::open(path, o);
  EXPECT_EQ(ro.records(key).size(), 1u);
  EXPECT_NE(error_of([&] { ro.add_records({sample_record(key, 2e-3)}); }).find("read-only"),
            std::string::npos);
}

TEST_F(TuningDbApi, WorkloadsAreIdempotentAndCanonical) {
  db.add_workload(sample_workload(key));  // same DAG again: no-op
  auto w = db.workload(key);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->name, "matmul_64");
  // Canonical form: compact, keys sorted.
  EXPECT_EQ(w->compute_dag, R"({"ops":[{"dtype":"float32","op":"matmul","shape":[64,64,64]}]})");
  EXPECT_FALSE(db.workload("ffffffffffffffff"));
  Workload other = sample_workload(key);
  other.compute_dag = R"({"ops":[]})";
  EXPECT_NE(error_of([&] { db.add_workload(other); }).find("different compute DAG"),
            std::string::npos);
  Workload bad = sample_workload("1111111111111111");
  bad.compute_dag = "{not json";
  EXPECT_NE(error_of([&] { db.add_workload(bad); }).find("not valid JSON"), std::string::npos);
  EXPECT_FALSE(db.workload("1111111111111111"));
}

// The workload key is a structural hash without names, so conv1's and conv2's
// Winograd matmuls share one; their DAGs differ only in the tensors' names.
TEST_F(TuningDbApi, AWorkloadWhoseDagDiffersOnlyInNamesIsTheSame) {
  Workload first{"2222222222222222", "conv1.matmul",
                 R"({"ops":[{"canonical":"placeholder [36,49,16]","name":"conv1.winograd_input"}],"outputs":[0]})"};
  db.add_workload(first);
  Workload renamed = first;
  renamed.name = "conv2.matmul";
  renamed.compute_dag = R"({"ops":[{"canonical":"placeholder [36,49,16]","name":"conv2.winograd_input"}],"outputs":[0]})";
  EXPECT_NO_THROW(db.add_workload(renamed));
  EXPECT_EQ(db.workload(first.key)->compute_dag, first.compute_dag);  // the first stored stays
  EXPECT_EQ(db.workload(first.key)->name, "conv1.matmul");
  Workload reshaped = renamed;
  reshaped.compute_dag = R"({"ops":[{"canonical":"placeholder [36,49,8]","name":"conv1.winograd_input"}],"outputs":[0]})";
  EXPECT_NE(error_of([&] { db.add_workload(reshaped); }).find("different compute DAG"), std::string::npos);
  Workload unnamed = renamed;
  unnamed.compute_dag = R"({"ops":[{"canonical":"placeholder [36,49,16]"}],"outputs":[0]})";
  EXPECT_NO_THROW(db.add_workload(unnamed));
}

TEST_F(TuningDbApi, WorkloadSummariesCountRecordsAndErrors) {
  db.add_workload(sample_workload("aaaaaaaaaaaaaaaa", "empty"));
  db.add_records({sample_record(key, 1e-3), failed_record(key, ErrorKind::timeout, "slow")});
  auto list = db.workloads();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].key, key);
  EXPECT_EQ(list[0].records, 2);
  EXPECT_EQ(list[0].errors, 1);
  EXPECT_EQ(list[1].key, "aaaaaaaaaaaaaaaa");
  EXPECT_EQ(list[1].records, 0);
}

TEST_F(TuningDbApi, AddRecordsDerivesMinAndMedian) {
  Record r = sample_record(key, 0);
  r.run_times = {4.0, 1.0, 3.0, 2.0};
  r.min_time = 99;  // derived fields are recomputed, not trusted
  auto ids = db.add_records({r});
  ASSERT_EQ(ids.size(), 1u);
  auto stored = db.record(ids[0]);
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->min_time, 1.0);
  EXPECT_EQ(stored->median_time, 2.5);
  EXPECT_EQ(stored->run_times, r.run_times);
  EXPECT_EQ(stored->uid.size(), 32u);
  EXPECT_GT(stored->timestamp, 1.6e9);
  EXPECT_EQ(stored->build_time, 0.25);
  EXPECT_EQ(stored->target.cpu_features, (std::vector<std::string>{"avx2", "fma"}));
  EXPECT_FALSE(db.record(ids[0] + 1000));
}

TEST_F(TuningDbApi, BatchIsAllOrNothing) {
  std::vector<Record> batch = {sample_record(key, 1e-3), sample_record(key, 2e-3)};
  batch[1].workload_key = "feedfeedfeedfeed";  // unknown workload: fails inside the transaction
  EXPECT_NE(error_of([&] { db.add_records(batch); }).find("add_workload"), std::string::npos);
  EXPECT_TRUE(db.records(key).empty());
  batch[1] = sample_record(key, 2e-3);
  batch[1].uid = batch[0].uid = "same-uid";
  EXPECT_NE(error_of([&] { db.add_records(batch); }).find("UNIQUE"), std::string::npos);
  EXPECT_TRUE(db.records(key).empty());
}

TEST_F(TuningDbApi, RecordValidationNamesTheProblem) {
  auto expect_error = [&](Record r, const std::string& needle) {
    std::string msg = error_of([&] { db.add_records({r}); });
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
  };
  Record r = sample_record(key, 1e-3);
  r.trace = "[{\"kind\":";
  expect_error(r, "not valid JSON");
  r.trace = R"({"kind":"split"})";
  expect_error(r, "not a JSON array");
  r = sample_record(key, 1e-3);
  r.run_times = {1e-3, std::nan("")};
  expect_error(r, "finite");
  r.run_times = {-1.0};
  expect_error(r, "non-negative");
  r = sample_record(key, 1e-3);
  r.run_times.clear();
  expect_error(r, "no run times");
  r = sample_record(key, 1e-3);
  r.target.target.clear();
  expect_error(r, "target.target is empty");
  r = sample_record(key, 1e-3);
  r.target.cpu_features = {"avx2,fma"};
  expect_error(r, "no comma");
  r = sample_record(key, 1e-3);
  r.run_uid = "no-such-run";
  expect_error(r, "start_run");
  EXPECT_TRUE(db.records(key).empty());
}

TEST_F(TuningDbApi, BestRanksValidRecordsByMedianOrMin) {
  Record slow = sample_record(key, 3e-3, 1);
  Record fast = sample_record(key, 1e-3, 2);
  Record mid = sample_record(key, 2e-3, 3);
  mid.run_times = {2e-3, 2e-3, 1e-4};  // median 2e-3 but the lowest min of all
  db.add_records({slow, fast, mid, failed_record(key, ErrorKind::run_error, "segfault")});
  auto best = db.best(key, sample_target(), 2);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0].median_time, 1e-3);
  EXPECT_EQ(best[1].median_time, 2e-3);
  auto by_min = db.best(key, sample_target(), 1, TargetMatch::hardware, Metric::min);
  ASSERT_EQ(by_min.size(), 1u);
  EXPECT_EQ(by_min[0].min_time, 1e-4);
  EXPECT_EQ(db.best(key, sample_target(), 10).size(), 3u);  // the failed one never ranks
  EXPECT_TRUE(db.best("ffffffffffffffff", sample_target(), 3).empty());
  EXPECT_NE(error_of([&] { db.best(key, sample_target(), 0); }).find("at least 1"),
            std::string::npos);
}

TEST_F(TuningDbApi, BestMatchesTargetsByMode) {
  Record here = sample_record(key, 2e-3);
  Record newer_kiln = sample_record(key, 1e-3);
  newer_kiln.target.kiln_version = "0.2.0";
  Record other_cpu = sample_record(key, 5e-4);
  other_cpu.target.cpu_model = "Intel Xeon";
  db.add_records({here, newer_kiln, other_cpu});
  TargetInfo query = sample_target();
  query.cpu_features = {"avx2", "fma", "avx2"};  // order and duplicates do not matter
  EXPECT_EQ(db.best(key, query, 5, TargetMatch::exact).size(), 1u);
  auto hw = db.best(key, query, 5, TargetMatch::hardware);
  ASSERT_EQ(hw.size(), 2u);
  EXPECT_EQ(hw[0].target.kiln_version, "0.2.0");
  auto any = db.best(key, query, 5, TargetMatch::string_only);
  ASSERT_EQ(any.size(), 3u);
  EXPECT_EQ(any[0].target.cpu_model, "Intel Xeon");
}

TEST_F(TuningDbApi, RecordsListsEveryRecordOldestFirst) {
  auto ids = db.add_records({sample_record(key, 2e-3), failed_record(key, ErrorKind::build_error,
                                                                     "bad split")});
  auto more = db.add_records({sample_record(key, 1e-3)});
  auto all = db.records(key);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].id, ids[0]);
  EXPECT_EQ(all[1].error_kind, ErrorKind::build_error);
  EXPECT_EQ(all[1].error_msg, "bad split");
  EXPECT_FALSE(all[1].median_time);
  EXPECT_EQ(all[2].id, more[0]);
}

TEST_F(TuningDbApi, TuningRunsRoundTrip) {
  TuningRun run;
  run.budget = 1000;
  run.seed = -42;
  run.machine = "ci-box";
  std::string uid = db.start_run(run);
  EXPECT_EQ(uid.size(), 32u);
  Record r = sample_record(key, 1e-3);
  r.run_uid = uid;
  auto ids = db.add_records({r});
  EXPECT_EQ(db.record(ids[0])->run_uid, uid);
  auto stored = db.run(uid);
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->budget, 1000);
  EXPECT_EQ(stored->seed, -42);
  EXPECT_EQ(stored->machine, "ci-box");
  EXPECT_GT(stored->started_at, 0);
  EXPECT_FALSE(stored->ended_at);
  db.end_run(uid, 12345.5);
  EXPECT_EQ(db.run(uid)->ended_at, 12345.5);
  EXPECT_EQ(db.runs().size(), 1u);
  EXPECT_NE(error_of([&] { db.end_run("nope"); }).find("not in"), std::string::npos);
  EXPECT_FALSE(db.run("nope"));
}

TEST_F(TuningDbApi, FeaturesLiveInTheSideTable) {
  Record r = sample_record(key, 1e-3);
  r.features = FeatureSet{"ansor-v1", 2, 3, {1, 2, 3, 4, 5, 6.5f}};
  Record plain = sample_record(key, 2e-3);
  auto ids = db.add_records({r, plain});
  EXPECT_FALSE(db.best(key, sample_target(), 1)[0].features);  // not loaded unless asked
  auto with = db.records(key, /*with_features=*/true);
  ASSERT_TRUE(with[0].features);
  EXPECT_EQ(with[0].features->values, r.features->values);
  EXPECT_EQ(with[0].features->rows, 2);
  EXPECT_FALSE(with[1].features);
  RecordFilter f;
  f.feature_extractor = "ansor-v1";
  auto train = db.training_records(f);
  ASSERT_EQ(train.size(), 1u);
  EXPECT_EQ(train[0].id, ids[0]);
  db.set_features(ids[1], {"ansor-v1", 1, 1, {7}});
  EXPECT_EQ(db.training_records(f).size(), 2u);
  f.feature_extractor = "other";
  EXPECT_TRUE(db.training_records(f).empty());
  EXPECT_NE(error_of([&] { db.set_features(ids[1], {"x", 2, 2, {1}}); }).find("rows x cols"),
            std::string::npos);
  EXPECT_NE(error_of([&] { db.set_features(999, {"x", 1, 1, {1}}); }).find("not in"),
            std::string::npos);
}

TEST_F(TuningDbApi, FindAppliesEveryFilter) {
  Record other = sample_record(key, 1e-3);
  other.target = sample_target("llvm -mcpu=skylake");
  db.add_records({sample_record(key, 2e-3), other, failed_record(key, ErrorKind::timeout, "")});
  RecordFilter f;
  EXPECT_EQ(db.find(f).size(), 3u);
  f.include_errors = false;
  EXPECT_EQ(db.find(f).size(), 2u);
  f.target = sample_target("llvm -mcpu=skylake");
  f.match = TargetMatch::string_only;
  ASSERT_EQ(db.find(f).size(), 1u);
  EXPECT_EQ(db.find(f)[0].target.target, "llvm -mcpu=skylake");
  RecordFilter limited;
  limited.limit = 2;
  EXPECT_EQ(db.find(limited).size(), 2u);
  limited.workload_key = "ffffffffffffffff";
  EXPECT_TRUE(db.find(limited).empty());
}

TEST_F(TuningDbApi, StatsCountEverything) {
  db.add_workload(sample_workload("bbbbbbbbbbbbbbbb", "conv"));
  db.start_run({});
  db.add_records({sample_record(key, 2e-3), sample_record(key, 1e-3),
                  failed_record(key, ErrorKind::timeout, "t"),
                  failed_record(key, ErrorKind::timeout, "t"),
                  failed_record("bbbbbbbbbbbbbbbb", ErrorKind::wrong_result, "mismatch")});
  Stats s = db.stats();
  EXPECT_EQ(s.workloads, 2);
  EXPECT_EQ(s.targets, 1);
  EXPECT_EQ(s.tuning_runs, 1);
  EXPECT_EQ(s.records, 5);
  EXPECT_EQ(s.errors, 3);
  EXPECT_EQ(s.errors_by_kind.at("timeout"), 2);
  EXPECT_EQ(s.errors_by_kind.at("wrong_result"), 1);
  ASSERT_EQ(s.per_workload.size(), 2u);
  EXPECT_EQ(s.per_workload[0].workload_key, key);
  EXPECT_EQ(s.per_workload[0].records, 4);
  EXPECT_EQ(s.per_workload[0].best_median, 1e-3);
  EXPECT_DOUBLE_EQ(*s.per_workload[0].best_min, 0.9e-3);
  EXPECT_FALSE(s.per_workload[1].best_median);  // only a failed record
}

TEST_F(TuningDbApi, DeleteRecordsAndWorkloads) {
  Record r = sample_record(key, 1e-3);
  r.features = FeatureSet{"f", 1, 1, {1}};
  auto ids = db.add_records({r, sample_record(key, 2e-3), sample_record(key, 3e-3)});
  EXPECT_EQ(db.delete_records({ids[1], 424242}), 1);
  EXPECT_EQ(db.records(key).size(), 2u);
  EXPECT_EQ(db.delete_workload(key), 2);
  EXPECT_FALSE(db.workload(key));
  EXPECT_EQ(db.stats().records, 0);
  // Cascades reached the side table too.
  detail::Connection raw(path, true, false, 1000);
  EXPECT_EQ(raw.scalar("SELECT COUNT(*) FROM record_features"), 0);
  EXPECT_EQ(db.delete_workload("ffffffffffffffff"), 0);
}

TEST_F(TuningDbApi, PruneKeepsBestAndDropsSelected) {
  Record other = sample_record(key, 9e-3);
  other.target = sample_target("llvm -mcpu=skylake");
  Record old = sample_record(key, 8e-3);
  old.timestamp = 1000.0;
  db.add_records({sample_record(key, 3e-3), sample_record(key, 1e-3), sample_record(key, 2e-3),
                  other, old, failed_record(key, ErrorKind::run_error, "crash")});
  PruneOptions o;
  o.keep_best = 2;
  EXPECT_EQ(db.prune(o), 2);  // znver3 keeps 1e-3, 2e-3; skylake keeps its one
  EXPECT_EQ(db.stats().records, 4);
  o = {};
  o.older_than = 2000.0;
  EXPECT_EQ(db.prune(o), 0);  // the old record was already pruned as the worst
  o = {};
  o.drop_errors = true;
  o.vacuum = true;
  EXPECT_EQ(db.prune(o), 1);
  EXPECT_EQ(db.stats().errors, 0);
  EXPECT_EQ(db.best(key, sample_target(), 5).size(), 2u);
  o = {};
  o.keep_best = 0;
  EXPECT_NE(error_of([&] { db.prune(o); }).find("at least 1"), std::string::npos);
}

TEST_F(TuningDbApi, PruneOlderThanUsesTimestamps) {
  Record old = sample_record(key, 1e-3);
  old.timestamp = 1000.0;
  db.add_records({old, sample_record(key, 2e-3)});
  PruneOptions o;
  o.older_than = 2000.0;
  EXPECT_EQ(db.prune(o), 1);
  ASSERT_EQ(db.records(key).size(), 1u);
  EXPECT_EQ(db.records(key)[0].median_time, 2e-3);
}

TEST_F(TuningDbApi, IntegrityCheckPassesOnSoundFile) {
  db.add_records({sample_record(key, 1e-3)});
  EXPECT_TRUE(db.check_integrity().empty());
}

TEST_F(TuningDbApi, ErrorKindTextRoundTrips) {
  for (auto k : {ErrorKind::none, ErrorKind::build_error, ErrorKind::run_error, ErrorKind::timeout,
                 ErrorKind::wrong_result})
    EXPECT_EQ(parse_error_kind(to_string(k)), k);
  EXPECT_NE(error_of([] { parse_error_kind("crash"); }).find("wrong_result"), std::string::npos);
}

TEST_F(TuningDbApi, MovedFromHandleThrowsInsteadOfCrashing) {
  Database moved = std::move(db);
  EXPECT_EQ(moved.workloads().size(), 1u);
  EXPECT_NE(error_of([&] { db.workloads(); }).find("moved from"), std::string::npos);
}

TEST_F(TuningDbApi, ThreadsShareOneHandle) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int b = 0; b < 10; ++b) {
        std::vector<Record> batch;
        for (int i = 0; i < 16; ++i) batch.push_back(sample_record(key, 1e-3 * (i + 1), t));
        db.add_records(batch);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(db.stats().records, 4 * 10 * 16);
}

}  // namespace
}  // namespace kiln::tuning_db
