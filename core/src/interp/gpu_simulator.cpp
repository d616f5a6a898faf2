// The GPU simulator: the interpreter with an observer that knows the current
// block and thread and records, per element, who touched it since the last
// barrier (see kiln/interp/gpu_simulator.h for the model).
#include "kiln/interp/gpu_simulator.h"

#include <map>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "gpu_hooks.h"
#include "kiln/codegen/kernel_metadata.h"
#include "kiln/pass/gpu.h"
#include "kiln/runtime/arg_binder.h"
#include "kiln/support/error.h"

namespace kiln {

namespace {

constexpr int64_t kNone = -1;

// Who touched one element: the last writer, and up to two distinct readers
// of the current epoch (enough: a writer differs from at least one of them),
// each with the block and the barrier epoch of the access.
struct Touch {
  int64_t writer = kNone, writer_block = kNone, write_epoch = kNone;
  int64_t reader = kNone, reader_block = kNone, read_epoch = kNone;
  int64_t reader2 = kNone, reader2_block = kNone, read2_epoch = kNone;
};

struct Region {
  uintptr_t lo = 0, hi = 0;
  const BufferNode* buffer = nullptr;
  std::string scope;
  /** Allocated inside a thread nest: each thread has its own (in the interpreter too). */
  bool per_thread = false;
};

std::string tuple(int64_t id) {
  std::ostringstream os;
  os << "(" << id % 1024 << "," << id / 1024 % 1024 << "," << id / (1024 * 1024) << ")";
  return os.str();
}

std::string block_tuple(int64_t id) {
  std::ostringstream os;
  os << "(" << id % 65536 << "," << id / 65536 % 65536 << "," << id / (int64_t(65536) * 65536) << ")";
  return os.str();
}

class RaceChecker : public interp::GpuHooks {
 public:
  GpuSimulation stats;

  void enter_thread_loop(const std::string& tag, int64_t value) override {
    if (int d = pass::thread_dim_index(tag); d >= 0) {
      tid_[d] = value;
      in_nest_[d] = true;
      int64_t t = thread();
      if (seen_threads_.insert(t).second) ++stats.thread_runs;
    } else if (int b = pass::block_dim_index(tag); b >= 0) {
      bid_[b] = value;
      seen_threads_.clear();  // a new block: its threads are counted afresh
      block_touches_.clear();  // and its shared and local memory is its own
    }
  }

  void exit_thread_loop(const std::string& tag) override {
    if (int d = pass::thread_dim_index(tag); d >= 0) tid_[d] = 0, in_nest_[d] = false;
  }

  void barrier() override {
    ++epoch_;
    ++stats.barriers;
  }

  void allocate(const BufferNode* b, const uint8_t* data, int64_t nbytes) override {
    uintptr_t lo = reinterpret_cast<uintptr_t>(data), hi = lo + static_cast<uintptr_t>(nbytes);
    // Forget regions this storage overlaps: the memory is reused.
    auto it = regions_.lower_bound(lo);
    if (it != regions_.begin() && std::prev(it)->second.hi > lo) --it;
    while (it != regions_.end() && it->first < hi) it = regions_.erase(it);
    regions_[lo] = {lo, hi, b, b->scope, in_nest_[0] || in_nest_[1] || in_nest_[2]};
  }

  void access(const BufferNode* b, const uint8_t* element, bool write) override {
    uintptr_t a = reinterpret_cast<uintptr_t>(element);
    const Region* r = region_of(a);
    if (r && r->per_thread) return;
    std::string scope = r ? r->scope : "global";
    const BufferNode* buf = r ? r->buffer : b;
    int64_t index = r ? static_cast<int64_t>((a - r->lo) / buf->dtype.bytes()) : -1;
    // Shared and local elements are named by buffer and index, not address:
    // on the GPU an allocation inside a block-level loop is the same memory in
    // every iteration, though the interpreter allocates it afresh.
    Touch& t = r ? block_touches_[{buf->data.get(), index}] : touches_[a];
    int64_t me = thread(), blk = block();
    if (scope == "local") return check_local(t, buf, index, me, blk);
    bool shared = scope == "shared";
    // Another block is never ordered with this one; another thread of this block only by a barrier.
    auto unordered = [&](int64_t who, int64_t who_block, int64_t when) { return who != kNone && (who_block != blk || (who != me && when == epoch_)); };
    if (unordered(t.writer, t.writer_block, t.write_epoch)) race(buf, scope, index, t.writer, t.writer_block, "wrote", me, write ? "writes" : "reads");
    if (write && shared && unordered(t.reader, t.reader_block, t.read_epoch)) race(buf, scope, index, t.reader, t.reader_block, "read", me, "writes");
    if (write && shared && unordered(t.reader2, t.reader2_block, t.read2_epoch)) race(buf, scope, index, t.reader2, t.reader2_block, "read", me, "writes");
    if (write) {
      t.writer = me, t.writer_block = blk, t.write_epoch = epoch_;
    } else if (shared && (t.reader == kNone || t.read_epoch != epoch_ || t.reader == me)) {
      t.reader = me, t.reader_block = blk, t.read_epoch = epoch_;
    } else if (shared && (t.reader2 == kNone || t.read2_epoch != epoch_)) {
      t.reader2 = me, t.reader2_block = blk, t.read2_epoch = epoch_;
    }
  }

 private:
  int64_t thread() const { return tid_[0] + tid_[1] * 1024 + tid_[2] * 1024 * 1024; }
  int64_t block() const { return bid_[0] + bid_[1] * 65536 + bid_[2] * int64_t(65536) * 65536; }

  const Region* region_of(uintptr_t a) const {
    auto it = regions_.upper_bound(a);
    if (it == regions_.begin()) return nullptr;
    --it;
    return a < it->second.hi ? &it->second : nullptr;
  }

  void check_local(Touch& t, const BufferNode* b, int64_t index, int64_t me, int64_t blk) {
    if (t.writer != kNone && (t.writer != me || t.writer_block != blk)) {
      KILN_USER_ERROR() << "local buffer '" << b->name << "' element " << index << " is used by thread " << tuple(t.writer) << " and thread " << tuple(me) << " of block "
                        << block_tuple(blk) << "; on the GPU each thread has its own copy of a local buffer, so they would not see each other's values: "
                        << "compute the stage inside the threadIdx loops, or make it shared";
    }
    t.writer = me, t.writer_block = blk;
  }

  [[noreturn]] void race(const BufferNode* b, const std::string& scope, int64_t index, int64_t other, int64_t other_block, const char* other_did, int64_t me, const char* i_do) {
    std::ostringstream os;
    os << "data race on " << scope << " buffer '" << b->name << "'" << (index >= 0 ? " element " + std::to_string(index) : "") << ": thread " << tuple(me) << " of block "
       << block_tuple(block()) << " " << i_do << " it, and thread " << tuple(other) << " of block " << block_tuple(other_block) << " " << other_did << " it";
    if (other_block == block()) os << " since the last barrier; a sync_threads() between them is missing";
    else os << "; blocks are not ordered, so two blocks must not share an element they write";
    throw Error(os.str());
  }

  int64_t tid_[3] = {0, 0, 0}, bid_[3] = {0, 0, 0};
  bool in_nest_[3] = {false, false, false};
  int64_t epoch_ = 0;
  std::map<uintptr_t, Region> regions_;
  std::unordered_map<uintptr_t, Touch> touches_;  // global memory, by address
  std::map<std::pair<const Variable*, int64_t>, Touch> block_touches_;  // shared and local, by storage and index
  std::unordered_set<int64_t> seen_threads_;
};

// Every block of the grid runs (there is one block nest).
int64_t count_blocks(const PrimFunc& f) {
  pass::LaunchConfig cfg = pass::launch_config(f, pass::GpuLimits{});
  return cfg.num_blocks();
}

}  // namespace

GpuSimulation simulate_gpu(const PrimFunc& f, const std::vector<void*>& args) {
  KILN_USER_CHECK(f.defined()) << "simulate_gpu of an undefined function";
  pass::verify_gpu_kernel(f);
  RaceChecker checker;
  interp::interpret_with_hooks(f, args, &checker);
  checker.stats.blocks = count_blocks(f);
  return checker.stats;
}

GpuSimulation simulate_gpu_args(const PrimFunc& f, const std::vector<Arg>& args) {
  KILN_USER_CHECK(f.defined()) << "simulate_gpu_args of an undefined function";
  PackedArgs packed(codegen::kernel_info(f), args);
  return simulate_gpu(f, std::vector<void*>(packed.data(), packed.data() + packed.size()));
}

}  // namespace kiln
