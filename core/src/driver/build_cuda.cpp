// build_cuda: the GPU lowering pipeline, CUDA C and NVRTC; running a built
// kernel on the GPU or in the simulator.
#include "kiln/driver/build_cuda.h"

#include <sstream>

#include "kiln/codegen/cuda.h"
#include "kiln/codegen/kernel_metadata.h"
#include "kiln/ir/printer.h"
#include "kiln/pass/passes.h"
#include "kiln/runtime/arg_binder.h"
#include "kiln/runtime/cuda.h"
#include "kiln/support/error.h"
#include "kiln/support/ir_log.h"
#include "kiln/te/lower.h"

namespace kiln {

PrimFunc lower_gpu(const te::Schedule& sch, const std::vector<te::Tensor>& args, const std::string& name, const GpuLowerOptions& options) {
  te::LowerOptions raw;
  raw.run_passes = false;
  PrimFunc f = te::lower(sch, args, name, raw);
  IrLog log(options.dump_ir);
  auto step = [&](const char* what, PrimFunc (*pass)(const PrimFunc&)) {
    f = log.run(what, [&] { return pass(f); }, [&](const PrimFunc& out) {
      if (out.same_as(f)) return std::string();
      std::ostringstream os;
      os << out;
      return os.str();
    });
  };
  step("storage_flatten", pass::storage_flatten);
  step("gpu_storage_scope", pass::gpu_storage_scope);
  step("split_thread_nests", pass::split_thread_nests);
  step("simplify", pass::simplify);
  step("remove_no_op", pass::remove_no_op);
  pass::verify_gpu_kernel(f);
  // Before insert_barriers: the collective's result store is what later nests wait for.
  step("lower_tensor_core", pass::lower_tensor_core);
  step("lower_thread_allreduce", pass::lower_thread_allreduce);
  if (options.insert_barriers) step("insert_barriers", pass::insert_barriers);
  return f;
}

CudaModule build_cuda(const te::Schedule& sch, const std::vector<te::Tensor>& args, const Target& target, const std::string& name, const GpuLowerOptions& options, bool compile) {
  KILN_USER_CHECK(target.kind == Target::Kind::CUDA) << "build_cuda for target '" << target.str() << "': use a cuda target such as \"cuda -arch=sm_90\"";
  CudaModule m;
  m.target = target;
  m.func = lower_gpu(sch, args, name, options);
  m.launch = pass::launch_config(m.func);
  m.source = codegen::codegen_cuda(m.func, target, m.launch);
  if (compile) m.cubin = codegen::nvrtc_compile(m.source, codegen::kernel_symbol(name), target, codegen::NvrtcOutput::Cubin);
  return m;
}

std::string CudaModule::ptx() const { return codegen::nvrtc_compile(source, codegen::kernel_symbol(name()), target, codegen::NvrtcOutput::Ptx); }

GpuSimulation CudaModule::simulate(const std::vector<Arg>& args) const { return simulate_gpu_args(func, args); }

// Arguments checked and shape-bound as for a CPU kernel, then handed to the
// driver as host buffers (every buffer copied back: the kernel may write any).
namespace {

// The kernel's arguments for the driver: buffers by their host memory (copied in and back), scalars by value.
std::vector<cuda::KernelArg> driver_args(const CudaModule& m, const std::vector<Arg>& args, PackedArgs* packed, const KernelInfo& info) {
  std::string why = cuda::driver_unavailable_reason();
  KILN_USER_CHECK(why.empty()) << "no CUDA driver (libcuda.so.1) / no GPU on this machine (" << why << "); kernel '" << m.name()
                               << "' cannot run here; its CUDA source and cubin are still available, and simulate() runs it on the CPU";
  KILN_USER_CHECK(!m.cubin.empty()) << "kernel '" << m.name() << "' was built without compiling (compile = false); build it again with NVRTC available";
  std::vector<cuda::KernelArg> out;
  for (size_t i = 0; i < info.params.size(); ++i) {
    const ParamInfo& p = info.params[i];
    cuda::KernelArg a;
    if (p.is_buffer) {
      const DLTensor* t = args[i].tensor();
      size_t n = 1;
      for (int d = 0; d < t->ndim; ++d) n *= static_cast<size_t>(t->shape[d]);
      a.host = packed->data()[i];
      a.nbytes = n * p.dtype.bytes();
      a.copy_back = true;
    } else {
      const void* v = packed->data()[i];
      bool is_f = p.dtype.is_float(), wide = p.dtype.bits() == 64;
      a.kind = is_f ? (wide ? cuda::KernelArg::Kind::Float64 : cuda::KernelArg::Kind::Float32) : (wide ? cuda::KernelArg::Kind::Int64 : cuda::KernelArg::Kind::Int32);
      if (is_f) a.float_value = wide ? *static_cast<const double*>(v) : *static_cast<const float*>(v);
      else a.int_value = wide ? *static_cast<const int64_t*>(v) : *static_cast<const int32_t*>(v);
    }
    out.push_back(a);
  }
  return out;
}

}  // namespace

void CudaModule::run(const std::vector<Arg>& args) const {
  KernelInfo info = codegen::kernel_info(func);
  PackedArgs packed(info, args);
  cuda::launch(cubin, codegen::kernel_symbol(name()), launch.grid, launch.block, driver_args(*this, args, &packed, info));
}

std::vector<double> CudaModule::time(const std::vector<Arg>& args, int number, int repeat) const {
  KernelInfo info = codegen::kernel_info(func);
  PackedArgs packed(info, args);
  return cuda::time_launch(cubin, codegen::kernel_symbol(name()), launch.grid, launch.block, driver_args(*this, args, &packed, info), number, repeat);
}

}  // namespace kiln
