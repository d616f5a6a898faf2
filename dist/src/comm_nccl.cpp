// The NCCL communicator, loaded with dlopen (libnccl.so.2 and libcudart) so
// that kiln neither links nor needs CUDA. The few declarations it uses are
// written here from NCCL's and CUDA's documented C ABI. Host buffers are
// staged through one device buffer; each call is polled against the same
// deadline as MPI's (a dead peer aborts the NCCL communicator and throws).
#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "kiln/dist/communicator.h"
#include "kiln/support/error.h"

namespace kiln::dist {

namespace {

using ncclComm_t = void*;
using cudaStream_t = void*;
struct ncclUniqueId {
  char internal[128];
};
enum ncclDataType { ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt64 = 4, ncclFloat32 = 7, ncclFloat64 = 8 };
constexpr int ncclSum = 0, cudaSuccess = 0, cudaErrorNotReady = 600, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2;

struct Api {
  void* nccl = nullptr;
  void* cudart = nullptr;
  int (*GetUniqueId)(ncclUniqueId*);
  int (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  int (*AllReduce)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
  int (*AllGather)(const void*, void*, size_t, int, ncclComm_t, cudaStream_t);
  int (*ReduceScatter)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
  int (*Broadcast)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
  int (*Send)(const void*, size_t, int, int, ncclComm_t, cudaStream_t);
  int (*Recv)(void*, size_t, int, int, ncclComm_t, cudaStream_t);
  int (*GroupStart)();
  int (*GroupEnd)();
  int (*CommAbort)(ncclComm_t);
  int (*CommGetAsyncError)(ncclComm_t, int*);
  const char* (*GetErrorString)(int);
  int (*GetDeviceCount)(int*);
  int (*SetDevice)(int);
  int (*Malloc)(void**, size_t);
  int (*Free)(void*);
  int (*Memcpy)(void*, const void*, size_t, int);
  int (*StreamCreate)(cudaStream_t*);
  int (*StreamQuery)(cudaStream_t);
};

void* open_first(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
  return nullptr;
}

template <typename F>
void bind(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  KILN_USER_CHECK(fn != nullptr) << "kiln.dist NCCL: symbol " << name << " is missing from the loaded NCCL/CUDA runtime (too old?)";
}

const Api& api() {
  static const Api a = [] {
    Api x{};
    x.nccl = open_first({"libnccl.so.2", "libnccl.so", "/usr/local/cuda/lib64/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"});
    KILN_USER_CHECK(x.nccl) << "kiln.dist NCCL: libnccl.so.2 was not found (searched the loader path and /usr/local/cuda/lib64); "
                            << "install NCCL or use the MPI backend";
    x.cudart = open_first({"libcudart.so", "libcudart.so.12", "libcudart.so.11.0", "/usr/local/cuda/lib64/libcudart.so"});
    KILN_USER_CHECK(x.cudart) << "kiln.dist NCCL: libcudart.so was not found (CUDA runtime); NCCL needs it";
    bind(x.nccl, x.GetUniqueId, "ncclGetUniqueId");
    bind(x.nccl, x.CommInitRank, "ncclCommInitRank");
    bind(x.nccl, x.AllReduce, "ncclAllReduce");
    bind(x.nccl, x.AllGather, "ncclAllGather");
    bind(x.nccl, x.ReduceScatter, "ncclReduceScatter");
    bind(x.nccl, x.Broadcast, "ncclBroadcast");
    bind(x.nccl, x.Send, "ncclSend");
    bind(x.nccl, x.Recv, "ncclRecv");
    bind(x.nccl, x.GroupStart, "ncclGroupStart");
    bind(x.nccl, x.GroupEnd, "ncclGroupEnd");
    bind(x.nccl, x.CommAbort, "ncclCommAbort");
    bind(x.nccl, x.CommGetAsyncError, "ncclCommGetAsyncError");
    bind(x.nccl, x.GetErrorString, "ncclGetErrorString");
    bind(x.cudart, x.GetDeviceCount, "cudaGetDeviceCount");
    bind(x.cudart, x.SetDevice, "cudaSetDevice");
    bind(x.cudart, x.Malloc, "cudaMalloc");
    bind(x.cudart, x.Free, "cudaFree");
    bind(x.cudart, x.Memcpy, "cudaMemcpy");
    bind(x.cudart, x.StreamCreate, "cudaStreamCreate");
    bind(x.cudart, x.StreamQuery, "cudaStreamQuery");
    return x;
  }();
  return a;
}

int nccl_type(DataType t) {
  if (t == DataType::Float(32)) return ncclFloat32;
  if (t == DataType::Float(64)) return ncclFloat64;
  if (t == DataType::Int(32)) return ncclInt32;
  if (t == DataType::Int(64)) return ncclInt64;
  if (t == DataType::Int(8)) return ncclInt8;
  if (t == DataType::UInt(8) || t.is_bool()) return ncclUint8;
  KILN_USER_ERROR() << "kiln.dist NCCL: unsupported dtype " << t.str();
  return 0;
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Communicator> boot, int device) : boot_(std::move(boot)), device_(device) {
    const Api& a = api();
    int n = 0;
    KILN_USER_CHECK(a.GetDeviceCount(&n) == cudaSuccess && n > 0) << "kiln.dist NCCL: no CUDA GPU is visible to this process";
    KILN_USER_CHECK(device >= 0 && device < n) << "kiln.dist NCCL: GPU " << device << " does not exist (" << n << " visible)";
    check_cuda(a.SetDevice(device), "cudaSetDevice");
    ncclUniqueId id{};
    if (boot_->rank() == 0) check(a.GetUniqueId(&id), "ncclGetUniqueId");
    boot_->broadcast(&id, sizeof(id), DataType::UInt(8), 0);
    check(a.CommInitRank(&comm_, boot_->size(), id, boot_->rank()), "ncclCommInitRank");
    check_cuda(a.StreamCreate(&stream_), "cudaStreamCreate");
  }
  int rank() const override { return boot_->rank(); }
  int size() const override { return boot_->size(); }
  std::string backend() const override { return "nccl"; }

  void all_reduce(void* buf, int64_t n, DataType t) override {
    char* d = stage(buf, bytes_of(n, t), 0, bytes_of(n, t));
    check(api().AllReduce(d, d, n, nccl_type(t), ncclSum, comm_, stream_), "ncclAllReduce");
    finish(buf, d, bytes_of(n, t), "all_reduce");
  }
  void all_gather(const void* s, void* r, int64_t n, DataType t) override {
    int64_t b = bytes_of(n, t);
    char* d = stage(s, b, b, b * size());
    check(api().AllGather(d, d + b, n, nccl_type(t), comm_, stream_), "ncclAllGather");
    finish(r, d + b, b * size(), "all_gather");
  }
  void reduce_scatter(const void* s, void* r, int64_t n, DataType t) override {
    int64_t b = bytes_of(n, t);
    char* d = stage(s, b * size(), 0, b * size() + b);
    check(api().ReduceScatter(d, d + b * size(), n, nccl_type(t), ncclSum, comm_, stream_), "ncclReduceScatter");
    finish(r, d + b * size(), b, "reduce_scatter");
  }
  void all_to_all(const void* s, void* r, int64_t n, DataType t) override {
    int64_t b = bytes_of(n, t), total = b * size();
    char* d = stage(s, total, 0, 2 * total);
    api().GroupStart();
    for (int p = 0; p < size(); ++p) {
      check(api().Send(d + p * b, n, nccl_type(t), p, comm_, stream_), "ncclSend");
      check(api().Recv(d + total + p * b, n, nccl_type(t), p, comm_, stream_), "ncclRecv");
    }
    api().GroupEnd();
    finish(r, d + total, total, "all_to_all");
  }
  void broadcast(void* buf, int64_t n, DataType t, int root) override {
    char* d = stage(buf, bytes_of(n, t), 0, bytes_of(n, t));
    check(api().Broadcast(d, d, n, nccl_type(t), root, comm_, stream_), "ncclBroadcast");
    finish(buf, d, bytes_of(n, t), "broadcast");
  }
  void send(const void* buf, int64_t n, DataType t, int peer, int) override {
    char* d = stage(buf, bytes_of(n, t), 0, bytes_of(n, t));
    check(api().Send(d, n, nccl_type(t), peer, comm_, stream_), "ncclSend");
    finish(nullptr, d, 0, "send");
  }
  void recv(void* buf, int64_t n, DataType t, int peer, int) override {
    char* d = stage(nullptr, 0, 0, bytes_of(n, t));
    check(api().Recv(d, n, nccl_type(t), peer, comm_, stream_), "ncclRecv");
    finish(buf, d, bytes_of(n, t), "recv");
  }
  void barrier() override {
    int32_t x = 0;
    all_reduce(&x, 1, DataType::Int(32));
  }
  std::shared_ptr<Communicator> split(int color, int key) override {
    return std::make_shared<NcclCommunicator>(boot_->split(color, key), device_);
  }

 private:
  // Makes the device buffer at least `total` bytes and copies `n` host bytes to offset `at`.
  char* stage(const void* host, int64_t n, int64_t at, int64_t total) {
    const Api& a = api();
    if (total > cap_) {
      if (dev_) a.Free(dev_);
      check_cuda(a.Malloc(&dev_, total), "cudaMalloc");
      cap_ = total;
    }
    char* d = static_cast<char*>(dev_);
    if (n) check_cuda(a.Memcpy(d + at, host, n, cudaMemcpyHostToDevice), "cudaMemcpy to the GPU");
    return d;
  }
  // Waits for the stream (with the deadline), then copies the result back.
  void finish(void* host, const char* d, int64_t n, const char* what) {
    const Api& a = api();
    auto start = std::chrono::steady_clock::now();
    for (;;) {
      int q = a.StreamQuery(stream_);
      if (q == cudaSuccess) break;
      KILN_USER_CHECK(q == cudaErrorNotReady) << "kiln.dist NCCL: " << what << " failed (CUDA error " << q << ")";
      int async = 0;
      a.CommGetAsyncError(comm_, &async);
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (async != 0 || waited > timeout()) {
        a.CommAbort(comm_);
        KILN_USER_ERROR() << "kiln.dist NCCL: " << what << " on rank " << rank() << " of " << size()
                          << (async ? std::string(" failed: ") + a.GetErrorString(async) : " did not complete within the timeout")
                          << "; a peer rank died or hangs";
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (n) check_cuda(a.Memcpy(host, d, n, cudaMemcpyDeviceToHost), "cudaMemcpy from the GPU");
  }
  static void check(int r, const char* what) {
    KILN_USER_CHECK(r == 0) << "kiln.dist NCCL: " << what << " failed: " << api().GetErrorString(r);
  }
  static void check_cuda(int r, const char* what) { KILN_USER_CHECK(r == cudaSuccess) << "kiln.dist NCCL: " << what << " failed (CUDA error " << r << ")"; }

  std::shared_ptr<Communicator> boot_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* dev_ = nullptr;
  int64_t cap_ = 0;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl(const std::shared_ptr<Communicator>& bootstrap, int device) {
  KILN_USER_CHECK(bootstrap != nullptr) << "kiln.dist NCCL: needs a bootstrap communicator (world()) to share its id";
  return std::make_shared<NcclCommunicator>(bootstrap, device);
}

}  // namespace kiln::dist
