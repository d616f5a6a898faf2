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
  const RingOptions& o = ring_options();
  // Two ranks exchange whole segments and both sum them: one round instead of the ring's two, the
  // same bytes each way (across the bed's hosts 1 MB took 3.8 ms so, 5.6 ms as a ring).
  pair_ = size_ == 2 && o.pair_exchange;
  int blocks = pair_ ? 1 : size_;
  steps_ = pair_ ? 1 : 2 * (size_ - 1);
  // Blocks as even as the count allows: the first count % blocks one element longer.
  for (int b = 0; b < blocks; ++b) {
    block_len_.push_back(count / blocks + (b < count % blocks ? 1 : 0));
    block_off_.push_back(b == 0 ? 0 : block_off_[b - 1] + block_len_[b - 1]);
  }
  // Segments of at most segment_bytes: fewer would leave no summing to overlap with the wire, more
  // cost a round each where a peer may be descheduled (1 MB in 8 segments of 128 KB took 4.6 ms
  // across the bed, in one message 3.9).
  int64_t seg = std::max<int64_t>(1, o.segment_bytes / elem_bytes);
  segments_ = static_cast<int>(std::clamp<int64_t>((block_len_[0] + seg - 1) / seg, 1, kMaxSegments));
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
  bool reduce = pair_ || t < n - 1;
  int send_block = pair_ ? 0 : reduce ? mod(r - t) : mod(r + 1 - (t - (n - 1)));
  int recv_block = pair_ ? 0 : reduce ? mod(r - t - 1) : mod(r - (t - (n - 1)));
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
  if (pair_ || f.step < n - 1) {
    auto [ro, rc] = segment(pair_ ? 0 : ((rank_ - f.step - 1) % n + n) % n, j);
    reduce_(scratch_.data() + f.slot * scratch_stride_, buf_ + ro * elem_bytes_, rc);
  }
  if (++f.step < steps_) {
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
