/** \file
 * Private to measure*.cpp: running a built kernel in a forked worker process
 * with a time limit, and the fault-injection test hook.
 */
#ifndef KILN_TUNER_SRC_MEASURE_WORKER_H
#define KILN_TUNER_SRC_MEASURE_WORKER_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/runtime/module.h"
#include "kiln/tuner/measure.h"

namespace kiln::tuner::detail {

/** A fault the test hook injects into one worker (see MeasureOptions::inject_faults). */
enum class Fault { None, Crash, Hang, Wrong, Invalid, Internal };

/** Parsed "kind@i,kind@a-b,..." specification. */
class FaultPlan {
 public:
  FaultPlan() = default;
  /** Throws kiln::Error naming the bad item and the accepted form. */
  explicit FaultPlan(const std::string& spec);
  Fault at(int64_t index) const;
  bool empty() const { return items_.empty(); }

 private:
  struct Item {
    Fault fault;
    int64_t first, last;
  };
  std::vector<Item> items_;
};

/** What a worker is asked to do with the kernel "main" of a module. */
struct WorkerJob {
  bool time = true;  ///< time it (time_evaluator); false: call it once (correctness runs)
  int number = 1, repeat = 3;
  double min_repeat_ms = 0;
  /** Arguments evicted from the caches before each timed call (MeasureOptions::cold_inputs); empty: warm timing. */
  std::vector<size_t> flush_args;
  bool fastest_call = false;  ///< with flush_args: each repeat's fastest call, not its mean (MeasureOptions::fastest_call)
  Fault fault = Fault::None;
};

struct WorkerOutcome {
  MeasureError error = MeasureError::None;  ///< None, RunError or Timeout
  std::string msg;
  std::vector<double> times;  ///< time jobs: seconds per call, one per repeat
};

/**
 * Forks; the child runs `job` on `args` (the kernel's arguments in call
 * order: its writes to memory shared with the parent come back, the rest stay
 * in the child's copy) and sends the outcome through a pipe. The parent waits
 * at most timeout_s, then kills the child (SIGKILL). Never throws for what
 * the child does; a child killed by a signal is a RunError naming it.
 */
WorkerOutcome run_in_worker(const Module& mod, const std::vector<NDArray>& args, const WorkerJob& job, double timeout_s);

/** The Wrong fault: the output's first element corrupted by a clear margin. */
void corrupt_output(const NDArray& out);

/** What a worker runs: seconds per call (empty for a correctness run); throws kiln::Error for a failed run. */
using WorkerBody = std::function<std::vector<double>()>;
/** The same for any body (GPU kernels: the child is the first process to touch the CUDA driver). */
WorkerOutcome run_in_worker(const WorkerBody& body, double timeout_s);

}  // namespace kiln::tuner::detail

#endif  // KILN_TUNER_SRC_MEASURE_WORKER_H
