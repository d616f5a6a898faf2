// User errors against internal errors (runtime/include/kiln/support/error.h), and the
// tuner's policy for them: a candidate that raises a user error is an invalid
// candidate, counted and recorded as a build error; an internal error (a bug
// in kiln) fails the session loudly instead of being counted as one more bad
// candidate. The candidates' errors are injected (MeasureOptions::inject_faults).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <type_traits>

#include "kiln/ops/nn.h"
#include "kiln/support/error.h"
#include "kiln/tuner/measure.h"
#include "kiln/tuner/tune.h"
#include "kiln/tuning_db/database.h"

namespace kiln::tuner {
namespace {

namespace fs = std::filesystem;

TEST(ErrorKinds, ChecksThrowTheirKind) {
  int x = 1;
  try {
    KILN_CHECK(x == 2) << "x is " << x;
    FAIL() << "KILN_CHECK did not throw";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("x == 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(KILN_ICHECK(x == 2), InternalError);
  EXPECT_THROW(KILN_UNREACHABLE() << "here", InternalError);
  try {
    KILN_USER_CHECK(x == 2) << "x must be 2";
    FAIL() << "KILN_USER_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "x must be 2");
  }
  // Context added at a catch site keeps the kind.
  EXPECT_THROW(rethrow_as(InternalError("inner"), "outer: inner"), InternalError);
  try {
    rethrow_as(Error("inner"), "outer: inner");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "outer: inner");
  }
}

// Which handler a thrown error reaches: "user" for catch (Error), "internal"
// for catch (InternalError), tried in the order code that skips bad input uses.
template <typename F>
std::string caught_as(F&& body) {
  try {
    body();
  } catch (const Error&) {
    return "user";
  } catch (const InternalError&) {
    return "internal";
  }
  return "nothing";
}

TEST(ErrorKinds, CatchingUserErrorsNeverCatchesABug) {
  // Siblings, as kiln.KilnError and kiln.InternalError are in Python.
  static_assert(!std::is_base_of_v<Error, InternalError>);
  static_assert(!std::is_base_of_v<InternalError, Error>);
  EXPECT_EQ(caught_as([] { KILN_CHECK(1 + 1 == 3) << "a bug"; }), "internal");
  EXPECT_EQ(caught_as([] { KILN_UNREACHABLE() << "a bug"; }), "internal");
  EXPECT_EQ(caught_as([] { KILN_USER_ERROR() << "misuse"; }), "user");
  // Both are kiln::Exception, for the few sites that handle them alike.
  EXPECT_THROW(KILN_CHECK(false) << "a bug", Exception);
  EXPECT_THROW(KILN_USER_ERROR() << "misuse", Exception);
}

Task gemm_task(int n) {
  te::Tensor A = te::placeholder({n, n}, DataType::Float(32), "A");
  te::Tensor B = te::placeholder({n, n}, DataType::Float(32), "B");
  return make_task({A, B, ops::matmul(A, B, "C")}, Target::host(), "matmul_" + std::to_string(n));
}

Candidate naive(const Task& task) {
  Candidate c;
  c.trace = task.fresh_schedule().trace();
  return c;
}

MeasureOptions quick(const std::string& faults) {
  MeasureOptions o;
  o.repeat = 2;
  o.min_repeat_ms = 1;
  o.timeout_s = 10;
  o.inject_faults = faults;
  return o;
}

TEST(TunerErrors, MeasurerCountsUserErrorsAndPropagatesInternalOnes) {
  Task task = gemm_task(16);
  Measurer m(task, quick("invalid@0,internal@3"));
  std::vector<MeasureResult> r = m.measure({naive(task), naive(task)});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].error, MeasureError::BuildError);
  EXPECT_NE(r[0].error_msg.find("invalid candidate"), std::string::npos) << r[0].error_msg;
  EXPECT_EQ(r[1].error, MeasureError::None) << r[1].error_msg;
  // Candidate 3 of this Measurer raises an internal error while building: the call throws it.
  EXPECT_THROW(m.measure({naive(task), naive(task)}), InternalError);
}

struct TempDb {
  fs::path dir;
  TempDb() {
    char tmpl[] = "/tmp/kiln_tuner_errors_XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~TempDb() { fs::remove_all(dir); }
  std::string path() const { return (dir / "tune.db").string(); }
};

TuneOptions tiny(const std::string& db, const std::string& faults) {
  TuneOptions o;
  o.trials = 4;
  o.batch_size = 4;
  o.early_stop_rounds = 100;
  o.seed = 3;
  o.db_path = db;
  o.timeout_s = 10;
  o.measure.repeat = 2;
  o.measure.min_repeat_ms = 1;
  o.measure.inject_faults = faults;
  o.progress = false;
  o.population = 8;
  o.generations = 1;
  return o;
}

TEST(TunerErrors, SessionRecordsAnInvalidCandidateAndFailsLoudlyOnAnInternalError) {
  Task task = gemm_task(16);
  {
    TempDb db;
    TuneResult r = tune(task, tiny(db.path(), "invalid@1"));
    EXPECT_EQ(r.trials_measured, 4);
    EXPECT_EQ(r.errors, 1);
    int build_errors = 0;
    for (const tuning_db::Record& rec : tuning_db::Database::open(db.path()).records(task.workload_key))
      if (rec.error_kind == tuning_db::ErrorKind::build_error) {
        ++build_errors;
        EXPECT_NE(rec.error_msg.find("invalid candidate"), std::string::npos) << rec.error_msg;
      }
    EXPECT_EQ(build_errors, 1);
  }
  {
    TempDb db;
    EXPECT_THROW(tune(task, tiny(db.path(), "internal@2")), InternalError);
  }
}

}  // namespace
}  // namespace kiln::tuner
