// Worker processes for measurement. The tuner forks after the JIT build, so
// the child already has the machine code and the input arrays (copy-on-write)
// and needs no IPC for them; only the timings travel back, through a pipe.
// A child that crashes or hangs costs one trial, never the session.
#include "measure_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "kiln/runtime/cache_flush.h"
#include "kiln/support/error.h"

namespace kiln::tuner::detail {

// ---------------------------------------------------------------- faults

FaultPlan::FaultPlan(const std::string& spec) {
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t at = item.find('@');
    std::string kind = item.substr(0, at);
    Fault f = kind == "crash"      ? Fault::Crash
              : kind == "hang"     ? Fault::Hang
              : kind == "wrong"    ? Fault::Wrong
              : kind == "invalid"  ? Fault::Invalid
              : kind == "internal" ? Fault::Internal
                                   : Fault::None;
    KILN_USER_CHECK(at != std::string::npos && f != Fault::None)
        << "fault injection: bad item '" << item << "' in '" << spec << "'; expected crash@I, hang@I, wrong@I, invalid@I or internal@I (I an index or a range A-B)";
    std::string range = item.substr(at + 1);
    size_t dash = range.find('-');
    try {
      int64_t first = std::stoll(range.substr(0, dash));
      int64_t last = dash == std::string::npos ? first : std::stoll(range.substr(dash + 1));
      items_.push_back({f, first, last});
    } catch (const std::exception&) {
      KILN_USER_ERROR() << "fault injection: bad index '" << range << "' in '" << spec << "'; expected a number or a range A-B";
    }
  }
}

Fault FaultPlan::at(int64_t index) const {
  for (const Item& it : items_)
    if (index >= it.first && index <= it.last) return it.fault;
  return Fault::None;
}

// ---------------------------------------------------------------- child side

void corrupt_output(const NDArray& out) {
  if (out.dtype() == DataType::Float(32)) out.data_as<float>()[0] += 1.0f + std::fabs(out.data_as<float>()[0]);
  else static_cast<unsigned char*>(out.data())[0] ^= 0xFF;
}

namespace {

void write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent is gone or gave up: nothing to report to
    done += static_cast<size_t>(n);
  }
}

std::vector<void*> data_pointers(const std::vector<NDArray>& args) {
  std::vector<void*> out;
  for (const NDArray& a : args) out.push_back(a.data());
  return out;
}

// The job on a CPU module: its seconds per call (none for a single call).
std::vector<double> run_job(const Module& mod, const std::vector<NDArray>& args, const WorkerJob& job) {
  KilnKernel kernel = mod.get_kernel("main");
  if (job.fault == Fault::Crash) {
    // Null buffers: the generated code itself faults on its first access.
    std::vector<void*> null_args(args.size(), nullptr);
    kernel(null_args.data());
    raise(SIGSEGV);  // a kernel that touches no buffer still crashes as asked
  }
  if (job.fault == Fault::Hang) {
    std::vector<void*> ptrs = data_pointers(args);
    for (;;) kernel(ptrs.data());
  }
  std::vector<Arg> call_args(args.begin(), args.end());
  std::vector<double> times;
  if (job.time && !job.flush_args.empty()) {
    times = time_evaluator_cold(mod, "main", call_args, job.flush_args, job.number, job.repeat, job.min_repeat_ms, job.fastest_call).results;
  } else if (job.time) {
    times = mod.time_evaluator("main", call_args, job.number, job.repeat, job.min_repeat_ms).results;
  } else {
    mod.call("main", call_args);
    if (job.fault == Fault::Wrong) corrupt_output(args.back());  // the last argument is an output
  }
  return times;
}

// The message is 'T' + int32 count + doubles on success, 'E' + text on a user
// error or a failed run, 'I' + text on a kiln::InternalError (the parent rethrows it).
std::string times_message(const std::vector<double>& times) {
  std::string msg = "T";
  int32_t n = static_cast<int32_t>(times.size());
  msg.append(reinterpret_cast<const char*>(&n), sizeof(n));
  msg.append(reinterpret_cast<const char*>(times.data()), times.size() * sizeof(double));
  return msg;
}

[[noreturn]] void worker_main(int fd, pid_t parent, const WorkerBody& body) {
  // Die with the tuner: a hung worker must not outlive a killed session.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(4);
  // A crashing candidate is an expected outcome here: no core file for it,
  // and no crash handler of the host (Python's faulthandler) runs in the
  // worker: the fault kills it plainly and the parent names the signal.
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, SIG_DFL);
  std::string msg;
  int code = 0;
  try {
    msg = times_message(body());
  } catch (const InternalError& e) {
    // Caught on purpose, so that the worker always answers: the parent learns
    // it was a kiln bug ('I') and raises it as one, where a user error or a
    // crash ('E', a signal) costs one error trial.
    msg = std::string("I") + e.what();
    code = 3;
  } catch (const std::exception& e) {
    msg = std::string("E") + e.what();  // a user error (or another exception): an error trial
    code = 3;
  }
  write_all(fd, msg);
  // _exit: no atexit handlers or static destructors of the parent's state run here.
  _exit(code);
}

// ---------------------------------------------------------------- parent side

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  std::string name = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
  const char* desc = strsignal(sig);
  if (desc) name += std::string(" (") + desc + ")";
  return name;
}

using Clock = std::chrono::steady_clock;

// Reads the child's message until EOF or the deadline; false on timeout.
bool read_until_eof(int fd, Clock::time_point deadline, std::string* out) {
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;  // poll timed out: re-check the deadline
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;  // EOF (or a broken pipe): the child is done with it
    out->append(buf, static_cast<size_t>(n));
  }
}

// Waits for the child to exit until the deadline; false when it is still running.
bool wait_until(pid_t pid, Clock::time_point deadline, int* status) {
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return true;  // not our child any more: nothing to wait for
    if (Clock::now() >= deadline) return false;
    usleep(1000);
  }
}

WorkerOutcome interpret(const std::string& msg, int status) {
  WorkerOutcome out;
  if (WIFSIGNALED(status)) {
    out.error = MeasureError::RunError;
    out.msg = "the worker was killed by " + signal_name(WTERMSIG(status));
    return out;
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  // A kiln bug in the worker is not the candidate's fault: it fails the session loudly.
  if (!msg.empty() && msg[0] == 'I') throw InternalError("in a measurement worker: " + msg.substr(1));
  if (!msg.empty() && msg[0] == 'E') {
    out.error = MeasureError::RunError;
    out.msg = msg.substr(1);
    return out;
  }
  if (code != 0 || msg.size() < 1 + sizeof(int32_t) || msg[0] != 'T') {
    out.error = MeasureError::RunError;
    out.msg = "the worker exited with status " + std::to_string(code) + " without a result";
    return out;
  }
  int32_t n = 0;
  std::memcpy(&n, msg.data() + 1, sizeof(n));
  if (n < 0 || msg.size() != 1 + sizeof(n) + size_t(n) * sizeof(double)) {
    out.error = MeasureError::RunError;
    out.msg = "the worker sent a malformed result";
    return out;
  }
  out.times.resize(static_cast<size_t>(n));
  std::memcpy(out.times.data(), msg.data() + 1 + sizeof(n), size_t(n) * sizeof(double));
  return out;
}

}  // namespace

WorkerOutcome run_in_worker(const Module& mod, const std::vector<NDArray>& args, const WorkerJob& job, double timeout_s) {
  return run_in_worker([&] { return run_job(mod, args, job); }, timeout_s);
}

WorkerOutcome run_in_worker(const WorkerBody& body, double timeout_s) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {MeasureError::RunError, std::string("cannot create a pipe: ") + std::strerror(errno), {}};
  pid_t parent = getpid();
  auto start = Clock::now();
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    return {MeasureError::RunError, std::string("cannot fork a worker: ") + std::strerror(err), {}};
  }
  if (pid == 0) {
    close(fds[0]);
    worker_main(fds[1], parent, body);
  }
  close(fds[1]);
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::string msg;
  int status = 0;
  bool finished = read_until_eof(fds[0], deadline, &msg) && wait_until(pid, deadline, &status);
  close(fds[0]);
  if (!finished) {
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::ostringstream os;
    os << "no result within the time limit of " << timeout_s << " s; the worker was killed";
    return {MeasureError::Timeout, os.str(), {}};
  }
  return interpret(msg, status);
}

}  // namespace kiln::tuner::detail
