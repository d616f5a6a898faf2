// Tests of the search policy and tune() (tuner/include/kiln/tuner/tune.h):
// tiny sessions on a 64x64x64 GEMM with a throw-away tuning database.
// Budgets are small (CI has 2 cores): each session measures 6-24 candidates.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "kiln/ops/nn.h"
#include "kiln/support/error.h"
#include "kiln/tuner/features.h"
#include "kiln/tuner/tune.h"
#include "kiln/tuning_db/database.h"
#include "tuner_test_util.h"

namespace kiln::tuner {
namespace {

namespace fs = std::filesystem;

using testing::gemm_task;
using testing::TempDb;

TuneOptions tiny(const std::string& db, int trials) {
  TuneOptions o;
  o.trials = trials;
  o.batch_size = 8;
  o.early_stop_rounds = 100;  // the budget ends these sessions, not early stopping
  o.seed = 1;
  o.db_path = db;
  o.timeout_s = 10;
  o.measure.repeat = 3;
  o.measure.min_repeat_ms = 2;
  o.progress = false;
  o.population = 24;
  o.generations = 2;
  return o;
}

std::vector<tuning_db::Record> records_of(const std::string& db, const Task& t) {
  return tuning_db::Database::open(db).records(t.workload_key);
}

double naive_time(const Task& task) {
  MeasureOptions mo;
  mo.repeat = 3;
  mo.min_repeat_ms = 2;
  Measurer m(task, mo);
  Candidate c;
  c.trace = task.fresh_schedule().trace();
  MeasureResult r = m.measure({c})[0];
  EXPECT_EQ(r.error, MeasureError::None) << r.error_msg;
  return r.median_time();
}

// One session with a crash injected into its fourth candidate: it finishes
// the budget, beats the unscheduled loop nest, and stores every measurement.
TEST(TunerTune, SessionBeatsNaiveStoresEveryRecordAndSurvivesACrash) {
  TempDb db;
  Task task = gemm_task(64);
  TuneOptions o = tiny(db.path(), 24);
  o.measure.inject_faults = "crash@3";
  o.curve_png = (db.dir / "curve.png").string();
  TuneResult r = tune(task, o);
  EXPECT_EQ(r.trials_measured, 24);
  EXPECT_EQ(r.trials_skipped, 0);
  EXPECT_GE(r.errors, 1);
  EXPECT_EQ(r.db_path, db.path());
  ASSERT_GT(r.best_time, 0);
  EXPECT_NEAR(r.best_gflops, task.flop / r.best_time * 1e-9, 1e-6 * r.best_gflops);
  EXPECT_GE(r.first_valid_time, r.best_time);
  EXPECT_LT(r.best_time, naive_time(task)) << "tuning should beat the unscheduled loop nest";

  std::vector<tuning_db::Record> recs = records_of(db.path(), task);
  EXPECT_EQ(static_cast<int>(recs.size()), r.trials_measured) << "every measurement is stored, errors too";
  int crashes = 0;
  for (const auto& rec : recs) {
    EXPECT_FALSE(rec.run_uid.empty());
    if (rec.error_kind == tuning_db::ErrorKind::run_error && rec.error_msg.find("SIGSEGV") != std::string::npos) ++crashes;
  }
  EXPECT_EQ(crashes, 1);
  // Records carry the cost model's features.
  tuning_db::RecordFilter f;
  f.workload_key = task.workload_key;
  f.feature_extractor = feature_extractor_name();
  EXPECT_EQ(tuning_db::Database::open(db.path()).find(f).size(), recs.size());

  // The curve rises monotonically, one point per batch.
  ASSERT_EQ(r.curve.size(), 3u);
  for (size_t i = 1; i < r.curve.size(); ++i) {
    EXPECT_GT(r.curve[i].first, r.curve[i - 1].first);
    EXPECT_GE(r.curve[i].second, r.curve[i - 1].second);
  }
  EXPECT_NEAR(r.curve.back().second, r.best_gflops, 1e-6 * r.best_gflops);
  // The curve's PNG (python/kiln/plot_curve.py), where Debian's python has matplotlib.
  if (std::system("/usr/bin/python3 -c 'import matplotlib' 2>/dev/null") == 0) {
    std::ifstream png(db.dir / "curve.png", std::ios::binary);
    char magic[4] = {};
    png.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  }

  // best_schedule replays the best record.
  std::string trace;
  std::optional<te::Schedule> best = best_schedule(task, db.path(), &trace);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(trace, r.best_trace);
  EXPECT_FALSE(best_schedule(task, (db.dir / "missing.db").string()).has_value());
  EXPECT_FALSE(best_schedule(gemm_task(32), db.path()).has_value()) << "another workload has no record";
}

Task gemm_task_on_cores(int n, int cores) {
  Target t = Target::host();
  t.num_cores = cores;
  te::Tensor A = te::placeholder({n, n}, DataType::Float(32), "A");
  te::Tensor B = te::placeholder({n, n}, DataType::Float(32), "B");
  return make_task({A, B, ops::matmul(A, B, "C")}, t, "matmul_" + std::to_string(n));
}

// A build on 1 or 5 cores takes the record tuned for the nearest other core
// count of the same target (the larger on ties) and says which; a tuning
// session's own lookup (this_target) does not, nor does any lookup where the
// task's own target has a record.
TEST(TunerTune, OtherCoreCountsWithRecordsAreNamedNearestFirstButNotTaken) {
  TempDb db;
  Task two = gemm_task_on_cores(64, 2), eight = gemm_task_on_cores(64, 8);
  ASSERT_EQ(two.workload_key, eight.workload_key) << "the core count is the target's, not the workload's";
  ASSERT_GT(tune(two, tiny(db.path(), 6)).best_time, 0);
  ASSERT_GT(tune(eight, tiny(db.path(), 6)).best_time, 0);

  Task one = gemm_task_on_cores(64, 1);
  EXPECT_FALSE(best_record(one, db.path()).has_value()) << "a build takes its own target's records only";
  EXPECT_EQ(other_core_count_targets(one, db.path()), (std::vector<std::string>{two.target.str(), eight.target.str()}))
      << "2 cores is nearer to 1 than 8";
  EXPECT_EQ(other_core_count_targets(gemm_task_on_cores(64, 5), db.path()), (std::vector<std::string>{eight.target.str(), two.target.str()}))
      << "3 cores away each: the larger count first";
  EXPECT_EQ(other_core_count_targets(two, db.path()), std::vector<std::string>{eight.target.str()}) << "never its own";
  EXPECT_TRUE(other_core_count_targets(gemm_task_on_cores(32, 1), db.path()).empty()) << "another workload has none";
  EXPECT_TRUE(other_core_count_targets(one, db.path() + ".missing").empty());
  EXPECT_EQ(tuning_db::Database::open(db.path()).targets_of(two.workload_key).size(), 2u) << "one stored target per core count";
}

// A second session on the same database skips every trace the first measured.
TEST(TunerTune, ResumedSessionDoesNotRemeasureKnownTraces) {
  TempDb db;
  Task task = gemm_task(64);
  TuneResult r1 = tune(task, tiny(db.path(), 8));
  TuneResult r2 = tune(task, tiny(db.path(), 8));  // same seed: it proposes the same candidates first
  EXPECT_EQ(r1.trials_measured, 8);
  EXPECT_GT(r2.trials_skipped, 0);
  std::vector<tuning_db::Record> recs = records_of(db.path(), task);
  EXPECT_EQ(static_cast<int>(recs.size()), r1.trials_measured + r2.trials_measured);
  std::set<std::string> traces;
  for (const auto& rec : recs) traces.insert(rec.trace);
  EXPECT_EQ(traces.size(), recs.size()) << "no trace is measured twice";
  EXPECT_LE(r2.best_time, r1.best_time) << "the best of the DB is the reference to beat";
  EXPECT_EQ(tuning_db::Database::open(db.path()).runs().size(), 2u);
}

// Candidates whose output is wrong are recorded as wrong_result and never reported as the best.
TEST(TunerTune, WrongResultsAreRecordedAndNeverReported) {
  TempDb db;
  Task task = gemm_task(64);
  TuneOptions o = tiny(db.path(), 6);
  o.batch_size = 6;
  o.measure.inject_faults = "wrong@0-999";
  TuneResult r = tune(task, o);
  EXPECT_EQ(r.trials_measured, 6);
  EXPECT_EQ(r.best_time, 0);
  EXPECT_TRUE(r.best_trace.empty());
  EXPECT_EQ(r.errors, 6);
  for (const auto& rec : records_of(db.path(), task)) {
    EXPECT_EQ(rec.error_kind, tuning_db::ErrorKind::wrong_result);
    EXPECT_NE(rec.error_msg.find("differ"), std::string::npos) << rec.error_msg;
  }
  EXPECT_FALSE(best_schedule(task, db.path()).has_value());
}

TEST(TunerTune, BadOptionsAreErrors) {
  TempDb db;
  Task task = gemm_task(16);
  TuneOptions o = tiny(db.path(), 4);
  o.batch_size = 0;
  EXPECT_THROW(tune(task, o), Error);
  o = tiny("", 4);
  EXPECT_THROW(tune(task, o), Error);
  o = tiny(db.path(), 4);
  o.claim_ttl_s = 0;
  EXPECT_THROW(tune(task, o), Error);
}

}  // namespace
}  // namespace kiln::tuner
