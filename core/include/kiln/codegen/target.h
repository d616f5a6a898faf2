/** \file
 * Target: where code runs, parsed once from a string.
 *
 *   "llvm"                                     the host CPU as detected
 *   "llvm -mcpu=znver3 -num-cores=2"           a named CPU (its features from LLVM's tables)
 *   "llvm -mcpu=x86-64 -mattr=+avx2,+fma -fast-math"
 *   "cuda -arch=sm_90"                         an NVIDIA GPU (codegen elsewhere)
 *
 * Options for llvm: -mcpu, -mattr, -mtriple, -num-cores, -fast-math.
 * Options for cuda: -arch, -num-cores (SMs, for tuning), -fast-math.
 * An unknown kind or option raises kiln::Error listing the known ones.
 * `str()` is canonical: parse(t.str()) gives back the same target (for "llvm"
 * alone it names the detected CPU and core count, which is what the tuning
 * database keys on).
 */
#ifndef KILN_CODEGEN_TARGET_H
#define KILN_CODEGEN_TARGET_H

#include <string>
#include <vector>

#include "kiln/ir/dtype.h"

namespace kiln {

struct Target {
  enum class Kind : uint8_t { LLVM, CUDA };

  Kind kind = Kind::LLVM;
  /** llvm: the target triple (the host's unless -mtriple was given). */
  std::string triple;
  /** llvm: the CPU name LLVM knows ("znver3", "x86-64", "skylake-avx512"). */
  std::string mcpu;
  /** llvm: explicit feature changes as given ("+avx2", "-avx512f"). */
  std::vector<std::string> mattr;
  /** llvm: every feature enabled for mcpu + mattr, sorted, without '+' ("avx2", "fma", ...). */
  std::vector<std::string> features;
  /** cuda: the compute capability ("sm_90"). */
  std::string arch;
  /** Cores (CPU) or SMs (GPU) to plan for; 0 = unspecified. */
  int num_cores = 0;
  /** Allow reassociation, no NaN/inf, approximate reciprocals. Off by default (FMA contraction is always on). */
  bool fast_math = false;
  /** Width of the widest native float vector register: 512 (AVX-512), 256 (AVX/AVX2), 128 (SSE, NEON). */
  int vector_bits = 128;

  /** Parses a target string (see the file comment). Throws kiln::Error on bad input. */
  static Target parse(const std::string& s);
  /** Same as parse("llvm"): the host CPU with all its features. */
  static Target host();

  /** The canonical string: "llvm -mcpu=znver3 -mattr=+avx2 -num-cores=2 -fast-math". */
  std::string str() const;
  const char* kind_name() const;
  /** True when `feature` ("avx2", "fma", "avx512f") is enabled. */
  bool has_feature(const std::string& feature) const;
  /** Lanes of `t` that fill one native vector register (at least 1). */
  int natural_lanes(DataType t) const;
  /**
   * Architectural vector registers a kernel's register tile can use: 32 on
   * x86-64 with AVX-512 (zmm0-31) and on AArch64 (v0-v31), 16 on x86-64
   * without it (SSE/AVX/AVX2), 8 on 32-bit x86; 0 for cuda. Register tiles
   * larger than this spill to the stack.
   */
  int num_vector_registers() const;
  /**
   * llvm code for another machine: -mtriple names an architecture other than
   * this process's (aarch64 on x86-64). Such code is compiled and exported,
   * never run here.
   */
  bool is_cross() const;

  bool operator==(const Target& o) const { return str() == o.str(); }
  bool operator!=(const Target& o) const { return !(*this == o); }
};

}  // namespace kiln

#endif  // KILN_CODEGEN_TARGET_H
