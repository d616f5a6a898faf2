// The MPI communicator, the world communicator and the one-rank "self" one.
// Every MPI collective is issued non-blocking and polled against a deadline,
// so a dead or hung peer ends the job with a message instead of a hang.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#include "bf16.h"
#include "ring_all_reduce.h"
#include "kiln/dist/communicator.h"
#include "kiln/support/error.h"

#ifdef KILN_WITH_MPI
#include <dlfcn.h>
// The C API only: Open MPI's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace kiln::dist {

namespace {

class DoneRequest : public Request {
 public:
  bool test() override { return true; }
  void wait() override {}
};

}  // namespace

std::unique_ptr<Request> Communicator::start_all_reduce(void* buf, int64_t count, DataType dtype) {
  all_reduce(buf, count, dtype);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> Communicator::start_all_reduce_bf16(float* buf, int64_t count) {
  // Engines without a bfloat16 sum: the same rounding of the inputs and of the result, summed in float32.
  round_to_bf16(buf, count);
  all_reduce(buf, count, DataType::Float(32));
  round_to_bf16(buf, count);
  return std::make_unique<DoneRequest>();
}

void Communicator::exchange(const std::vector<SendOp>& sends, const std::vector<RecvOp>& recvs) {
  for (const SendOp& s : sends) send(s.buf, s.count, s.dtype, s.peer, s.tag);
  for (const RecvOp& r : recvs) recv(r.buf, r.count, r.dtype, r.peer, r.tag);
}

namespace {

double g_timeout = [] {
  const char* s = std::getenv("KILN_DIST_TIMEOUT");
  // Generous by default: ranks compile their segments at different speeds before the first collective.
  return s && std::atof(s) > 0 ? std::atof(s) : 300.0;
}();

// One process: every collective is a copy of the rank's own data.
class SelfCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "self"; }
  void all_reduce(void*, int64_t, DataType) override {}
  void all_gather(const void* s, void* r, int64_t n, DataType t) override { std::memmove(r, s, bytes_of(n, t)); }
  void reduce_scatter(const void* s, void* r, int64_t n, DataType t) override { std::memmove(r, s, bytes_of(n, t)); }
  void all_to_all(const void* s, void* r, int64_t n, DataType t) override { std::memmove(r, s, bytes_of(n, t)); }
  void broadcast(void*, int64_t, DataType, int) override {}
  void send(const void*, int64_t, DataType, int peer, int) override { no_peer(peer); }
  void recv(void*, int64_t, DataType, int peer, int) override { no_peer(peer); }
  void barrier() override {}
  std::shared_ptr<Communicator> split(int, int) override { return std::make_shared<SelfCommunicator>(); }

 private:
  [[noreturn]] static void no_peer(int peer) {
    KILN_USER_ERROR() << "kiln.dist: send/recv to rank " << peer << " in a one-rank run; start the ranks with mpirun -np N";
    std::abort();
  }
};

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

#ifdef KILN_WITH_MPI
bool g_started = false, g_finalized = false;
bool g_mpi_used = false, g_serialized = false;  // world() runs on MPI; at a thread level that lets requests be tested anywhere
bool g_own_cores = false;                       // each rank of this host has a core of its own (set by start_mpi)

// Whether this host has a core for each of its ranks (mpirun's local rank count against the online cores).
bool ranks_fit_the_host() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!local) local = std::getenv("MPI_LOCALNRANKS");
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return local && cores > 0 && std::atol(local) <= cores;
}

// The ranks of MPI_COMM_WORLD running on this machine's kernel (same boot id).
long ranks_on_this_machine() {
  char id[64] = {0};
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    if (!std::fgets(id, sizeof(id), f)) id[0] = 0;
    std::fclose(f);
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char* c = id; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<uint64_t> all(static_cast<size_t>(size));
  MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  return static_cast<long>(std::count(all.begin(), all.end(), h));
}

MPI_Datatype mpi_type(DataType t) {
  if (t == DataType::Float(32)) return MPI_FLOAT;
  if (t == DataType::Float(64)) return MPI_DOUBLE;
  if (t == DataType::Int(32)) return MPI_INT32_T;
  if (t == DataType::Int(64)) return MPI_INT64_T;
  if (t == DataType::Int(8)) return MPI_INT8_T;
  if (t == DataType::UInt(8) || t.is_bool()) return MPI_UINT8_T;
  KILN_USER_ERROR() << "kiln.dist: MPI collectives take float32/64, int8/32/64, uint8 or bool arrays, not " << t.str();
  return MPI_BYTE;
}

// MPI has no bfloat16: the values travel as 16-bit words and this op sums them.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  add_bf16(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), *len);
}

MPI_Op bf16_sum_op() {
  static MPI_Op op = [] {
    MPI_Op o;
    MPI_Op_create(&bf16_sum, /*commute=*/1, &o);
    return o;
  }();
  return op;
}

int to_int(int64_t n) {
  KILN_USER_CHECK(n >= 0 && n <= INT32_MAX) << "kiln.dist: a collective of " << n << " elements exceeds MPI's int count";
  return static_cast<int>(n);
}

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm c) : comm_(c) {
    MPI_Comm_rank(c, &rank_);
    MPI_Comm_size(c, &size_);
    ring_tags_ = ring_tag_base(c);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce(void* buf, int64_t n, DataType t) override {
    if (auto ring = start_ring(buf, n, t.bytes(), mpi_type(t))) {
      ring->wait();
      return;
    }
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, buf, to_int(n), mpi_type(t), MPI_SUM, comm_, &r);
    wait(r, "all_reduce");
  }
  std::unique_ptr<Request> start_all_reduce(void* buf, int64_t n, DataType t) override {
    if (auto ring = start_ring(buf, n, t.bytes(), mpi_type(t))) return ring;
    auto req = std::make_unique<MpiRequest>(size_);
    MPI_Iallreduce(MPI_IN_PLACE, buf, to_int(n), mpi_type(t), MPI_SUM, comm_, &req->r);
    return req;
  }
  std::unique_ptr<Request> start_all_reduce_bf16(float* buf, int64_t n) override {
    std::vector<uint16_t> wire(static_cast<size_t>(n));
    to_bf16(buf, wire.data(), n);
    if (auto ring = start_ring(wire.data(), n, 2, MPI_UINT16_T)) {  // the ring holds the words; they stay put when moved
      ring->wire = std::move(wire);
      ring->unpack_to = buf;
      return ring;
    }
    auto req = std::make_unique<MpiRequest>(size_);
    req->wire = std::move(wire);
    req->unpack_to = buf;
    MPI_Iallreduce(MPI_IN_PLACE, req->wire.data(), to_int(n), MPI_UINT16_T, bf16_sum_op(), comm_, &req->r);
    return req;
  }
  void all_gather(const void* s, void* rv, int64_t n, DataType t) override {
    MPI_Request r;
    MPI_Iallgather(s, to_int(n), mpi_type(t), rv, to_int(n), mpi_type(t), comm_, &r);
    wait(r, "all_gather");
  }
  void reduce_scatter(const void* s, void* rv, int64_t n, DataType t) override {
    MPI_Request r;
    MPI_Ireduce_scatter_block(s, rv, to_int(n), mpi_type(t), MPI_SUM, comm_, &r);
    wait(r, "reduce_scatter");
  }
  void all_to_all(const void* s, void* rv, int64_t n, DataType t) override {
    MPI_Request r;
    MPI_Ialltoall(s, to_int(n), mpi_type(t), rv, to_int(n), mpi_type(t), comm_, &r);
    wait(r, "all_to_all");
  }
  void broadcast(void* buf, int64_t n, DataType t, int root) override {
    MPI_Request r;
    MPI_Ibcast(buf, to_int(n), mpi_type(t), root, comm_, &r);
    wait(r, "broadcast");
  }
  void send(const void* buf, int64_t n, DataType t, int peer, int tag) override {
    MPI_Request r;
    MPI_Isend(buf, to_int(n), mpi_type(t), peer, tag, comm_, &r);
    wait(r, "send");
  }
  void recv(void* buf, int64_t n, DataType t, int peer, int tag) override {
    MPI_Request r;
    MPI_Irecv(buf, to_int(n), mpi_type(t), peer, tag, comm_, &r);
    wait(r, "recv");
  }
  void exchange(const std::vector<SendOp>& sends, const std::vector<RecvOp>& recvs) override {
    std::vector<MPI_Request> rs(recvs.size() + sends.size(), MPI_REQUEST_NULL);
    for (size_t i = 0; i < recvs.size(); ++i)
      MPI_Irecv(recvs[i].buf, to_int(recvs[i].count), mpi_type(recvs[i].dtype), recvs[i].peer, recvs[i].tag, comm_, &rs[i]);
    for (size_t i = 0; i < sends.size(); ++i)
      MPI_Isend(sends[i].buf, to_int(sends[i].count), mpi_type(sends[i].dtype), sends[i].peer, sends[i].tag, comm_, &rs[recvs.size() + i]);
    for (MPI_Request& r : rs) wait(r, "exchange (sends and receives posted together)");
  }
  void barrier() override {
    MPI_Request r;
    MPI_Ibarrier(comm_, &r);
    wait(r, "barrier");
  }

 private:
  void wait(MPI_Request& r, const char* what) { wait_for(r, what, size_); }
  // A large all-reduce as kiln's segmented ring (ring_all_reduce.h); null where MPI_Iallreduce does it:
  // small buffers (latency-bound), other types, or tags too few for the ring's segments.
  struct RingRequest : Request {
    RingRequest(MPI_Comm c, void* buf, int64_t n, int elem, MPI_Datatype t, int tag, int size)
        : ring(c, buf, n, elem, t, sum_for(t), tag), size(size) {}
    ~RingRequest() override { wait(); }
    bool test() override {
      if (!done && ring.test()) finish();
      return done;
    }
    void wait() override {
      if (done) return;
      poll([this] { return ring.test(); }, "all_reduce (kiln's segmented ring)", size);
      finish();
    }
    void finish() {
      done = true;
      if (unpack_to) from_bf16(wire.data(), unpack_to, static_cast<int64_t>(wire.size()));
    }
    RingAllReduce ring;
    bool done = false;
    int size;
    std::vector<uint16_t> wire;
    float* unpack_to = nullptr;
  };
  std::unique_ptr<RingRequest> start_ring(void* buf, int64_t n, int elem, MPI_Datatype t) {
    const RingOptions& o = ring_options();
    if (size_ < 2 || o.min_bytes <= 0 || n * elem < o.min_bytes || !sum_for(t) || ring_tags_ == 0) return nullptr;
    to_int(n);
    // Each all-reduce in flight its own range of tags (the runner overlaps several): 64 ranges of 4096.
    int tag = ring_tags_ + static_cast<int>(ring_seq_++ % 64) * 4096;
    return std::make_unique<RingRequest>(comm_, buf, n, elem, t, tag, size_);
  }
  static int ring_tag_base(MPI_Comm c) {  // tags above the pipeline's and users' own; 0 when MPI has too few
    int* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(c, MPI_TAG_UB, &ub, &flag);
    constexpr int base = 1 << 20;
    return flag && ub && *ub >= base + 64 * 4096 ? base : 0;
  }
  int ring_tags_ = 0;  // the first tag of the ring's, set once comm_ is
  uint64_t ring_seq_ = 0;

  struct MpiRequest : Request {
    explicit MpiRequest(int size) : size(size) {}
    ~MpiRequest() override { wait(); }  // MPI still writes into the buffer until then
    bool test() override {
      if (!done) {
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (done) unpack();
      }
      return done;
    }
    void wait() override {
      if (done) return;
      wait_for(r, "all_reduce (started earlier, overlapped)", size);
      done = 1;
      unpack();
    }
    void unpack() {  // a bfloat16 all-reduce: the sum back into the caller's float32 buffer
      if (unpack_to) from_bf16(wire.data(), unpack_to, static_cast<int64_t>(wire.size()));
    }
    MPI_Request r = MPI_REQUEST_NULL;
    int done = 0, size;
    std::vector<uint16_t> wire;  // bfloat16 words in flight (start_all_reduce_bf16)
    float* unpack_to = nullptr;
  };

 public:
  std::shared_ptr<Communicator> split(int color, int key) override {
    // MPI_Comm_split blocks without a deadline: meet the peers first under one.
    barrier();
    MPI_Comm c;
    MPI_Comm_split(comm_, color, key, &c);
    return std::make_shared<MpiCommunicator>(c);
  }

 private:
  // Polls until done; past the deadline the peers are taken for dead or hung and the job is aborted.
  static void wait_for(MPI_Request& r, const char* what, int size_) {
    poll([&r] {
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      return done != 0;
    }, what, size_);
  }
  template <typename Test>
  static void poll(Test test, const char* what, int size_) {
    auto start = std::chrono::steady_clock::now();
    int tests = 0;
    for (;;) {
      if (test()) return;
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > g_timeout) {
        int world_rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        std::fprintf(stderr,
                     "kiln.dist: rank %d: %s over %d ranks did not complete within %.0f s (KILN_DIST_TIMEOUT): a peer rank "
                     "died, hangs or took another path; aborting all ranks\n",
                     world_rank, what, size_, g_timeout);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 70);
      }
      // MPI moves a collective on only inside MPI_Test. A rank with a core of its own tests again at once for
      // the first 10 ms (a peer a kernel behind, a multi-MB all-reduce: the 4 KB all-reduces of a training
      // step went from 0.2-0.7 to 0.08-0.16 ms); ranks sharing cores test briefly, since a spinning rank holds the
      // core its peer needs. Past that, sleep between tests so a hung peer does not keep the core busy.
      bool spin = g_own_cores ? waited < 0.01 : ++tests <= 1000;
      if (!spin) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

std::shared_ptr<Communicator> start_mpi() {
  // Python loads _kiln with RTLD_LOCAL; Open MPI's plugins need libmpi's symbols global.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) && info.dli_fname) dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  int inited = 0;
  MPI_Initialized(&inited);
  int provided = 0;
  g_own_cores = ranks_fit_the_host();
  if (!inited) {
    // Open MPI's shared-memory transport copies large messages between a host's ranks with the kernel's
    // process_vm_readv (CMA) by default. Inside a 2-rank training step that made 3-4 MB all-reduces 5.5-6.3 ms,
    // against 1.8-2.1 ms through its copy-in/copy-out fragments (step 22.98 -> 18.88 ms). Ranks that share
    // cores keep CMA: there the fragments wait on descheduled peers (4 ranks on 2 cores: 52.9 -> 62.9 ms).
    // A user's or mpirun's own --mca choice wins.
    if (g_own_cores) setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", /*overwrite=*/0);
    // SERIALIZED: the runner's progress thread tests requests in flight while the main thread computes.
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    g_started = true;
  } else {
    MPI_Query_thread(&provided);
  }
  // mpirun's local ranks are those of one "host"; hosts can share a machine (the test bed's namespaces,
  // containers) whose cores mpirun cannot see. Ranks whose kernels share a boot id share its cores: a
  // rank that spins there holds the core its descheduled peer needs.
  if (g_own_cores) g_own_cores = ranks_on_this_machine() <= sysconf(_SC_NPROCESSORS_ONLN);
  g_serialized = provided >= MPI_THREAD_SERIALIZED;
  g_mpi_used = true;
  return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD);
}
#endif

}  // namespace

RingOptions& ring_options() {
  static RingOptions o;
  return o;
}

bool mpi_built() {
#ifdef KILN_WITH_MPI
  return true;
#else
  return false;
#endif
}

std::shared_ptr<Communicator> world() {
  static std::mutex mu;
  static std::shared_ptr<Communicator> w;
  std::lock_guard<std::mutex> lock(mu);
  if (w) return w;
  if (!launched_by_mpirun()) return w = std::make_shared<SelfCommunicator>();
#ifdef KILN_WITH_MPI
  KILN_USER_CHECK(!g_finalized) << "kiln.dist: MPI was already finalized in this process";
  return w = start_mpi();
#else
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  KILN_USER_CHECK(n && std::atoi(n) == 1) << "kiln.dist: this process was started by mpirun, but kiln was built without MPI "
                                          << "(install libopenmpi-dev and rebuild kiln); distributed runs need it";
  return w = std::make_shared<SelfCommunicator>();
#endif
}

bool requests_testable_from_any_thread() {
#ifdef KILN_WITH_MPI
  return g_mpi_used ? g_serialized : true;  // without MPI, requests are done when started
#else
  return true;
#endif
}

void set_timeout(double seconds) {
  KILN_USER_CHECK(seconds > 0) << "kiln.dist: the collective timeout must be > 0 seconds, got " << seconds;
  g_timeout = seconds;
}

double timeout() { return g_timeout; }

void finalize() {
#ifdef KILN_WITH_MPI
  int fin = 0;
  if (g_started && !g_finalized) {
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
    g_finalized = true;
  }
#endif
}

}  // namespace kiln::dist
