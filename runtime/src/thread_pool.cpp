// The persistent thread pool behind kiln_parallel_launch.
//
// One pool per process, created on the first parallel launch with
// kiln_num_threads() - 1 workers; the launching thread is the remaining
// participant and runs task 0 itself. Fork-join must cost well under 10 us,
// so nothing on the hot path takes a lock or makes a syscall when the
// workers are awake:
//  - each worker owns a cache line with a word (`seq`) where the launcher
//    writes the job's epoch to call it; the worker spins on it for a short
//    while after each job and then sleeps on it with a futex;
//  - tasks are claimed from a shared atomic counter, so uneven tasks balance
//    and the launcher claims tasks too;
//  - a worker *joins* the job by incrementing the active count in `state`,
//    which only succeeds while the job's epoch is current and not closed.
//    Once the launcher has claimed the last task it closes the job and waits
//    only for workers that joined. A worker the OS has not scheduled yet
//    (a loaded 2-core machine) costs nothing: it finds the job closed and
//    goes back to waiting, without touching the job.
// The launcher rewrites the job only when it is closed with no active
// worker, so the job needs no lock.
#include "kiln/runtime/c_runtime_api.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

// How long an idle thread spins before sleeping. Kernels of one model run
// back to back with short serial gaps; a spinning worker picks the next job
// up in well under a microsecond, a sleeping one needs a futex wake (~5-50 us).
constexpr std::chrono::microseconds kSpinTime{200};

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

int cores_available() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

int detect_num_threads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (*end == '\0' && n >= 1 && n <= 1024) return static_cast<int>(n);
    // A C entry point cannot throw; say so once and use the cores.
    std::fprintf(stderr, "kiln: ignoring KILN_NUM_THREADS='%s'; set it to a number from 1 to 1024\n", env);
  }
  return cores_available();
}

// True on pool workers always, and on a launching thread during its launch:
// a parallel loop inside a task then runs serially instead of deadlocking.
thread_local bool in_parallel_region = false;

// Runs one task, turning a C++ exception that escapes it into an error code:
// a body compiled from C++ must not unwind through the pool.
int32_t run_task(KilnParallelBody body, int32_t task, int32_t num_tasks, void* closure) {
  try {
    return body(task, num_tasks, closure);
  } catch (const std::exception& e) {
    kiln_set_last_error(e.what());
  } catch (...) {
    kiln_set_last_error("parallel task threw a non-standard C++ exception");
  }
  return -1;
}

int32_t run_serial(KilnParallelBody body, void* closure, int32_t num_tasks) {
  // Every task runs, as in the pool; the first failure's code and message win.
  int32_t result = 0;
  std::string error;
  for (int32_t t = 0; t < num_tasks; ++t) {
    int32_t rc = run_task(body, t, num_tasks, closure);
    if (rc != 0 && result == 0) {
      result = rc;
      error = kiln_get_last_error();
    }
  }
  if (result != 0) kiln_set_last_error(error.c_str());
  return result;
}

// Spins until pred() holds or the spin time runs out; returns pred().
template <typename Pred>
bool spin_until(Pred pred, std::chrono::microseconds budget) {
  if (pred()) return true;
  if (budget.count() == 0) return false;
  auto start = std::chrono::steady_clock::now();
  for (uint32_t i = 1;; ++i) {
    if (pred()) return true;
    cpu_relax();
    // Reading the clock costs ~20 ns: do it every 256 spins.
    if ((i & 255) == 0 && std::chrono::steady_clock::now() - start > budget) return pred();
  }
}

struct alignas(64) WorkerSlot {
  std::atomic<uint32_t> seq{0};       // epoch of the last job this worker was called to; futex word
  std::atomic<uint32_t> sleeping{0};  // 1 while the worker is (about to be) in futex_wait
};

// Job state word: epoch in the high 32 bits, then the closed bit, then the
// number of workers that joined and have not left.
constexpr uint64_t kClosed = uint64_t(1) << 31;
constexpr uint64_t kActiveMask = kClosed - 1;

struct Job {
  KilnParallelBody body = nullptr;
  void* closure = nullptr;
  int32_t num_tasks = 0;
  std::string error;  // message of the failing task; written only by the winner of `result`
  alignas(64) std::atomic<int32_t> next_task{0};
  std::atomic<int32_t> result{0};
  alignas(64) std::atomic<uint64_t> state{kClosed};
  std::atomic<uint32_t> done{0};  // bumped when the last worker leaves a closed job; futex word
  std::atomic<uint32_t> launcher_sleeping{0};
};

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /** Runs num_tasks >= 2 tasks; the caller must hold launch_mutex. */
  int32_t launch(KilnParallelBody body, void* closure, int32_t num_tasks);
  int num_threads() const { return static_cast<int>(threads_.size()) + 1; }

  std::mutex launch_mutex;

 private:
  void worker_loop(int index);
  bool try_join(uint32_t epoch);
  void leave();
  void run_tasks();
  void wait_for_workers();

  std::unique_ptr<WorkerSlot[]> slots_;
  std::vector<std::thread> threads_;
  std::chrono::microseconds spin_;
  std::atomic<bool> shutdown_{false};
  uint32_t epoch_ = 0;  // launcher-side only
  Job job_;
};

ThreadPool::ThreadPool(int num_threads) : slots_(new WorkerSlot[std::max(num_threads - 1, 1)]) {
  // More threads than cores: a spinning thread would steal the core of the
  // one doing the work, so sleep at once.
  spin_ = num_threads <= cores_available() ? kSpinTime : std::chrono::microseconds(0);
  for (int i = 0; i + 1 < num_threads; ++i) {
    try {
      threads_.emplace_back([this, i] { worker_loop(i); });
    } catch (const std::system_error&) {
      break;  // fewer threads than asked for still work; launch() uses what exists
    }
    std::string name = "kiln-worker-" + std::to_string(i + 1);
    pthread_setname_np(threads_.back().native_handle(), name.c_str());
  }
}

ThreadPool::~ThreadPool() {
  shutdown_.store(true, std::memory_order_release);
  for (size_t i = 0; i < threads_.size(); ++i) {
    slots_[i].seq.fetch_add(1);
    futex_wake_all(&slots_[i].seq);
  }
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_tasks() {
  for (;;) {
    int32_t t = job_.next_task.fetch_add(1, std::memory_order_relaxed);
    if (t >= job_.num_tasks) return;
    int32_t rc = run_task(job_.body, t, job_.num_tasks, job_.closure);
    int32_t expected = 0;
    // The message is thread-local to whoever ran the task: keep the first.
    if (rc != 0 && job_.result.compare_exchange_strong(expected, rc)) job_.error = kiln_get_last_error();
  }
}

bool ThreadPool::try_join(uint32_t epoch) {
  uint64_t s = job_.state.load(std::memory_order_acquire);
  for (;;) {
    if ((s >> 32) != epoch || (s & kClosed)) return false;  // too late: the launcher finished without us
    if (job_.state.compare_exchange_weak(s, s + 1, std::memory_order_acquire)) return true;
  }
}

void ThreadPool::leave() {
  uint64_t before = job_.state.fetch_sub(1);
  // The last worker out of a closed job releases the launcher. After the
  // fetch_sub the launcher may reuse the job: touch only these atomics (a
  // stale read just causes a spurious wake).
  if ((before & kClosed) && (before & kActiveMask) == 1) {
    job_.done.fetch_add(1);
    if (job_.launcher_sleeping.load()) futex_wake_all(&job_.done);
  }
}

void ThreadPool::worker_loop(int index) {
  in_parallel_region = true;
  WorkerSlot& slot = slots_[index];
  uint32_t seen = 0;
  for (;;) {
    auto called = [&] { return slot.seq.load(std::memory_order_acquire) != seen; };
    if (!spin_until(called, spin_)) {
      // Dekker with the launcher: it writes seq then reads sleeping; we set
      // sleeping then re-read seq, so one of us sees the other (all seq_cst).
      slot.sleeping.store(1);
      while (slot.seq.load() == seen) futex_wait(&slot.seq, seen);
      slot.sleeping.store(0);
    }
    seen = slot.seq.load(std::memory_order_acquire);
    if (shutdown_.load(std::memory_order_acquire)) return;
    if (!try_join(seen)) continue;
    run_tasks();
    leave();
  }
}

void ThreadPool::wait_for_workers() {
  // Close the job: from now on no worker joins, and we wait only for those inside.
  uint64_t s = job_.state.fetch_or(kClosed);
  auto idle = [&] { return (job_.state.load(std::memory_order_acquire) & kActiveMask) == 0; };
  if ((s & kActiveMask) == 0 || spin_until(idle, spin_)) return;
  job_.launcher_sleeping.store(1);
  for (;;) {
    uint32_t d = job_.done.load();
    if (idle()) break;
    futex_wait(&job_.done, d);
  }
  job_.launcher_sleeping.store(0);
}

int32_t ThreadPool::launch(KilnParallelBody body, void* closure, int32_t num_tasks) {
  int helpers = std::min(num_tasks, num_threads()) - 1;
  // Epoch 0 never names a job: a worker starts with seen == 0.
  if (++epoch_ == 0) epoch_ = 1;
  job_.body = body;
  job_.closure = closure;
  job_.num_tasks = num_tasks;
  job_.error.clear();
  job_.result.store(0, std::memory_order_relaxed);
  job_.next_task.store(1, std::memory_order_relaxed);
  // Opening the job publishes the fields above to any worker that joins it.
  job_.state.store(uint64_t(epoch_) << 32, std::memory_order_release);
  for (int i = 0; i < helpers; ++i) {
    // seq_cst: pairs with the worker's sleeping flag (see worker_loop).
    slots_[i].seq.store(epoch_);
    if (slots_[i].sleeping.load()) futex_wake_all(&slots_[i].seq);
  }
  int32_t rc = run_task(body, 0, num_tasks, closure);
  int32_t expected = 0;
  if (rc != 0 && job_.result.compare_exchange_strong(expected, rc)) job_.error = kiln_get_last_error();
  run_tasks();
  wait_for_workers();
  int32_t result = job_.result.load(std::memory_order_relaxed);
  if (result != 0) kiln_set_last_error(job_.error.c_str());
  return result;
}

// The process-wide pool. A forked child inherits the pointer but none of the
// threads, so the child handler drops it (leaking it on purpose: its
// destructor would join threads that do not exist) and the child builds its own.
std::atomic<ThreadPool*> global_pool{nullptr};
std::mutex global_pool_mutex;

void atfork_prepare() { global_pool_mutex.lock(); }
void atfork_parent() { global_pool_mutex.unlock(); }
void atfork_child() {
  global_pool.store(nullptr);
  global_pool_mutex.unlock();
}

// Joins the workers when the process exits or the library is unloaded, so no
// thread runs code of an unmapped library.
struct PoolReaper {
  ~PoolReaper() { delete global_pool.exchange(nullptr); }
} pool_reaper;

ThreadPool* get_pool() {
  ThreadPool* pool = global_pool.load(std::memory_order_acquire);
  if (pool) return pool;
  std::lock_guard<std::mutex> lock(global_pool_mutex);
  pool = global_pool.load(std::memory_order_acquire);
  if (!pool) {
    static bool registered = (pthread_atfork(atfork_prepare, atfork_parent, atfork_child), true);
    (void)registered;
    pool = new ThreadPool(kiln_num_threads());
    global_pool.store(pool, std::memory_order_release);
  }
  return pool;
}

}  // namespace

extern "C" {

int32_t kiln_num_threads(void) {
  static const int32_t n = detect_num_threads();
  return n;
}

int32_t kiln_parallel_launch(KilnParallelBody body, void* closure, int32_t num_tasks) {
  if (!body) {
    kiln_set_last_error("kiln_parallel_launch: null task body");
    return -1;
  }
  if (num_tasks <= 0) num_tasks = kiln_num_threads();
  if (num_tasks == 1 || in_parallel_region || kiln_num_threads() == 1) return run_serial(body, closure, num_tasks);
  ThreadPool* pool = get_pool();
  // Another thread of the program owns the pool right now: running serially
  // here uses the core that thread's workers are not using anyway.
  std::unique_lock<std::mutex> lock(pool->launch_mutex, std::try_to_lock);
  if (!lock.owns_lock() || pool->num_threads() == 1) return run_serial(body, closure, num_tasks);
  in_parallel_region = true;
  int32_t rc = pool->launch(body, closure, num_tasks);
  in_parallel_region = false;
  return rc;
}

}  // extern "C"
