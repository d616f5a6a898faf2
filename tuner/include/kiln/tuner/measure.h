/** \file
 * Measurement: candidates are built in parallel (threads) and each runs in a
 * separate worker process with a time limit, so a crash or a hang costs one
 * trial and is recorded as an error, never the session.
 */
#ifndef KILN_TUNER_MEASURE_H
#define KILN_TUNER_MEASURE_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tuner/schedule_rules.h"

namespace kiln::tuner {

enum class MeasureError { None, BuildError, RunError, Timeout, WrongResult };
const char* measure_error_name(MeasureError e);  ///< matches the tuning DB's error kinds

struct MeasureResult;

struct MeasureOptions {
  int number = 1;
  int repeat = 3;
  double min_repeat_ms = 20;
  double timeout_s = 10;  ///< per candidate run, in the worker
  int build_threads = 2;
  /**
   * Cold inputs: before each timed call, every input but the first is evicted
   * from the caches (kiln/runtime/cache_flush.h). Inside a model a layer's
   * weights were pushed out of cache by the layers before it, while its first
   * input, the activation the layer before just wrote, is still warm; a kernel
   * timed call after call on warm weights looks faster than it runs there.
   * Timings with and without it are not comparable: a session's records carry
   * it on their target facts (" [cold inputs]" after the target string), and
   * best_record prefers cold records where a workload has any.
   */
  bool cold_inputs = false;
  /**
   * With cold_inputs: each repeat's time is its fastest call rather than the
   * mean of its calls (time_evaluator_cold). On a loaded machine the mean
   * of a kernel on two threads catches every slice the scheduler takes from
   * either; one on a single thread only its own. SqueezeNet at load 12: the
   * default classifier conv measured 3.0 ms by the mean, 0.73 by the
   * fastest call and 0.80 inside the model; a single-threaded record 2.3,
   * 2.1 and 2.2. The mean ranked the record first.
   */
  bool fastest_call = false;
  /**
   * cuda tasks: run each candidate in the GPU simulator (kiln/interp) instead
   * of on the device, so a whole GPU session (search, workers, correctness
   * checks, records) runs on a machine without a GPU. The times are the
   * simulator's and say nothing of a GPU's: such sessions record on the
   * target " [simulated]", which no build ever takes a schedule from.
   */
  bool gpu_simulate = false;
  /**
   * Test hook: faults to inject, e.g. "crash@3,hang@5". The number is the
   * index of a candidate among all candidates this Measurer has measured
   * (0-based, counted across measure() calls). crash: the worker calls the
   * built kernel with null buffer pointers, so the generated code itself
   * faults (SIGSEGV). hang: the worker calls the kernel in an endless loop,
   * as a candidate that never finishes would. wrong: the candidate measures
   * normally, but check_correct sees its output corrupted (one element).
   * invalid: building the candidate throws a user error (kiln::Error), as an
   * invalid schedule does: a build_error result. internal: building it
   * throws kiln::InternalError, which measure() lets through (a kiln bug
   * fails the session loudly).
   * Indices may be ranges ("wrong@0-99"). When empty, the environment
   * variable KILN_TUNER_INJECT_FAULTS is read instead.
   */
  std::string inject_faults;
  /** If set, called after each candidate of a measure() call is done (index in the call, its result): for progress displays. */
  std::function<void(size_t, const MeasureResult&)> on_result;
};

struct MeasureResult {
  std::vector<double> run_times;  ///< seconds per call, one per repeat
  MeasureError error = MeasureError::None;
  std::string error_msg;
  double build_time = 0;
  double min_time() const;
  double median_time() const;
};

/**
 * Empty when a CUDA driver and a GPU can run candidates, else why not. Asked
 * in a worker process: the tuner forks its workers, and CUDA does not
 * survive a fork once this process has initialised it.
 */
std::string gpu_unavailable_reason();

class Measurer {
 public:
  /** Allocates the task's random inputs (and its outputs, in memory shared with the workers) once. */
  Measurer(const Task& task, const MeasureOptions& options);
  ~Measurer();
  Measurer(Measurer&&) noexcept;
  /**
   * Lowers, builds and runs each candidate (its trace must be set); one result
   * each, in order. A candidate that is invalid (a user error: kiln::Error) or
   * fails to run is a result with an error; a kiln::InternalError propagates.
   */
  std::vector<MeasureResult> measure(const std::vector<Candidate>& candidates);
  /** Runs the candidate and the unscheduled function on the same random inputs and compares outputs. */
  bool check_correct(const Candidate& c, std::string* why = nullptr);
  /** Candidates measured so far by this Measurer (the index the next one gets for inject_faults). */
  int64_t measured_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::tuner

#endif  // KILN_TUNER_MEASURE_H
