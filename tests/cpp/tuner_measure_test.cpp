// Tests of the tuner's measurement (tuner/include/kiln/tuner/measure.h):
// parallel builds, worker processes with a time limit, errors by kind, and
// the correctness check against the unscheduled function. Candidates here
// carry hand-written traces, so the tests need no search space.
#include <gtest/gtest.h>

#include <chrono>

#include "kiln/driver/build.h"
#include "kiln/ops/nn.h"
#include "kiln/support/error.h"
#include "kiln/te/workload_key.h"
#include "kiln/tuner/measure.h"

namespace kiln::tuner {
namespace {

/** A GEMM task assembled by hand (independent of make_task). */
Task gemm_task(int n) {
  te::Tensor A = te::placeholder({n, n}, DataType::Float(32), "A");
  te::Tensor B = te::placeholder({n, n}, DataType::Float(32), "B");
  te::Tensor C = ops::matmul(A, B, "C");
  Task t;
  t.args = {A, B, C};
  t.outputs = {C};
  t.target = Target::host();
  t.workload_key = te::workload_key({C});
  t.name = "matmul_" + std::to_string(n);
  t.flop = 2.0 * n * n * n;
  return t;
}

/** The trace of a tiled, vectorised (and optionally parallel) GEMM schedule. */
Candidate tiled(const Task& task, bool parallel) {
  te::Schedule s = task.fresh_schedule();
  te::Stage& c = s[task.outputs[0]];
  std::vector<IterVar> t = c.tile(c.axis("i"), c.axis("j"), 8, 16);
  c.reorder({t[0], t[1], c.axis("k"), t[2], t[3]});
  c.vectorize(t[3]);
  if (parallel) c.parallel(t[0]);
  Candidate cand;
  cand.trace = s.trace();
  return cand;
}

Candidate naive(const Task& task) {
  Candidate c;
  c.trace = task.fresh_schedule().trace();
  return c;
}

MeasureOptions quick(const std::string& faults = "") {
  MeasureOptions o;
  o.repeat = 3;
  o.min_repeat_ms = 1;
  o.timeout_s = 10;
  o.inject_faults = faults;
  return o;
}

TEST(TunerMeasure, CorrectCandidatesHaveRunTimes) {
  Task task = gemm_task(64);
  // A parallel kernel in the parent first: its thread pool exists when the
  // workers fork, and each worker must build its own.
  {
    te::Schedule s = te::Schedule::from_trace(task.outputs, tiled(task, true).trace);
    Module m = build(s, task.args, task.target, "main");
    NDArray a = NDArray::empty({64, 64}, DataType::Float(32)), b = NDArray::empty({64, 64}, DataType::Float(32)), c = NDArray::empty({64, 64}, DataType::Float(32));
    m.call("main", {a, b, c});
  }
  Measurer m(task, quick());
  std::vector<MeasureResult> r = m.measure({naive(task), tiled(task, false), tiled(task, true)});
  ASSERT_EQ(r.size(), 3u);
  for (const MeasureResult& x : r) {
    EXPECT_EQ(x.error, MeasureError::None) << x.error_msg;
    ASSERT_EQ(x.run_times.size(), 3u);
    for (double t : x.run_times) EXPECT_GT(t, 0);
    EXPECT_GT(x.build_time, 0);
    EXPECT_LE(x.min_time(), x.median_time());
  }
  EXPECT_EQ(m.measured_count(), 3);
}

TEST(TunerMeasure, ColdInputsMeasureAndStayCorrect) {
  // B is evicted before every call (A, the first input, stays warm); the
  // timings are valid and the candidate still computes the right result.
  Task task = gemm_task(64);
  MeasureOptions o = quick();
  o.cold_inputs = true;
  Measurer m(task, o);
  std::vector<MeasureResult> r = m.measure({tiled(task, false), tiled(task, true)});
  ASSERT_EQ(r.size(), 2u);
  for (const MeasureResult& x : r) {
    EXPECT_EQ(x.error, MeasureError::None) << x.error_msg;
    ASSERT_EQ(x.run_times.size(), 3u);
    for (double t : x.run_times) EXPECT_GT(t, 0);
  }
  std::string why;
  EXPECT_TRUE(m.check_correct(tiled(task, true), &why)) << why;
}

TEST(TunerMeasure, CrashIsRunErrorAndNextCandidateStillMeasures) {
  Task task = gemm_task(64);
  Measurer m(task, quick("crash@1"));
  std::vector<MeasureResult> r = m.measure({tiled(task, false), tiled(task, true), naive(task)});
  EXPECT_EQ(r[0].error, MeasureError::None) << r[0].error_msg;
  EXPECT_EQ(r[1].error, MeasureError::RunError);
  EXPECT_NE(r[1].error_msg.find("SIGSEGV"), std::string::npos) << r[1].error_msg;
  EXPECT_TRUE(r[1].run_times.empty());
  EXPECT_EQ(r[2].error, MeasureError::None) << r[2].error_msg;
  EXPECT_FALSE(r[2].run_times.empty());
  EXPECT_STREQ(measure_error_name(r[1].error), "run_error");
}

TEST(TunerMeasure, HangingCandidateTimesOut) {
  Task task = gemm_task(64);
  MeasureOptions o = quick("hang@0");
  o.timeout_s = 1;
  Measurer m(task, o);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<MeasureResult> r = m.measure({tiled(task, false)});
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r[0].error, MeasureError::Timeout) << r[0].error_msg;
  EXPECT_STREQ(measure_error_name(r[0].error), "timeout");
  EXPECT_LT(elapsed, o.timeout_s + 3.0) << "build + the time limit + slack";
  // The next candidate (index 1) measures normally.
  std::vector<MeasureResult> r2 = m.measure({tiled(task, false)});
  EXPECT_EQ(r2[0].error, MeasureError::None) << r2[0].error_msg;
}

TEST(TunerMeasure, InvalidTraceIsBuildError) {
  Task task = gemm_task(64);
  Candidate bad = naive(task);
  bad.trace.steps.push_back(te::Split{{7, "C"}, {0, "i"}, 4});  // the DAG has three stages
  Measurer m(task, quick());
  std::vector<MeasureResult> r = m.measure({bad, tiled(task, false)});
  EXPECT_EQ(r[0].error, MeasureError::BuildError);
  EXPECT_FALSE(r[0].error_msg.empty());
  EXPECT_STREQ(measure_error_name(r[0].error), "build_error");
  EXPECT_EQ(r[1].error, MeasureError::None) << r[1].error_msg;
}

TEST(TunerMeasure, CheckCorrectComparesWithTheUnscheduledFunction) {
  Task task = gemm_task(48);
  Measurer m(task, quick("wrong@1"));
  std::vector<MeasureResult> r = m.measure({tiled(task, true), tiled(task, false)});
  ASSERT_EQ(r[0].error, MeasureError::None);
  ASSERT_EQ(r[1].error, MeasureError::None) << "wrong results show only in check_correct";
  std::string why;
  EXPECT_TRUE(m.check_correct(tiled(task, true), &why)) << why;
  EXPECT_FALSE(m.check_correct(tiled(task, false), &why));
  EXPECT_NE(why.find("differ"), std::string::npos) << why;
  // A candidate not measured before is built for the check.
  Measurer fresh(task, quick());
  EXPECT_TRUE(fresh.check_correct(tiled(task, false), &why)) << why;
}

TEST(TunerMeasure, BadOptionsAndFaultSpecsAreErrors) {
  Task task = gemm_task(16);
  EXPECT_THROW(Measurer(task, quick("explode@2")), Error);
  EXPECT_THROW(Measurer(task, quick("crash@x")), Error);
  MeasureOptions o = quick();
  o.timeout_s = 0;
  EXPECT_THROW(Measurer(task, o), Error);
}

}  // namespace
}  // namespace kiln::tuner
