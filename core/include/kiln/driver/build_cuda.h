/** \file
 * Building for a cuda target: lowering with the GPU passes, CUDA C, NVRTC.
 *
 *   CudaModule m = build_cuda(sch, {A, B, C}, Target::parse("cuda -arch=sm_90"));
 *   m.source   // the CUDA C
 *   m.cubin    // NVRTC's cubin for sm_90
 *   m.simulate({a, b, c});  // runs on the CPU, checks for races (no GPU needed)
 *   m.run({a, b, c});       // on the GPU; kiln::Error when there is none
 */
#ifndef KILN_DRIVER_BUILD_CUDA_H
#define KILN_DRIVER_BUILD_CUDA_H

#include <string>
#include <vector>

#include "kiln/codegen/target.h"
#include "kiln/interp/gpu_simulator.h"
#include "kiln/pass/gpu.h"
#include "kiln/runtime/module.h"
#include "kiln/te/schedule.h"

namespace kiln {

struct GpuLowerOptions {
  /** Off: no barriers (a test hook: the simulator must then report the race). */
  bool insert_barriers = true;
  /** Print the IR after each step to stderr (also KILN_DUMP_IR=1; a KILN_DUMP_IR pass name still filters). */
  bool dump_ir = false;
};

/**
 * Lowers the schedule to a GPU kernel: the loop nest, then storage_flatten,
 * gpu_storage_scope, split_thread_nests, simplify, remove_no_op, verify_gpu_kernel,
 * lower_thread_allreduce and insert_barriers (kiln/pass/gpu.h). Loops keep their kinds (no unrolling
 * or vectorizing passes: CUDA C says #pragma unroll, and codegen makes
 * float4 accesses itself). Throws kiln::Error for a schedule that is no
 * valid kernel (an unbound loop, ...), naming the loop and the fix.
 */
PrimFunc lower_gpu(const te::Schedule& sch, const std::vector<te::Tensor>& args, const std::string& name = "main", const GpuLowerOptions& options = {});

/** A kernel built for a cuda target. */
struct CudaModule {
  PrimFunc func;
  Target target;
  pass::LaunchConfig launch;
  std::string source;
  /** NVRTC's cubin for target.arch; empty when built with compile = false. */
  std::string cubin;

  const std::string& name() const { return func.name(); }
  /** PTX (compute_XX) of the source, compiled now. */
  std::string ptx() const;
  /** Runs on GPU 0 with host arrays (copied in and back); kiln::Error without a driver or GPU. */
  void run(const std::vector<Arg>& args) const;
  /** Times it on GPU 0 with CUDA events (cuda::time_launch): seconds per call, one per round of `number` calls; results copied back. */
  std::vector<double> time(const std::vector<Arg>& args, int number = 10, int repeat = 5) const;
  /** Runs on the CPU in the GPU simulator (kiln/interp/gpu_simulator.h). */
  GpuSimulation simulate(const std::vector<Arg>& args) const;
};

/** lower_gpu, launch_config, codegen_cuda and (with compile) NVRTC. Throws kiln::Error. */
CudaModule build_cuda(const te::Schedule& sch, const std::vector<te::Tensor>& args, const Target& target, const std::string& name = "main", const GpuLowerOptions& options = {},
                      bool compile = true);

}  // namespace kiln

#endif  // KILN_DRIVER_BUILD_CUDA_H
