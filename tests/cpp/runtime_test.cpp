// Tests of kiln_runtime: the C runtime API (thread pool, workspace, errors),
// NDArray and Module.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "kiln/runtime/c_runtime_api.h"
#include "kiln/runtime/cache_flush.h"
#include "kiln/runtime/library_seal.h"
#include "kiln/runtime/module.h"
#include "kiln/runtime/ndarray.h"
#include "kiln/support/error.h"

namespace kiln {
namespace {

// Expects `fn` to throw kiln::Error whose message contains every fragment.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error containing '" << *fragments.begin() << "'";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "message: " << msg << "\nmissing: " << f;
  }
}

// ----------------------------------------------------------- thread pool

struct Counts {
  std::vector<std::atomic<int>> hits;
  std::atomic<int> seen_num_tasks{-1};
  explicit Counts(int n) : hits(n) {}
};

int32_t count_task(int32_t task, int32_t num_tasks, void* closure) {
  auto* c = static_cast<Counts*>(closure);
  c->hits[task].fetch_add(1);
  c->seen_num_tasks.store(num_tasks);
  return 0;
}

TEST(ParallelLaunch, RunsEveryTaskExactlyOnce) {
  for (int n : {1, 2, 3, 7, 64, 1000}) {
    Counts c(n);
    ASSERT_EQ(kiln_parallel_launch(count_task, &c, n), 0);
    EXPECT_EQ(c.seen_num_tasks.load(), n);
    for (int t = 0; t < n; ++t) EXPECT_EQ(c.hits[t].load(), 1) << "task " << t << " of " << n;
  }
}

TEST(ParallelLaunch, DefaultTaskCountIsThreadCount) {
  int threads = kiln_num_threads();
  ASSERT_GE(threads, 1);
  Counts c(threads);
  ASSERT_EQ(kiln_parallel_launch(count_task, &c, 0), 0);
  EXPECT_EQ(c.seen_num_tasks.load(), threads);
  for (int t = 0; t < threads; ++t) EXPECT_EQ(c.hits[t].load(), 1);
}

int32_t sum_task(int32_t task, int32_t num_tasks, void* closure) {
  static_cast<std::atomic<int64_t>*>(closure)->fetch_add(task + 1);
  return 0;
}

TEST(ParallelLaunch, SumsCorrectlyAcrossManyLaunches) {
  std::atomic<int64_t> sum{0};
  int64_t expected = 0;
  for (int i = 0; i < 20000; ++i) {
    int n = 1 + i % 9;
    ASSERT_EQ(kiln_parallel_launch(sum_task, &sum, n), 0);
    expected += int64_t(n) * (n + 1) / 2;
  }
  EXPECT_EQ(sum.load(), expected);
}

TEST(ParallelLaunch, SurvivesSleepingWorkers) {
  // Long gaps let the workers fall asleep on the futex; each launch must wake them.
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    Counts c(4);
    ASSERT_EQ(kiln_parallel_launch(count_task, &c, 4), 0);
    for (int t = 0; t < 4; ++t) EXPECT_EQ(c.hits[t].load(), 1);
  }
}

// Task 0 (always run by the launcher) waits for task 1, which therefore must
// run on a pool worker at the same time.
int32_t rendezvous_task(int32_t task, int32_t num_tasks, void* closure) {
  auto* flag = static_cast<std::atomic<bool>*>(closure);
  if (task == 1) {
    flag->store(true);
    return 0;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!flag->load()) {
    if (std::chrono::steady_clock::now() > deadline) return 1;
    std::this_thread::yield();
  }
  return 0;
}

TEST(ParallelLaunch, TasksRunConcurrentlyOnWorkers) {
  if (kiln_num_threads() < 2) GTEST_SKIP() << "one thread: parallel loops run serially";
  std::atomic<bool> flag{false};
  EXPECT_EQ(kiln_parallel_launch(rendezvous_task, &flag, 2), 0) << "task 1 never ran beside task 0";
}

struct NestedState {
  std::mutex mu;
  std::map<int, std::set<std::thread::id>> inner_threads;  // outer task -> threads of its inner tasks
  std::atomic<int> inner_runs{0};
};

struct InnerClosure {
  NestedState* state;
  int outer;
};

int32_t inner_task(int32_t task, int32_t num_tasks, void* closure) {
  auto* ic = static_cast<InnerClosure*>(closure);
  std::lock_guard<std::mutex> lock(ic->state->mu);
  ic->state->inner_threads[ic->outer].insert(std::this_thread::get_id());
  ic->state->inner_runs.fetch_add(1);
  return 0;
}

int32_t outer_task(int32_t task, int32_t num_tasks, void* closure) {
  InnerClosure ic{static_cast<NestedState*>(closure), task};
  {
    std::lock_guard<std::mutex> lock(ic.state->mu);
    ic.state->inner_threads[task];  // the outer thread is recorded below
  }
  int32_t rc = kiln_parallel_launch(inner_task, &ic, 8);
  std::lock_guard<std::mutex> lock(ic.state->mu);
  // A nested launch runs serially: all inner tasks on this very thread.
  return rc == 0 && ic.state->inner_threads[task] == std::set<std::thread::id>{std::this_thread::get_id()} ? 0 : 1;
}

TEST(ParallelLaunch, NestedLaunchRunsSeriallyOnTheCallingThread) {
  NestedState s;
  ASSERT_EQ(kiln_parallel_launch(outer_task, &s, 4), 0);
  EXPECT_EQ(s.inner_runs.load(), 32);
  EXPECT_EQ(s.inner_threads.size(), 4u);
}

int32_t failing_task(int32_t task, int32_t num_tasks, void* closure) {
  static_cast<std::atomic<int>*>(closure)->fetch_add(1);
  if (task == 0) return 0;
  kiln_set_last_error(("task " + std::to_string(task) + " failed").c_str());
  return 100 + task;
}

TEST(ParallelLaunch, PropagatesTheFirstErrorAndItsMessage) {
  for (int n : {2, 3, 16}) {
    std::atomic<int> ran{0};
    kiln_set_last_error("");
    int32_t rc = kiln_parallel_launch(failing_task, &ran, n);
    EXPECT_EQ(ran.load(), n) << "every task still runs";
    ASSERT_GE(rc, 101);
    ASSERT_LT(rc, 100 + n);
    // The message comes from the task that produced the code, even when a
    // worker thread ran it (the last error is thread-local).
    EXPECT_EQ(std::string(kiln_get_last_error()), "task " + std::to_string(rc - 100) + " failed");
  }
}

int32_t throwing_task(int32_t task, int32_t num_tasks, void* closure) {
  if (task == 1) throw std::runtime_error("boom in task 1");
  return 0;
}

TEST(ParallelLaunch, ExceptionInATaskBecomesAnErrorCode) {
  EXPECT_NE(kiln_parallel_launch(throwing_task, nullptr, 4), 0);
  EXPECT_STREQ(kiln_get_last_error(), "boom in task 1");
}

TEST(ParallelLaunch, NullBodyIsAnError) {
  EXPECT_NE(kiln_parallel_launch(nullptr, nullptr, 4), 0);
  EXPECT_NE(std::string(kiln_get_last_error()).find("null"), std::string::npos);
}

TEST(ParallelLaunch, ConcurrentLaunchersFromUserThreads) {
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> users;
  for (int u = 0; u < 3; ++u) {
    users.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) kiln_parallel_launch(sum_task, &sum, 4);
    });
  }
  for (auto& t : users) t.join();
  EXPECT_EQ(sum.load(), 3 * 2000 * 10);
}

TEST(ParallelLaunch, WorksInAForkedChild) {
  std::atomic<int64_t> sum{0};
  ASSERT_EQ(kiln_parallel_launch(sum_task, &sum, 4), 0);  // the parent's pool exists
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<int64_t> child_sum{0};
    bool ok = true;
    for (int i = 0; i < 100; ++i) ok = ok && kiln_parallel_launch(sum_task, &child_sum, 4) == 0;
    _exit(ok && child_sum.load() == 1000 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

int32_t empty_task(int32_t, int32_t, void*) { return 0; }

TEST(ParallelLaunch, ReportsForkJoinOverhead) {
  // Printed, not asserted: timing depends on the machine's load.
  for (int i = 0; i < 1000; ++i) kiln_parallel_launch(empty_task, nullptr, 0);
  const int kLaunches = 20000;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kLaunches; ++i) ASSERT_EQ(kiln_parallel_launch(empty_task, nullptr, 0), 0);
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kLaunches;
  std::printf("[ info ] fork-join overhead: %.3f us per launch with %d threads\n", us, kiln_num_threads());
  EXPECT_GT(us, 0);
}

// ------------------------------------------------------- workspace, errors

TEST(Workspace, IsAlignedAndFreeable) {
  for (int64_t n : {0, 1, 63, 64, 65, 1 << 20}) {
    void* p = kiln_alloc_workspace(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    std::memset(p, 0xab, static_cast<size_t>(n));
    kiln_free_workspace(p);
  }
  EXPECT_EQ(kiln_alloc_workspace(-5), nullptr);
  EXPECT_NE(std::string(kiln_get_last_error()).find("negative"), std::string::npos);
}

TEST(LastError, IsThreadLocal) {
  kiln_set_last_error("main thread error");
  std::string other;
  std::thread([&] { other = kiln_get_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_STREQ(kiln_get_last_error(), "main thread error");
  kiln_set_last_error(nullptr);
  EXPECT_STREQ(kiln_get_last_error(), "");
}

// ----------------------------------------------------------------- NDArray

TEST(NDArray, EmptyIsAlignedCompactAndOwned) {
  for (auto shape : std::vector<std::vector<int64_t>>{{}, {1}, {3}, {5, 7}, {2, 3, 4}, {0, 4}}) {
    NDArray a = NDArray::empty(shape, DataType::Float(32));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    EXPECT_NE(a.data(), nullptr) << "even an empty array has a real pointer";
    EXPECT_EQ(a.shape(), shape);
    EXPECT_EQ(a.ndim(), static_cast<int>(shape.size()));
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    EXPECT_EQ(a.numel(), numel);
    EXPECT_EQ(a.nbytes(), numel * 4);
    EXPECT_TRUE(a.is_contiguous());
    EXPECT_TRUE(a.strides().empty());
    EXPECT_TRUE(a.owns_data());
    EXPECT_EQ(a.dtype(), DataType::Float(32));
    EXPECT_EQ(a.device().device_type, kDLCPU);
    EXPECT_EQ(a.dltensor().dtype.code, kDLFloat);
  }
  expect_error([] { NDArray::empty({2, -1}, DataType::Float(32)); }, {"[2, -1]", "negative"});
}

// The VmFlags of the mapping that holds `addr` in /proc/self/smaps ("" where not found).
std::string vm_flags_at(uintptr_t addr) {
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < line.find(' ')) inside = lo <= addr && addr < hi;
    else if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

// A large array is advised to take transparent huge pages, as numpy's are
// (the peers' arrays in every benchmark): "hg" in its mapping's VmFlags.
TEST(NDArray, LargeArraysAreAdvisedHugePages) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "no transparent huge pages in this kernel";
  NDArray big = NDArray::empty({8 << 20}, DataType::Float(32));  // 32 MiB
  std::string flags = vm_flags_at(reinterpret_cast<uintptr_t>(big.data()) + (16 << 20));
  ASSERT_FALSE(flags.empty()) << "no mapping of the array in /proc/self/smaps";
  EXPECT_NE((flags + " ").find(" hg "), std::string::npos) << flags;
}

TEST(NDArray, CopyInAndOut) {
  NDArray a = NDArray::empty({2, 3}, DataType::Int(32));
  std::vector<int32_t> in{1, 2, 3, 4, 5, 6}, out(6);
  a.copy_from(in.data(), 24);
  EXPECT_EQ(a.data_as<int32_t>()[4], 5);
  a.copy_to(out.data(), 24);
  EXPECT_EQ(out, in);
  NDArray b = NDArray::empty({2, 3}, DataType::Int(32));
  b.copy_from(a);
  EXPECT_EQ(b.data_as<int32_t>()[5], 6);
  expect_error([&] { a.copy_from(in.data(), 20); }, {"20 bytes", "24"});
  expect_error([&] { b.copy_from(NDArray::empty({3, 2}, DataType::Int(32))); }, {"[3, 2]", "[2, 3]"});
}

TEST(NDArray, CopiesShareMemory) {
  NDArray a = NDArray::empty({4}, DataType::Float(64));
  NDArray b = a;
  EXPECT_EQ(a.data(), b.data());
  EXPECT_EQ(a.use_count(), 2);
  a.data_as<double>()[0] = 2.5;
  EXPECT_EQ(b.data_as<double>()[0], 2.5);
}

TEST(NDArray, NullArrayThrows) {
  NDArray a;
  EXPECT_FALSE(a.defined());
  expect_error([&] { a.shape(); }, {"null NDArray"});
}

TEST(NDArray, ToDlpackKeepsDataAlive) {
  NDArray a = NDArray::empty({3}, DataType::Float(32));
  float values[3] = {1.f, 2.f, 3.f};
  a.copy_from(values, sizeof(values));
  DLManagedTensor* m = a.to_dlpack();
  EXPECT_EQ(a.use_count(), 2);
  NDArray weak_observer = a;
  a = NDArray();  // the exported tensor must keep the memory alive on its own
  EXPECT_EQ(m->dl_tensor.ndim, 1);
  EXPECT_EQ(m->dl_tensor.shape[0], 3);
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(static_cast<float*>(m->dl_tensor.data)[2], 3.f);
  EXPECT_EQ(weak_observer.use_count(), 2);
  m->deleter(m);
  EXPECT_EQ(weak_observer.use_count(), 1) << "the deleter releases the export's hold";
}

// A foreign DLManagedTensor whose deleter counts its calls.
struct Foreign {
  std::vector<float> data{10, 20, 30, 40, 50, 60};
  int64_t shape[2] = {2, 3};
  int64_t strides[2] = {3, 1};
  int deletes = 0;
  DLManagedTensor managed{};

  explicit Foreign(DLDataType dtype = DLDataType{kDLFloat, 32, 1}) {
    managed.dl_tensor = DLTensor{data.data(), DLDevice{kDLCPU, 0}, 2, dtype, shape, strides, 0};
    managed.manager_ctx = this;
    managed.deleter = [](DLManagedTensor* self) { static_cast<Foreign*>(self->manager_ctx)->deletes++; };
  }
};

TEST(NDArray, FromDlpackCallsTheDeleterExactlyOnce) {
  Foreign f;
  {
    NDArray a = NDArray::from_dlpack(&f.managed);
    NDArray b = a;
    EXPECT_EQ(a.data(), f.data.data());
    EXPECT_EQ(a.shape(), (std::vector<int64_t>{2, 3}));
    EXPECT_TRUE(a.is_contiguous()) << "explicit strides that are compact still count as contiguous";
    EXPECT_EQ(b.data_as<float>()[4], 50.f);
    a = NDArray();
    EXPECT_EQ(f.deletes, 0);
  }
  EXPECT_EQ(f.deletes, 1);
}

TEST(NDArray, FromDlpackLeavesOwnershipWithTheCallerOnError) {
  Foreign f(DLDataType{kDLComplex, 64, 1});
  expect_error([&] { NDArray::from_dlpack(&f.managed); }, {"unsupported DLPack dtype", "code 5"});
  EXPECT_EQ(f.deletes, 0);
}

TEST(NDArray, DlpackRoundTrip) {
  NDArray a = NDArray::empty({2, 2}, DataType::Int(64));
  int64_t v[4] = {1, 2, 3, 4};
  a.copy_from(v, sizeof(v));
  void* data = a.data();
  NDArray b = NDArray::from_dlpack(a.to_dlpack());
  a = NDArray();
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.dtype(), DataType::Int(64));
  EXPECT_EQ(b.data_as<int64_t>()[3], 4);
}

TEST(NDArray, ViewHonoursStridesAndOffset) {
  std::vector<float> buf(12);
  for (int i = 0; i < 12; ++i) buf[i] = float(i);
  int64_t shape[2] = {3, 2};
  int64_t strides[2] = {4, 1};  // a 3x2 window of a 3x4 matrix
  DLTensor t{buf.data(), DLDevice{kDLCPU, 0}, 2, DLDataType{kDLFloat, 32, 1}, shape, strides, 2 * sizeof(float)};
  NDArray v = NDArray::view(&t);
  EXPECT_FALSE(v.owns_data());
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.strides(), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(v.data_as<float>()[0], 2.f) << "data() applies byte_offset";
  expect_error([&] { v.copy_to(buf.data(), 24); }, {"not contiguous"});
  // Size-1 dimensions may carry any stride.
  int64_t shape1[2] = {1, 4}, strides1[2] = {99, 1};
  DLTensor t1{buf.data(), DLDevice{kDLCPU, 0}, 2, DLDataType{kDLFloat, 32, 1}, shape1, strides1, 0};
  EXPECT_TRUE(is_contiguous(t1));
}

TEST(NDArray, DtypeConversions) {
  for (DataType t : {DataType::Int(8), DataType::UInt(16), DataType::Float(16), DataType::Float(64),
                     DataType::BFloat16(), DataType::Bool(), DataType::Float(32, 4)}) {
    EXPECT_EQ(from_dlpack_dtype(to_dlpack_dtype(t)), t) << t.str();
  }
  DLDataType b = to_dlpack_dtype(DataType::Bool());
  EXPECT_EQ(b.code, kDLBoolCode);
  EXPECT_EQ(b.bits, 8);
  EXPECT_EQ(from_dlpack_dtype(DLDataType{kDLUInt, 1, 1}), DataType::Bool());
  EXPECT_EQ(dtype_storage_bytes(DataType::Bool()), 1);
  EXPECT_EQ(dtype_storage_bytes(DataType::Float(32, 4)), 16);
  expect_error([] { from_dlpack_dtype(DLDataType{kDLFloat, 8, 1}); }, {"bits 8"});
}

// ------------------------------------------------------------------ Module

int32_t vadd_kernel(void* const* args) {
  auto* a = static_cast<const float*>(args[0]);
  auto* b = static_cast<const float*>(args[1]);
  auto* c = static_cast<float*>(args[2]);
  int32_t n = *static_cast<const int32_t*>(args[3]);
  for (int32_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
  return 0;
}

int32_t scale_kernel(void* const* args) {
  auto* x = static_cast<float*>(args[0]);
  int64_t n = *static_cast<const int64_t*>(args[1]);
  float alpha = *static_cast<const float*>(args[2]);
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
  return 0;
}

// Writes the raw bits of each scalar it receives, to check scalar packing.
int32_t echo_kernel(void* const* args) {
  auto* out = static_cast<uint64_t*>(args[0]);
  out[0] = uint64_t(*static_cast<const int8_t*>(args[1]));
  out[1] = *static_cast<const uint16_t*>(args[2]);
  out[2] = uint64_t(*static_cast<const int32_t*>(args[3]));
  out[3] = uint64_t(*static_cast<const int64_t*>(args[4]));
  uint32_t f32;
  std::memcpy(&f32, args[5], 4);
  out[4] = f32;
  std::memcpy(&out[5], args[6], 8);
  out[6] = *static_cast<const uint8_t*>(args[7]);
  out[7] = *static_cast<const uint16_t*>(args[8]);
  out[8] = *static_cast<const uint16_t*>(args[9]);
  return 0;
}

int32_t fail_kernel(void* const*) {
  kiln_set_last_error("fail_kernel: the input was poisoned");
  return 3;
}

class FakeNode : public ModuleNode {
 public:
  std::map<std::string, KilnKernel> table;
  int lookups = 0;
  KilnKernel lookup(const std::string& symbol) override {
    ++lookups;
    auto it = table.find(symbol);
    return it == table.end() ? nullptr : it->second;
  }
};

ParamInfo buffer(std::string name, DataType t, std::vector<int64_t> shape) { return {std::move(name), true, t, std::move(shape), {}, {}}; }
ParamInfo scalar(std::string name, DataType t) { return {std::move(name), false, t, {}, {}, {}}; }

std::vector<KernelInfo> test_kernels() {
  DataType f32 = DataType::Float(32);
  return {
      {"vadd", {buffer("A", f32, {64}), buffer("B", f32, {64}), buffer("C", f32, {64}), scalar("n", DataType::Int(32))}},
      {"scale", {buffer("X", f32, {-1}), scalar("n", DataType::Int(64)), scalar("alpha", f32)}},
      {"echo",
       {buffer("out", DataType::UInt(64), {9}), scalar("i8", DataType::Int(8)), scalar("u16", DataType::UInt(16)),
        scalar("i32", DataType::Int(32)), scalar("i64", DataType::Int(64)), scalar("f32", f32),
        scalar("f64", DataType::Float(64)), scalar("flag", DataType::Bool()), scalar("f16", DataType::Float(16)),
        scalar("bf16", DataType::BFloat16())}},
      {"fail", {}},
      {"ghost", {}},  // in the metadata, but the code has no such symbol
  };
}

struct ModuleFixture : ::testing::Test {
  std::shared_ptr<FakeNode> node = std::make_shared<FakeNode>();
  Module mod;
  NDArray a = NDArray::empty({64}, DataType::Float(32));
  NDArray b = NDArray::empty({64}, DataType::Float(32));
  NDArray c = NDArray::empty({64}, DataType::Float(32));

  void SetUp() override {
    node->table = {{"vadd", vadd_kernel}, {"scale", scale_kernel}, {"echo", echo_kernel}, {"fail", fail_kernel}};
    mod = Module(node, test_kernels());
    for (int i = 0; i < 64; ++i) {
      a.data_as<float>()[i] = float(i);
      b.data_as<float>()[i] = 100.f;
    }
  }
};

TEST_F(ModuleFixture, Metadata) {
  EXPECT_TRUE(mod.has("vadd"));
  EXPECT_FALSE(mod.has("vsub"));
  EXPECT_EQ(mod.names(), (std::vector<std::string>{"vadd", "scale", "echo", "fail", "ghost"}));
  EXPECT_EQ(mod.info("vadd").params[2].name, "C");
  expect_error([&] { mod.info("vsub"); }, {"no kernel 'vsub'", "vadd, scale"});
}

TEST_F(ModuleFixture, CallsAKernelAndCachesTheLookup) {
  mod.call("vadd", {a, b, c, 64});
  mod.call("vadd", {a, b, c, 64});
  EXPECT_EQ(c.data_as<float>()[10], 110.f);
  EXPECT_EQ(c.data_as<float>()[63], 163.f);
  EXPECT_EQ(node->lookups, 1);
  // Raw DLTensor pointers work as well as NDArrays.
  mod.call("vadd", {&a.dltensor(), &b.dltensor(), &a.dltensor(), int64_t{64}});
  EXPECT_EQ(a.data_as<float>()[1], 101.f);
}

TEST_F(ModuleFixture, SymbolicDimensionAcceptsAnyExtent) {
  for (int64_t n : {1, 5, 33}) {
    NDArray x = NDArray::empty({n}, DataType::Float(32));
    for (int64_t i = 0; i < n; ++i) x.data_as<float>()[i] = 2.f;
    mod.call("scale", {x, n, 3});  // the int 3 widens to the float32 parameter 'alpha'
    EXPECT_EQ(x.data_as<float>()[n - 1], 6.f);
  }
}

TEST_F(ModuleFixture, PacksScalarsAsTheirDtype) {
  NDArray out = NDArray::empty({9}, DataType::UInt(64));
  mod.call("echo", {out, -3, 65535, -70000, int64_t(1) << 40, 1.5f, 0.25, true, 1.5, 1.0});
  auto* o = out.data_as<uint64_t>();
  EXPECT_EQ(int8_t(o[0]), -3);
  EXPECT_EQ(o[1], 65535u);
  EXPECT_EQ(int32_t(o[2]), -70000);
  EXPECT_EQ(o[3], uint64_t(1) << 40);
  EXPECT_EQ(o[4], 0x3fc00000u);  // 1.5f
  double d;
  std::memcpy(&d, &o[5], 8);
  EXPECT_EQ(d, 0.25);
  EXPECT_EQ(o[6], 1u);
  EXPECT_EQ(o[7], 0x3e00u);  // 1.5 as IEEE half
  EXPECT_EQ(o[8], 0x3f80u);  // 1.0 as bfloat16
  mod.call("echo", {out, 0, 0, 0, 0, 0, 0, 0, 65504.0, 0});
  EXPECT_EQ(o[7], 0x7bffu) << "largest finite half";
  mod.call("echo", {out, 0, 0, 0, 0, 0, 0, 0, 1e-7, 0});
  EXPECT_EQ(o[7], 0x0002u) << "1e-7 rounds to two half subnormal steps";
}

TEST_F(ModuleFixture, RejectsBadArgumentsNamingTheParameter) {
  auto call = [&](std::vector<Arg> args) { return [this, args] { mod.call("vadd", args); }; };
  NDArray wrong_shape = NDArray::empty({32}, DataType::Float(32));
  NDArray wrong_rank = NDArray::empty({8, 8}, DataType::Float(32));
  NDArray wrong_dtype = NDArray::empty({64}, DataType::Float(64));
  std::vector<float> storage(128);
  int64_t shape[1] = {64}, stride2[1] = {2};
  DLTensor null_data{nullptr, DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 32, 1}, shape, nullptr, 0};
  DLTensor strided{storage.data(), DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 32, 1}, shape, stride2, 0};
  DLTensor on_gpu{storage.data(), DLDevice{kDLCUDA, 0}, 1, DLDataType{kDLFloat, 32, 1}, shape, nullptr, 0};

  expect_error(call({a, b, c}), {"vadd: expected 4 arguments (A, B, C, n), got 3"});
  expect_error(call({a, b, wrong_shape, 64}), {"vadd: argument 2 'C' has shape [32], expected [64]"});
  expect_error(call({wrong_rank, b, c, 64}), {"argument 0 'A' has rank 2", "expected rank 1"});
  expect_error(call({a, wrong_dtype, c, 64}), {"argument 1 'B' has dtype float64, expected float32"});
  expect_error(call({&null_data, b, c, 64}), {"argument 0 'A' has null data"});
  expect_error(call({a, &strided, c, 64}), {"argument 1 'B' is not contiguous", "strides [2]"});
  expect_error(call({a, b, &on_gpu, 64}), {"argument 2 'C' is on device cuda:0, expected cpu"});
  expect_error(call({a, b, NDArray(), 64}), {"argument 2 'C' is a null tensor"});
  expect_error(call({a, b, c, 2.5}), {"argument 3 'n' is a float", "int32"});
  expect_error(call({a, b, c, a}), {"argument 3 'n' is a tensor, expected an int32 scalar"});
  expect_error(call({7, b, c, 64}), {"argument 0 'A' is an integer, expected a float32 tensor of shape [64]"});
  expect_error(call({a, b, c, int64_t(1) << 40}), {"argument 3 'n' = 1099511627776 does not fit int32"});
  expect_error([&] { mod.call("echo", {NDArray::empty({9}, DataType::UInt(64)), 0, -1, 0, 0, 0, 0, 0, 0, 0}); },
               {"argument 2 'u16' = -1 does not fit uint16"});
  expect_error([&] { mod.call("echo", {NDArray::empty({9}, DataType::UInt(64)), 0, 0, 0, 0, 0, 0, 2, 0, 0}); },
               {"argument 7 'flag' = 2 is not a bool"});
}

TEST_F(ModuleFixture, KernelFailureSurfacesItsMessage) {
  expect_error([&] { mod.call("fail", {}); }, {"fail: kernel failed (returned 3)", "the input was poisoned"});
  expect_error([&] { mod.call("ghost", {}); }, {"'ghost'", "no such symbol"});
}

TEST_F(ModuleFixture, TimeEvaluator) {
  TimeResult r = mod.time_evaluator("vadd", {a, b, c, 64}, 3, 4);
  ASSERT_EQ(r.results.size(), 4u);
  EXPECT_EQ(r.number, 3);
  for (double t : r.results) EXPECT_GT(t, 0);
  EXPECT_LE(r.min(), r.median());
  EXPECT_LE(r.median(), r.max());
  EXPECT_EQ(c.data_as<float>()[2], 102.f) << "the timed calls ran the kernel";

  // min_repeat_ms grows `number` until each repeat lasts at least that long.
  TimeResult g = mod.time_evaluator("vadd", {a, b, c, 64}, 1, 2, 2.0);
  ASSERT_EQ(g.results.size(), 2u);
  EXPECT_GT(g.number, 1);
  for (double t : g.results) EXPECT_GE(t * g.number, 2e-3 * 0.999);

  expect_error([&] { mod.time_evaluator("vadd", {a, b, c, 64}, 0, 1); }, {"number (0)"});
  expect_error([&] { mod.time_evaluator("vadd", {a, b, c}, 1, 1); }, {"expected 4 arguments"});
  expect_error([&] { mod.time_evaluator("fail", {}, 1, 1); }, {"poisoned"});
}

TEST_F(ModuleFixture, TimeEvaluatorCold) {
  // Evicting a buffer from the caches leaves its bytes as they were.
  std::vector<float> before(a.data_as<float>(), a.data_as<float>() + 64);
  evict_from_cache(a.data(), a.nbytes());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), a.data_as<float>()));
  evict_from_cache(nullptr, 100);  // nothing to do, no crash

  TimeResult r = time_evaluator_cold(mod, "vadd", {a, b, c, 64}, {1}, 3, 4);
  ASSERT_EQ(r.results.size(), 4u);
  EXPECT_GE(r.number, 3);
  for (double t : r.results) EXPECT_GT(t, 0);
  EXPECT_EQ(c.data_as<float>()[2], 102.f) << "the timed calls ran the kernel";
  // min_repeat_ms counts the evictions' wall time too, so a repeat makes more calls.
  TimeResult g = time_evaluator_cold(mod, "vadd", {a, b, c, 64}, {0, 1}, 1, 2, 2.0);
  EXPECT_GT(g.number, 1);
  // fastest_call: a repeat reports its fastest call. The fastest of 3 x 300 calls is below the best mean of
  // 3 x 300 others (ignoring the flag, both are means, and either is lower half the time).
  double fastest = 1e9, mean = 1e9;
  for (int i = 0; i < 3; ++i) {
    TimeResult f = time_evaluator_cold(mod, "vadd", {a, b, c, 64}, {1}, 300, 1, 0, true);
    TimeResult m = time_evaluator_cold(mod, "vadd", {a, b, c, 64}, {1}, 300, 1, 0, false);
    ASSERT_EQ(f.results.size(), 1u);
    fastest = std::min(fastest, f.results[0]);
    mean = std::min(mean, m.results[0]);
  }
  EXPECT_GT(fastest, 0);
  EXPECT_LT(fastest, mean);

  expect_error([&] { time_evaluator_cold(mod, "vadd", {a, b, c, 64}, {3}); }, {"flush index 3 is not a tensor argument"});
  expect_error([&] { time_evaluator_cold(mod, "vadd", {a, b, c, 64}, {7}); }, {"flush index 7", "4 arguments"});
  expect_error([&] { time_evaluator_cold(mod, "vadd", {a, b, c}, {0}); }, {"expected 4 arguments"});
  expect_error([&] { time_evaluator_cold(mod, "vadd", {a, b, c, 64}, {0}, 0, 1); }, {"number (0)"});
}

TEST(Module, RejectsInvalidMetadata) {
  auto node = std::make_shared<FakeNode>();
  expect_error([&] { Module(node, {{"k", {}}, {"k", {}}}); }, {"two kernels are named 'k'"});
  expect_error([&] { Module(node, {{"k", {buffer("X", DataType::Float(32), {-2})}}}); }, {"'X'", "[-2]"});
  expect_error([&] { Module(nullptr, {}); }, {"null"});
  Module empty;
  expect_error([&] { empty.call("k", {}); }, {"null Module"});
}

TEST(KernelInfo, JsonRoundTrip) {
  std::vector<KernelInfo> kernels = test_kernels();
  std::string json = kernels_to_json(kernels);
  EXPECT_EQ(kernels_from_json(json), kernels);
  EXPECT_EQ(KernelInfo::from_json(kernels[1].to_json()), kernels[1]);
  EXPECT_NE(json.find("\"kind\":\"buffer\""), std::string::npos);
  EXPECT_NE(json.find("\"shape\":[-1]"), std::string::npos);

  expect_error([] { kernels_from_json("[{\"name\": \"k\""); }, {"not valid JSON"});
  expect_error([] { kernels_from_json("{}"); }, {"expected a JSON array"});
  expect_error([] { kernels_from_json(R"([{"name": "k", "params": [{"name": "X", "kind": "buffer", "shape": []}]}])"); },
               {"kernel 'k' parameter 0", "\"dtype\""});
  expect_error([] { kernels_from_json(R"([{"name": "k", "params": [{"name": "X", "kind": "tensor", "dtype": "float32", "shape": []}]}])"); },
               {"kind \"tensor\""});
  expect_error([] { kernels_from_json(R"([{"name": "k", "params": [{"name": "X", "kind": "buffer", "dtype": "float13", "shape": []}]}])"); },
               {"float13"});
  expect_error([] { kernels_from_json(R"([{"name": "k", "params": [{"name": "X", "kind": "buffer", "dtype": "float32", "shape": [-3]}]}])"); },
               {"-3"});
}

// ----------------------------------------------------------- Module::load

std::string temp_dir() {
  char tmpl[] = "/tmp/kiln_runtime_test_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (!dir) throw std::runtime_error("mkdtemp failed");
  return dir;
}

TEST(ModuleLoad, MissingFileIsAClearError) {
  expect_error([] { Module::load("/nonexistent/dir/libkernels.so"); },
               {"cannot load kernel library '/nonexistent/dir/libkernels.so'"});
}

TEST(ModuleLoad, NotALibrary) {
  std::string path = temp_dir() + "/not_a_library.so";
  std::ofstream(path) << "this is text, not ELF";
  expect_error([&] { Module::load(path); }, {"cannot load kernel library", path});
  std::remove(path.c_str());
  rmdir(path.substr(0, path.rfind('/')).c_str());
}

TEST(ModuleLoad, LibraryWithoutMetadata) {
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&kiln_num_threads), &info), 0);
  std::string runtime_path = info.dli_fname;  // libkiln_runtime.so: a library, but not a kernel library
  expect_error([&] { Module::load(runtime_path); }, {"has no kiln seal", "not a library exported by kiln"});
  // Sealed, it gets as far as its metadata.
  std::string dir = temp_dir(), copy = dir + "/libruntime_copy.so";
  std::ifstream in(runtime_path, std::ios::binary);
  std::ofstream(copy, std::ios::binary) << in.rdbuf();
  seal_library(copy, new_export_id());
  expect_error([&] { Module::load(copy); }, {"has no kiln_module_metadata symbol"});
  std::remove(copy.c_str());
  rmdir(dir.c_str());
}

// Builds a real kernel library with the system C compiler when there is one.
TEST(ModuleLoad, LoadsAnExportedLibrary) {
  std::string dir = temp_dir();
  std::string src = dir + "/kernels.c", so = dir + "/libkernels.so";
  std::ofstream(src) << R"(#include <stdint.h>
void kiln_set_last_error(const char* msg);
const char* kiln_module_metadata =
  "[{\"name\": \"add_one\", \"params\": ["
  "{\"name\": \"X\", \"kind\": \"buffer\", \"dtype\": \"float32\", \"shape\": [-1]},"
  "{\"name\": \"n\", \"kind\": \"scalar\", \"dtype\": \"int32\", \"shape\": []}]},"
  " {\"name\": \"broken\", \"params\": []}]";
int32_t add_one(void* const* args) {
  float* x = (float*)args[0];
  int32_t n = *(const int32_t*)args[1];
  for (int32_t i = 0; i < n; ++i) x[i] += 1.0f;
  return 0;
}
int32_t broken(void* const* args) { kiln_set_last_error("broken: always fails"); return 1; }
)";
  std::string cmd = "cc -shared -fPIC -o " + so + " " + src + " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    std::remove(src.c_str());
    rmdir(dir.c_str());
    GTEST_SKIP() << "no C compiler (cc) to build a test kernel library";
  }
  expect_error([&] { Module::load(so); }, {"has no kiln seal"});
  seal_library(so, new_export_id());  // as export_library does
  Module mod = Module::load(so);
  EXPECT_EQ(mod.names(), (std::vector<std::string>{"add_one", "broken"}));
  NDArray x = NDArray::empty({5}, DataType::Float(32));
  for (int i = 0; i < 5; ++i) x.data_as<float>()[i] = float(i);
  mod.call("add_one", {x, 5});
  EXPECT_EQ(x.data_as<float>()[4], 5.f);
  expect_error([&] { mod.call("add_one", {x}); }, {"add_one: expected 2 arguments (X, n), got 1"});
  expect_error([&] { mod.call("broken", {}); }, {"broken: always fails"});
  std::remove(src.c_str());
  std::remove(so.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace kiln
