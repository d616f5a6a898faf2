// Measurement of candidates: parallel builds on threads, then one worker
// process per candidate, one at a time so that timings do not interfere.
// Outputs live in memory shared with the workers so that correctness runs
// can bring their results back without copying them through a pipe.
#include "kiln/tuner/measure.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <unordered_map>

#include "kiln/driver/build.h"
#include "kiln/driver/build_cuda.h"
#include "kiln/runtime/cuda.h"
#include "kiln/support/error.h"
#include "kiln/support/parallel_for.h"
#include "kiln/tuner/peer.h"  // min_of, median_of
#include "measure_worker.h"

namespace kiln::tuner {

const char* measure_error_name(MeasureError e) {
  switch (e) {
    case MeasureError::None: return "none";
    case MeasureError::BuildError: return "build_error";
    case MeasureError::RunError: return "run_error";
    case MeasureError::Timeout: return "timeout";
    case MeasureError::WrongResult: return "wrong_result";
  }
  return "none";
}

double MeasureResult::min_time() const { return min_of(run_times); }

double MeasureResult::median_time() const { return median_of(run_times); }

namespace {

using detail::Fault;
using detail::WorkerJob;
using detail::WorkerOutcome;

/** Anonymous shared memory: what a forked worker writes there, the parent sees. */
struct SharedMapping {
  explicit SharedMapping(size_t n) : bytes(std::max<size_t>(n, 1)) {
    ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    KILN_CHECK(ptr != MAP_FAILED) << "cannot map " << bytes << " bytes of shared memory for measurement outputs: " << std::strerror(errno);
  }
  ~SharedMapping() { munmap(ptr, bytes); }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  void* ptr;
  size_t bytes;
};

std::vector<int64_t> const_shape(const te::Tensor& t) {
  std::vector<int64_t> shape;
  for (const Expr& d : t.shape()) {
    const int64_t* v = as_const_int(d);
    KILN_USER_CHECK(v) << "measuring tensor '" << t.name() << "': its shape must be constant to allocate test inputs";
    shape.push_back(*v);
  }
  return shape;
}

void fill_random(const NDArray& a, std::mt19937_64& rng) {
  DataType t = a.dtype();
  int64_t n = a.numel();
  if (t == DataType::Float(32)) {
    std::uniform_real_distribution<float> d(-1, 1);
    for (int64_t i = 0; i < n; ++i) a.data_as<float>()[i] = d(rng);
  } else if (t == DataType::Float(64)) {
    std::uniform_real_distribution<double> d(-1, 1);
    for (int64_t i = 0; i < n; ++i) a.data_as<double>()[i] = d(rng);
  } else {
    // Other types get small non-negative bytes: valid for any integer width, and harmless as indices.
    auto* p = static_cast<unsigned char*>(a.data());
    int64_t bytes = a.nbytes();
    int64_t elem = dtype_storage_bytes(t);
    std::memset(p, 0, static_cast<size_t>(bytes));
    for (int64_t i = 0; i < bytes; i += elem) p[i] = static_cast<unsigned char>(rng() % 4);
  }
}

// NaN for floats, a byte pattern otherwise: an element a candidate forgets to write shows up.
void poison(const NDArray& a) {
  if (a.dtype() == DataType::Float(32)) std::fill_n(a.data_as<float>(), a.numel(), std::nanf(""));
  else std::memset(a.data(), 0xA5, static_cast<size_t>(a.nbytes()));
}

std::vector<unsigned char> snapshot(const NDArray& a) {
  auto* p = static_cast<const unsigned char*>(a.data());
  return std::vector<unsigned char>(p, p + a.nbytes());
}

/**
 * Float comparison with relative tolerance rtol; the absolute floor is rtol
 * times the mean magnitude of the reference, since reassociating a sum moves
 * its result by a fraction of its terms, not of the (possibly tiny) result.
 */
bool compare_output(const std::string& name, DataType t, const std::vector<unsigned char>& got, const std::vector<unsigned char>& want, std::string* why) {
  if (t != DataType::Float(32)) {
    if (got == want) return true;
    size_t i = 0;
    while (got[i] == want[i]) ++i;
    if (why) *why = "output '" + name + "' differs from the unscheduled function at byte " + std::to_string(i);
    return false;
  }
  const float* a = reinterpret_cast<const float*>(got.data());
  const float* b = reinterpret_cast<const float*>(want.data());
  size_t n = got.size() / sizeof(float);
  double mean_abs = 0;
  for (size_t i = 0; i < n; ++i) mean_abs += std::isfinite(b[i]) ? std::fabs(b[i]) : 0;
  mean_abs /= std::max<size_t>(n, 1);
  const double rtol = 1e-3, atol = rtol * mean_abs + 1e-30;
  size_t bad = 0, worst = 0;
  double worst_err = -1;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    double err = std::fabs(double(a[i]) - double(b[i]));
    bool ok = std::isfinite(err) ? err <= rtol * std::fabs(b[i]) + atol : a[i] == b[i];
    if (ok) continue;
    ++bad;
    if (!(err <= worst_err)) worst_err = err, worst = i;
  }
  if (bad == 0) return true;
  if (why) {
    std::ostringstream os;
    os << "output '" << name << "': " << bad << " of " << n << " elements differ from the unscheduled function (relative tolerance " << rtol
       << "); e.g. element " << worst << " is " << a[worst] << ", expected " << b[worst];
    *why = os.str();
  }
  return false;
}

struct Built {
  Module mod;
  std::shared_ptr<CudaModule> gpu;  ///< a cuda task's candidate (mod stays empty)
  MeasureError error = MeasureError::None;
  std::string msg;
  double build_time = 0;
  /** An internal error (or any non-kiln exception) of the build: rethrown on the calling thread. */
  std::exception_ptr failure;
};

/**
 * Builds one candidate. A user error (an invalid schedule: kiln::Error that
 * is not internal) makes it a build_error, counted and recorded like any
 * failed trial; a kiln::InternalError is a bug in kiln, not in the candidate,
 * and is kept in `failure` to fail the session loudly (build_all runs on
 * threads, where it cannot propagate by itself).
 */
Built build_one(const Task& task, const te::Trace& trace, Fault fault = Fault::None, bool nvrtc = true) {
  Built b;
  auto t0 = std::chrono::steady_clock::now();
  try {
    if (fault == Fault::Invalid) KILN_USER_ERROR() << "fault injection: an invalid candidate (a user error while building it)";
    if (fault == Fault::Internal) throw InternalError("fault injection: an internal error while building the candidate");
    te::Schedule s = te::Schedule::from_trace(task.outputs, trace);
    if (task.target.kind == Target::Kind::CUDA) b.gpu = std::make_shared<CudaModule>(build_cuda(s, task.args, task.target, "main", {}, nvrtc));
    else b.mod = build(s, task.args, task.target, "main");
  } catch (const Error& e) {
    b.error = MeasureError::BuildError;
    b.msg = e.what();
  } catch (const InternalError& e) {
    // Caught on purpose, to keep it: a kiln bug fails the session (below the
    // build threads), with the message also on the trial.
    b.failure = std::current_exception();
    b.error = MeasureError::BuildError;
    b.msg = e.what();
  } catch (...) {
    b.failure = std::current_exception();
  }
  b.build_time = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return b;
}

// A GPU candidate in the worker: on the device (CUDA events), or in the
// simulator (gpu_simulate; wall time per simulated call). The faults act as
// on the CPU: a crash, a hang, a corrupted output on a correctness run.
std::vector<double> run_gpu(const CudaModule& m, const std::vector<NDArray>& arrays, const WorkerJob& job, bool simulate) {
  if (job.fault == Fault::Crash) raise(SIGSEGV);
  if (job.fault == Fault::Hang)
    for (;;) pause();
  std::vector<Arg> args(arrays.begin(), arrays.end());
  std::vector<double> times;
  if (!job.time) {
    if (simulate) m.simulate(args);
    else m.run(args);
    if (job.fault == Fault::Wrong) detail::corrupt_output(arrays.back());
  } else if (!simulate) {
    times = m.time(args, job.number, job.repeat);
  } else {
    for (int r = 0; r < job.repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      m.simulate(args);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return times;
}

}  // namespace

struct Measurer::Impl {
  Task task;
  MeasureOptions opts;
  detail::FaultPlan faults;
  std::vector<NDArray> arrays;  ///< one per task arg, in call order
  std::vector<size_t> outputs;  ///< indices of the computed args (in shared memory)
  std::vector<std::unique_ptr<SharedMapping>> mappings;
  int64_t counter = 0;
  bool have_reference = false;
  std::vector<std::vector<unsigned char>> reference;
  /** The last batch's built modules and measured indices, by trace JSON: check_correct reuses them. */
  std::unordered_map<std::string, std::pair<Built, int64_t>> recent;

  bool gpu() const { return task.target.kind == Target::Kind::CUDA; }
  std::vector<Built> build_all(const std::vector<Candidate>& cs) const;
  /** Runs the built kernel in a worker (timed by `job`, or once). */
  WorkerOutcome run(const Built& b, const WorkerJob& job, double timeout_s) const {
    if (!b.gpu) return detail::run_in_worker(b.mod, arrays, job, timeout_s);
    return detail::run_in_worker([&] { return run_gpu(*b.gpu, arrays, job, opts.gpu_simulate); }, timeout_s);
  }
  /** Runs the kernel once on the arrays with outputs poisoned first; returns the outputs. */
  WorkerOutcome run_once(const Built& b, Fault fault, double timeout_s, std::vector<std::vector<unsigned char>>* outs) const;
  void ensure_reference();
  /** The inputs evicted before each call under cold_inputs: every input but the first. */
  std::vector<size_t> cold_args() const {
    std::vector<size_t> out;
    bool first = true;
    for (size_t i = 0; i < arrays.size(); ++i) {
      if (std::find(outputs.begin(), outputs.end(), i) != outputs.end()) continue;
      if (!first) out.push_back(i);
      first = false;
    }
    return out;
  }
};

std::vector<Built> Measurer::Impl::build_all(const std::vector<Candidate>& cs) const {
  std::vector<Built> out(cs.size());
  parallel_for(cs.size(), opts.build_threads, [&](size_t i) {
    out[i] = build_one(task, cs[i].trace, faults.at(counter + static_cast<int64_t>(i)), !opts.gpu_simulate);
  });
  for (const Built& b : out)
    if (b.failure) std::rethrow_exception(b.failure);
  return out;
}

WorkerOutcome Measurer::Impl::run_once(const Built& b, Fault fault, double timeout_s, std::vector<std::vector<unsigned char>>* outs) const {
  for (size_t i : outputs) poison(arrays[i]);
  WorkerJob job;
  job.time = false;
  job.fault = fault;
  WorkerOutcome r = run(b, job, timeout_s);
  outs->clear();
  for (size_t i : outputs) outs->push_back(snapshot(arrays[i]));
  return r;
}

void Measurer::Impl::ensure_reference() {
  if (have_reference) return;
  // The unscheduled function on the host CPU (for a GPU task too: it has no thread bindings).
  Task host = task;
  host.target = gpu() ? Target::host() : task.target;
  Built ref = build_one(host, task.fresh_schedule().trace());
  if (ref.failure) std::rethrow_exception(ref.failure);
  KILN_USER_CHECK(ref.error == MeasureError::None) << "check_correct on task '" << task.name << "': the unscheduled function does not build: " << ref.msg;
  // The unscheduled loop nest is slow; give it ample time, it runs once per task.
  WorkerOutcome r = run_once(ref, Fault::None, std::max(120.0, 10 * opts.timeout_s), &reference);
  KILN_USER_CHECK(r.error == MeasureError::None) << "check_correct on task '" << task.name << "': the unscheduled function failed (" << measure_error_name(r.error) << "): " << r.msg;
  have_reference = true;
}

Measurer::Measurer(const Task& task, const MeasureOptions& options) : impl_(std::make_unique<Impl>()) {
  KILN_USER_CHECK(options.number >= 1 && options.repeat >= 1 && options.min_repeat_ms >= 0 && options.timeout_s > 0)
      << "MeasureOptions: number (" << options.number << ") and repeat (" << options.repeat << ") must be at least 1, min_repeat_ms (" << options.min_repeat_ms
      << ") at least 0 and timeout_s (" << options.timeout_s << ") positive";
  KILN_USER_CHECK(!task.args.empty() && !task.outputs.empty()) << "Measurer: task '" << task.name << "' has no arguments or no outputs; build it with make_task";
  impl_->task = task;
  impl_->opts = options;
  std::string spec = options.inject_faults;
  if (spec.empty()) {
    const char* env = std::getenv("KILN_TUNER_INJECT_FAULTS");
    if (env) spec = env;
  }
  impl_->faults = detail::FaultPlan(spec);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i < task.args.size(); ++i) {
    const te::Tensor& t = task.args[i];
    std::vector<int64_t> shape = const_shape(t);
    if (t.op()->kind == te::OpKind::Compute) {
      int64_t bytes = dtype_storage_bytes(t.dtype());
      for (int64_t d : shape) bytes *= d;
      impl_->mappings.push_back(std::make_unique<SharedMapping>(static_cast<size_t>(bytes)));
      impl_->arrays.push_back(NDArray::wrap(impl_->mappings.back()->ptr, shape, t.dtype()));
      impl_->outputs.push_back(i);
    } else {
      impl_->arrays.push_back(NDArray::empty(shape, t.dtype()));
      fill_random(impl_->arrays.back(), rng);
    }
  }
}

Measurer::~Measurer() = default;
Measurer::Measurer(Measurer&&) noexcept = default;

int64_t Measurer::measured_count() const { return impl_->counter; }

std::vector<MeasureResult> Measurer::measure(const std::vector<Candidate>& candidates) {
  std::vector<Built> built = impl_->build_all(candidates);
  impl_->recent.clear();
  std::vector<MeasureResult> results(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    int64_t index = impl_->counter++;
    MeasureResult& r = results[i];
    r.build_time = built[i].build_time;
    if (built[i].error != MeasureError::None) {
      r.error = built[i].error;
      r.error_msg = built[i].msg;
      if (impl_->opts.on_result) impl_->opts.on_result(i, r);
      continue;
    }
    WorkerJob job;
    job.number = impl_->opts.number;
    job.repeat = impl_->opts.repeat;
    job.min_repeat_ms = impl_->opts.min_repeat_ms;
    if (impl_->opts.cold_inputs) job.flush_args = impl_->cold_args();
    job.fastest_call = impl_->opts.fastest_call;
    job.fault = impl_->faults.at(index);
    if (job.fault == Fault::Wrong) job.fault = Fault::None;  // wrong results show in check_correct only
    WorkerOutcome o = impl_->run(built[i], job, impl_->opts.timeout_s);
    r.error = o.error;
    r.error_msg = o.msg;
    r.run_times = o.times;
    if (r.error == MeasureError::None) impl_->recent[candidates[i].trace.to_json()] = {built[i], index};
    built[i] = Built();  // the JIT code goes with the last handle
    if (impl_->opts.on_result) impl_->opts.on_result(i, r);
  }
  return results;
}

std::string gpu_unavailable_reason() {
  WorkerOutcome o = detail::run_in_worker([] {
    std::string why = cuda::driver_unavailable_reason();
    KILN_USER_CHECK(why.empty()) << why;
    return std::vector<double>{};
  }, 60);
  return o.error == MeasureError::None ? "" : o.msg;
}

bool Measurer::check_correct(const Candidate& c, std::string* why) {
  impl_->ensure_reference();
  Built b;
  Fault fault = Fault::None;
  auto it = impl_->recent.find(c.trace.to_json());
  if (it != impl_->recent.end()) {
    b = it->second.first;
    fault = impl_->faults.at(it->second.second) == Fault::Wrong ? Fault::Wrong : Fault::None;
  } else {
    b = build_one(impl_->task, c.trace, Fault::None, !impl_->opts.gpu_simulate);
    if (b.failure) std::rethrow_exception(b.failure);
    if (b.error != MeasureError::None) {
      if (why) *why = "the candidate does not build: " + b.msg;
      return false;
    }
  }
  std::vector<std::vector<unsigned char>> outs;
  WorkerOutcome r = impl_->run_once(b, fault, impl_->opts.timeout_s, &outs);
  if (r.error != MeasureError::None) {
    if (why) *why = std::string("the candidate failed (") + measure_error_name(r.error) + "): " + r.msg;
    return false;
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    const te::Tensor& t = impl_->task.args[impl_->outputs[k]];
    if (!compare_output(t.name(), t.dtype(), outs[k], impl_->reference[k], why)) return false;
  }
  return true;
}

}  // namespace kiln::tuner
