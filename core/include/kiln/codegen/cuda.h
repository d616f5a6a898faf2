/** \file
 * The CUDA backend's compiler half: CUDA C from a lowered GPU kernel, and
 * NVRTC (loaded with dlopen, so kiln builds and runs without the CUDA
 * toolkit) to compile it for an architecture. Launching lives in the
 * runtime (kiln/runtime/cuda.h); lowering for the GPU in
 * kiln/driver/build_cuda.h.
 */
#ifndef KILN_CODEGEN_CUDA_H
#define KILN_CODEGEN_CUDA_H

#include <string>

#include "kiln/codegen/target.h"
#include "kiln/ir/function.h"
#include "kiln/pass/gpu.h"

namespace kiln::codegen {

/**
 * One `extern "C" __global__` kernel named kernel_symbol(f.name()) from a kernel lowered for
 * the GPU (see kiln/pass/gpu.h for its shape). Buffer parameters become
 * `T* __restrict__`, scalars pass by value, in f's parameter order. Block
 * and thread loops read blockIdx/threadIdx (guarded where a loop binds fewer
 * threads than `launch`), shared allocations are `__shared__` arrays, local
 * ones per-thread arrays (a block-level local buffer shrunk to one thread's
 * part when every access adds the same thread offset: the 16x16 tile of a
 * block becomes a thread's 2x2 registers), block-level statements without
 * thread loops run on thread 0, unrolled loops get `#pragma unroll`, a vectorized
 * float32 loop of 2 or 4 lanes storing dst[b + v] from loads src[c + v]
 * (b, c provably aligned, global or shared, dst not read) becomes one
 * float2/float4 load per source and one store, the lanes computed one by
 * one (other vectorized loops stay unrolled scalar loops). With target.fast_math the
 * fast intrinsics (__expf, ...) are used. Throws kiln::Error on IR it cannot
 * express (vector expressions: lower without vectorize_loops).
 */
std::string codegen_cuda(const PrimFunc& f, const Target& target, const pass::LaunchConfig& launch);

/** The kernel's symbol in the CUDA C for a function name: a C identifier, "main" -> "main_kernel". */
std::string kernel_symbol(const std::string& name);

/**
 * True when libnvrtc can be loaded; otherwise *why says what was tried. It is
 * looked for as libnvrtc.so(.13/.12) on the library path and in
 * /usr/local/cuda/lib64, or only at $KILN_NVRTC_LIBRARY when that is set;
 * once per process.
 */
bool nvrtc_available(std::string* why = nullptr);

enum class NvrtcOutput { Cubin, Ptx };

/**
 * Compiles `source` with NVRTC for target.arch ("sm_90"): a cubin for that
 * architecture, or PTX for compute_XX (which newer drivers JIT). -fast-math
 * in the target adds --use_fast_math. Throws kiln::Error when NVRTC cannot be
 * loaded ("NVRTC (libnvrtc.so) was not found ...") or the compile fails (the
 * NVRTC log, then the source with line numbers).
 */
std::string nvrtc_compile(const std::string& source, const std::string& kernel_name, const Target& target, NvrtcOutput output = NvrtcOutput::Cubin);

}  // namespace kiln::codegen

#endif  // KILN_CODEGEN_CUDA_H
