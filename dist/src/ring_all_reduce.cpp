// The segmented ring all-reduce (ring_all_reduce.h).
#include "ring_all_reduce.h"

#ifdef KILN_WITH_MPI
#include <algorithm>
#include <memory>
#include <mutex>

#include "bf16.h"

namespace kiln::dist {

namespace {

#if defined(__GNUC__) && !defined(__clang__)
#define KILN_VECTORIZE __attribute__((optimize("O3")))
#else
#define KILN_VECTORIZE
#endif

template <typename T>
KILN_VECTORIZE void add(const void* a, void* b, int64_t n) {
  const T* x = static_cast<const T*>(a);
  T* y = static_cast<T*>(b);
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_bf16_words(const void* a, void* b, int64_t n) { add_bf16(static_cast<const uint16_t*>(a), static_cast<uint16_t*>(b), n); }

#undef KILN_VECTORIZE

// Scratch buffers outlive the all-reduces: a fresh one would be fresh pages, faulted in on every call.
std::mutex g_pool_mu;
std::vector<std::vector<char>> g_pool;

std::vector<char> take_scratch(size_t bytes) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  std::vector<char> out;
  if (!g_pool.empty()) {
    out = std::move(g_pool.back());
    g_pool.pop_back();
  }
  if (out.size() < bytes) out.resize(bytes);
  return out;
}

void give_scratch(std::vector<char> v) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (g_pool.size() < 8) g_pool.push_back(std::move(v));
}

constexpr int kMaxSegments = 4096;  // a block's segments: one tag each
constexpr int64_t kMinSegments = 8, kMinSegmentBytes = 128 << 10;

}  // namespace

ReduceFn sum_for(MPI_Datatype type) {
  if (type == MPI_FLOAT) return &add<float>;
  if (type == MPI_DOUBLE) return &add<double>;
  if (type == MPI_INT32_T) return &add<int32_t>;
  if (type == MPI_INT64_T) return &add<int64_t>;
  if (type == MPI_UINT16_T) return &add_bf16_words;  // bfloat16 words (start_all_reduce_bf16)
  return nullptr;
}

RingAllReduce::RingAllReduce(MPI_Comm comm, void* buf, int64_t count, int elem_bytes, MPI_Datatype type, ReduceFn reduce,
                             int tag_base)
    : comm_(comm), buf_(static_cast<char*>(buf)), count_(count), elem_bytes_(elem_bytes), tag_base_(tag_base), type_(type),
      reduce_(reduce) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  // Blocks as even as the count allows: the first count % n one element longer.
  for (int b = 0; b < size_; ++b) {
    block_len_.push_back(count / size_ + (b < count % size_ ? 1 : 0));
    block_off_.push_back(b == 0 ? 0 : block_off_[b - 1] + block_len_[b - 1]);
  }
  const RingOptions& o = ring_options();
  // Segments of at most segment_bytes, and at least kMinSegments of them down to 128 KB each: a block of
  // 2 MB in 2 segments left little to overlap (4 MB over 2 ranks: 22-28 ms; in 8, 16.6 ms).
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  int64_t block_bytes = block_len_[0] * elem_bytes;
  int64_t by_size = ceil_div(block_bytes, std::max<int64_t>(1, o.segment_bytes));
  int64_t by_count = std::min<int64_t>(kMinSegments, ceil_div(block_bytes, kMinSegmentBytes));
  segments_ = static_cast<int>(std::clamp<int64_t>(std::max(by_size, by_count), 1, kMaxSegments));
  flows_.resize(segments_);
  int window = std::max(1, std::min(o.window, segments_));
  scratch_stride_ = ((block_len_[0] + segments_ - 1) / segments_) * elem_bytes;
  scratch_ = take_scratch(static_cast<size_t>(scratch_stride_ * window));
  slots_.clear();
  for (int s = window - 1; s >= 0; --s) slots_.push_back(s);
  for (int j = 0; j < window; ++j) post(started_++);
}

RingAllReduce::~RingAllReduce() {
  // Only a finished (or never started) one frees its buffers; MPI writes into them until then.
  for (Flow& f : flows_)
    for (MPI_Request& r : f.reqs)
      if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
  give_scratch(std::move(scratch_));
}

std::pair<int64_t, int64_t> RingAllReduce::segment(int block, int j) const {
  int64_t len = block_len_[block], base = len / segments_, rem = len % segments_;
  return {block_off_[block] + j * base + std::min<int64_t>(j, rem), base + (j < rem ? 1 : 0)};
}

// Step t of flow j. Reduce-scatter (t < n-1): send block r-t, receive block r-t-1 into scratch (summed
// into it once here). All-gather (u = t-(n-1)): send block r+1-u, receive block r-u in place. After
// the reduce-scatter rank r holds block r+1 complete, which is what the all-gather sends first.
void RingAllReduce::post(int j) {
  Flow& f = flows_[j];
  if (f.step == 0) {
    f.slot = slots_.back();
    slots_.pop_back();
  }
  int n = size_, t = f.step, r = rank_;
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  bool reduce = t < n - 1;
  int send_block = reduce ? mod(r - t) : mod(r + 1 - (t - (n - 1)));
  int recv_block = reduce ? mod(r - t - 1) : mod(r - (t - (n - 1)));
  auto [so, sc] = segment(send_block, j);
  auto [ro, rc] = segment(recv_block, j);
  char* into = reduce ? scratch_.data() + f.slot * scratch_stride_ : buf_ + ro * elem_bytes_;
  int tag = tag_base_ + j;
  MPI_Irecv(into, static_cast<int>(rc), type_, mod(r - 1), tag, comm_, &f.reqs[0]);
  MPI_Isend(buf_ + so * elem_bytes_, static_cast<int>(sc), type_, mod(r + 1), tag, comm_, &f.reqs[1]);
  f.posted = true;
}

bool RingAllReduce::advance(int j) {
  Flow& f = flows_[j];
  if (!f.posted) return false;
  int done = 0;
  MPI_Testall(2, f.reqs, &done, MPI_STATUSES_IGNORE);
  if (!done) return false;
  f.posted = false;
  int n = size_;
  if (f.step < n - 1) {
    auto [ro, rc] = segment(((rank_ - f.step - 1) % n + n) % n, j);
    reduce_(scratch_.data() + f.slot * scratch_stride_, buf_ + ro * elem_bytes_, rc);
  }
  if (++f.step < 2 * (n - 1)) {
    post(j);
  } else {
    ++finished_;
    slots_.push_back(f.slot);
    if (started_ < segments_) post(started_++);  // the next segment ring takes the freed slot
  }
  return true;
}

bool RingAllReduce::test() {
  // Test the flows in flight until a pass moves none: a completed step posts the next at once.
  for (bool moved = true; moved && finished_ < segments_;) {
    moved = false;
    for (int j = 0; j < started_; ++j) moved |= advance(j);
  }
  return finished_ == segments_;
}

}  // namespace kiln::dist

#endif  // KILN_WITH_MPI
