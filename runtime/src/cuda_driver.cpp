// The CUDA driver API through dlopen: only the entry points a launch needs,
// declared here (kiln_runtime has no CUDA headers or libraries to link).
#include <dlfcn.h>

#include <atomic>
#include <mutex>

#include "kiln/runtime/cuda.h"
#include "kiln/support/error.h"

namespace kiln::cuda {

namespace {

using CUresult = int;  // 0 is CUDA_SUCCESS
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUdeviceptr = unsigned long long;
using CUevent = struct CUevent_st*;

struct Driver {
  void* lib = nullptr;
  std::string problem;  // why the driver cannot be used; empty when it can
  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*DeviceGetCount)(int*) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*CtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*ModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*ModuleUnload)(CUmodule) = nullptr;
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*MemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*MemFree)(CUdeviceptr) = nullptr;
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**) = nullptr;
  CUresult (*CtxSynchronize)() = nullptr;
  CUresult (*GetErrorString)(CUresult, const char**) = nullptr;
  // Timing (time_launch); null when the driver lacks them.
  CUresult (*EventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*EventRecord)(CUevent, void*) = nullptr;
  CUresult (*EventSynchronize)(CUevent) = nullptr;
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*EventDestroy)(CUevent) = nullptr;
  CUcontext ctx = nullptr;
};

// Set once cuInit succeeded and GPU 0's context is open in this process (driver_initialized).
std::atomic<bool> g_driver_ready{false};

template <typename F>
bool bind(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

bool bind_all(Driver& d) {
  return bind(d.lib, "cuInit", &d.Init) && bind(d.lib, "cuDeviceGetCount", &d.DeviceGetCount) && bind(d.lib, "cuDeviceGet", &d.DeviceGet) &&
         bind(d.lib, "cuDevicePrimaryCtxRetain", &d.PrimaryCtxRetain) && bind(d.lib, "cuCtxSetCurrent", &d.CtxSetCurrent) && bind(d.lib, "cuModuleLoadData", &d.ModuleLoadData) &&
         bind(d.lib, "cuModuleUnload", &d.ModuleUnload) && bind(d.lib, "cuModuleGetFunction", &d.ModuleGetFunction) && bind(d.lib, "cuMemAlloc_v2", &d.MemAlloc) &&
         bind(d.lib, "cuMemFree_v2", &d.MemFree) && bind(d.lib, "cuMemcpyHtoD_v2", &d.MemcpyHtoD) && bind(d.lib, "cuMemcpyDtoH_v2", &d.MemcpyDtoH) &&
         bind(d.lib, "cuLaunchKernel", &d.LaunchKernel) && bind(d.lib, "cuCtxSynchronize", &d.CtxSynchronize) && bind(d.lib, "cuGetErrorString", &d.GetErrorString);
}

// The event entry points: CUDA 13 names the elapsed-time call _v2.
void bind_events(Driver& d) {
  bind(d.lib, "cuEventCreate", &d.EventCreate);
  bind(d.lib, "cuEventRecord", &d.EventRecord);
  bind(d.lib, "cuEventSynchronize", &d.EventSynchronize);
  if (!bind(d.lib, "cuEventElapsedTime_v2", &d.EventElapsedTime)) bind(d.lib, "cuEventElapsedTime", &d.EventElapsedTime);
  if (!bind(d.lib, "cuEventDestroy_v2", &d.EventDestroy)) bind(d.lib, "cuEventDestroy", &d.EventDestroy);
}

// Loaded and initialised once: the library, cuInit, a device, its primary context.
Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    d.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d.lib) {
      d.problem = "libcuda.so.1 could not be loaded";
      return;
    }
    if (!bind_all(d)) {
      d.problem = "libcuda.so.1 lacks driver API entry points kiln needs (driver too old?)";
      return;
    }
    bind_events(d);
    int count = 0;
    CUresult r = d.Init(0);
    if (r == 0) r = d.DeviceGetCount(&count);
    if (r != 0 || count == 0) {
      d.problem = r != 0 ? "cuInit failed with CUDA error " + std::to_string(r) : "the driver reports no GPU";
      return;
    }
    CUdevice dev = 0;
    if (d.DeviceGet(&dev, 0) != 0 || d.PrimaryCtxRetain(&d.ctx, dev) != 0) d.problem = "could not open GPU 0";
    g_driver_ready = d.problem.empty();
  });
  return d;
}

void check(CUresult r, const char* what, const std::string& kernel) {
  if (r == 0) return;
  const char* msg = nullptr;
  driver().GetErrorString(r, &msg);
  KILN_USER_ERROR() << "CUDA error in " << what << " for kernel '" << kernel << "': " << (msg ? msg : "unknown error") << " (" << r << ")";
}

// A kernel ready to launch: its module loaded, its buffers on the device
// with the inputs copied in, its parameters laid out. Buffers are freed and
// the module unloaded on every way out.
struct Prepared {
  Prepared(Driver& drv, const std::string& image, const std::string& kernel, const int64_t grid[3], const int64_t block[3], const std::vector<KernelArg>& args)
      : d(drv), name(kernel), args(args) {
    KILN_USER_CHECK(d.problem.empty()) << "no CUDA driver (libcuda.so.1) / no GPU on this machine (" << d.problem << "); kernel '" << kernel
                                       << "' cannot run here; its CUDA source and cubin are still available, and simulate() runs it on the CPU";
    check(d.CtxSetCurrent(d.ctx), "cuCtxSetCurrent", kernel);
    // The image must end in a NUL when it is PTX text; a cubin ignores the extra byte.
    std::string img = image + '\0';
    check(d.ModuleLoadData(&module, img.data()), "cuModuleLoadData", kernel);
    check(d.ModuleGetFunction(&fn, module, kernel.c_str()), "cuModuleGetFunction", kernel);
    for (int k = 0; k < 3; ++k) this->grid[k] = static_cast<unsigned>(grid[k]), this->block[k] = static_cast<unsigned>(block[k]);
    // Values behind the pointers cuLaunchKernel reads: one slot per argument.
    ptrs.resize(args.size());
    i32.resize(args.size());
    i64.resize(args.size());
    f32.resize(args.size());
    f64.resize(args.size());
    params.resize(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      const KernelArg& a = args[i];
      switch (a.kind) {
        case KernelArg::Kind::Buffer:
          check(d.MemAlloc(&ptrs[i], a.nbytes ? a.nbytes : 1), "cuMemAlloc", kernel);
          buffers.push_back(ptrs[i]);
          if (a.nbytes) check(d.MemcpyHtoD(ptrs[i], a.host, a.nbytes), "cuMemcpyHtoD", kernel);
          params[i] = &ptrs[i];
          break;
        case KernelArg::Kind::Int32: i32[i] = static_cast<int32_t>(a.int_value), params[i] = &i32[i]; break;
        case KernelArg::Kind::Int64: i64[i] = a.int_value, params[i] = &i64[i]; break;
        case KernelArg::Kind::Float32: f32[i] = static_cast<float>(a.float_value), params[i] = &f32[i]; break;
        case KernelArg::Kind::Float64: f64[i] = a.float_value, params[i] = &f64[i]; break;
      }
    }
  }
  ~Prepared() {
    for (CUdeviceptr p : buffers) d.MemFree(p);
    if (module) d.ModuleUnload(module);
  }
  void run() { check(d.LaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, nullptr, params.data(), nullptr), "cuLaunchKernel", name); }
  void wait() { check(d.CtxSynchronize(), "the kernel run (cuCtxSynchronize)", name); }
  void copy_back() {
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].kind == KernelArg::Kind::Buffer && args[i].copy_back && args[i].nbytes) check(d.MemcpyDtoH(args[i].host, ptrs[i], args[i].nbytes), "cuMemcpyDtoH", name);
  }

  Driver& d;
  std::string name;
  const std::vector<KernelArg>& args;
  CUmodule module = nullptr;
  CUfunction fn = nullptr;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  std::vector<CUdeviceptr> buffers, ptrs;
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  std::vector<float> f32;
  std::vector<double> f64;
  std::vector<void*> params;
};

// Two events, destroyed on every way out.
struct Events {
  explicit Events(Driver& drv, const std::string& kernel) : d(drv) {
    KILN_USER_CHECK(d.EventCreate && d.EventRecord && d.EventSynchronize && d.EventElapsedTime && d.EventDestroy)
        << "timing kernel '" << kernel << "': this CUDA driver lacks the event API (cuEventCreate / cuEventElapsedTime)";
    check(d.EventCreate(&start, 0), "cuEventCreate", kernel);
    check(d.EventCreate(&stop, 0), "cuEventCreate", kernel);
  }
  ~Events() {
    if (start) d.EventDestroy(start);
    if (stop) d.EventDestroy(stop);
  }
  Driver& d;
  CUevent start = nullptr, stop = nullptr;
};

}  // namespace

std::string driver_unavailable_reason() { return driver().problem; }

bool driver_initialized() { return g_driver_ready.load(); }

void launch(const std::string& image, const std::string& kernel, const int64_t grid[3], const int64_t block[3], const std::vector<KernelArg>& args) {
  Prepared k(driver(), image, kernel, grid, block, args);
  k.run();
  k.wait();
  k.copy_back();
}

std::vector<double> time_launch(const std::string& image, const std::string& kernel, const int64_t grid[3], const int64_t block[3], const std::vector<KernelArg>& args,
                                int number, int repeat) {
  KILN_USER_CHECK(number >= 1 && repeat >= 1) << "timing kernel '" << kernel << "': number (" << number << ") and repeat (" << repeat << ") must be at least 1";
  Prepared k(driver(), image, kernel, grid, block, args);
  Events ev(k.d, kernel);
  k.run();  // warm-up: module load and first-launch costs stay out of the figures
  k.wait();
  std::vector<double> seconds;
  for (int r = 0; r < repeat; ++r) {
    check(k.d.EventRecord(ev.start, nullptr), "cuEventRecord", kernel);
    for (int i = 0; i < number; ++i) k.run();
    check(k.d.EventRecord(ev.stop, nullptr), "cuEventRecord", kernel);
    check(k.d.EventSynchronize(ev.stop), "the timed runs (cuEventSynchronize)", kernel);
    float ms = 0;
    check(k.d.EventElapsedTime(&ms, ev.start, ev.stop), "cuEventElapsedTime", kernel);
    seconds.push_back(ms * 1e-3 / number);
  }
  k.copy_back();
  return seconds;
}

}  // namespace kiln::cuda
