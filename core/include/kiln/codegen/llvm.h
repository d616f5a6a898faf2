/** \file
 * The LLVM CPU backend: lowered PrimFuncs to machine code, in memory (ORC
 * JIT) or as an object file. No LLVM type crosses this header.
 *
 * Input: PrimFuncs after lowering and the loop passes: storage flattened
 * (one index per load and store, 1-D allocations), vector loops already
 * rewritten into Ramp/Broadcast expressions. Each PrimFunc becomes an
 * external function `int32_t name(void* const* args)` (c_runtime_api.h).
 * The body is optimised with LLVM's O3 pipeline for the target's CPU and
 * features. Assumptions the generated code makes:
 *  - distinct buffer parameters do not overlap (they are marked noalias);
 *  - buffer data is aligned to its element size (nothing wider is assumed,
 *    so views at any element offset work);
 *  - signed integer arithmetic of 32 and 64 bits does not overflow.
 * Parallel loops run through kiln_parallel_launch; large or symbolic
 * allocations through kiln_alloc_workspace; failed asserts call
 * kiln_set_last_error and return -1.
 */
#ifndef KILN_CODEGEN_LLVM_H
#define KILN_CODEGEN_LLVM_H

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/codegen/kernel_metadata.h"  // kernel_info: the metadata build_llvm attaches
#include "kiln/codegen/target.h"
#include "kiln/ir/function.h"
#include "kiln/runtime/c_runtime_api.h"
#include "kiln/runtime/module.h"

namespace kiln::codegen {

/** Where the time of one build went, in milliseconds. */
struct BuildTimings {
  double codegen_ms = 0;   ///< IR to LLVM IR
  double optimize_ms = 0;  ///< the O3 pipeline
  double emit_ms = 0;      ///< LLVM IR to machine code
  double link_ms = 0;      ///< JIT session, linking, symbol lookup
  double total_ms() const { return codegen_ms + optimize_ms + emit_ms + link_ms; }
};

struct JitOptions {
  /**
   * Symbols resolved before the process's own (name, address): tests use it
   * to stand in for runtime functions such as kiln_parallel_launch.
   */
  std::vector<std::pair<std::string, void*>> symbol_overrides;
};

/** Kernels compiled in memory. Copies share the code, which lives as long as any copy. */
class JitModule {
 public:
  JitModule() = default;
  bool defined() const { return impl_ != nullptr; }
  /** The kernel called `name`; throws kiln::Error listing the kernels when there is none. */
  KilnKernel get_function(const std::string& name) const;
  /** Any symbol of the module (a kernel, an outlined body), or nullptr. */
  void* lookup_symbol(const std::string& name) const;
  /** Kernel names, in the order the functions were given. */
  const std::vector<std::string>& function_names() const;
  const BuildTimings& timings() const;

  struct Impl;
  explicit JitModule(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

/** Compiles `funcs` for `target` (kind llvm) and links them into this process. Throws kiln::Error. */
JitModule jit_compile(const std::vector<PrimFunc>& funcs, const Target& target, const JitOptions& options = {});

/**
 * Compiles `funcs` into a runtime Module: the kernels plus their metadata
 * (kernel_info: parameter names, dtypes and shapes, symbolic ones as
 * expressions of the scalar parameters), callable through Module::call,
 * which binds and checks every shape at each call.
 */
Module build_llvm(const std::vector<PrimFunc>& funcs, const Target& target);

/** Writes a relocatable, position-independent object file (ELF on Linux) defining the kernels. */
void emit_object_file(const std::vector<PrimFunc>& funcs, const Target& target, const std::string& path);

/**
 * Writes `funcs` as a shared library that Module::load reads: their object
 * code, `kiln_module_metadata` (the JSON of `kernels`) and
 * `kiln_library_info` (runtime ABI, kiln version, triple, CPU and features),
 * linked by the system C compiler ($CC, default cc; "-shared -fPIC")
 * against this process's libkiln_runtime, with an rpath to its directory,
 * then sealed (library_seal.h: a checksum and export id that Module::load
 * checks before dlopen). Written beside `path` and renamed, so a failure
 * leaves no partial file.
 * Throws kiln::Error naming $CC when there is no compiler, or with the
 * compiler's output when linking fails.
 */
void export_library(const std::vector<PrimFunc>& funcs, const Target& target, const std::vector<KernelInfo>& kernels,
                    const std::string& path);

/** Extra symbols of an exported library (a model's plan and weights). */
struct LibraryExtras {
  /** (symbol, text): exported as `extern "C" const char* symbol`, pointing at `text`. */
  std::vector<std::pair<std::string, std::string>> strings;
  /**
   * (symbol, file): the file's bytes, embedded by the assembler (.incbin, so
   * large weights cost no C compile), exported read-only and 64-byte aligned
   * as `symbol`, with `extern "C" const uint64_t symbol_size`.
   */
  std::vector<std::pair<std::string, std::string>> blobs;
  /**
   * Link kiln_runtime (libkiln_runtime.a, found beside the process's
   * libkiln_runtime.so) and the C++ runtime into the library, bound to
   * themselves (-Bsymbolic): it then needs only libc, libm and libpthread,
   * and carries the C API (c_api.h) for programs that dlopen it.
   */
  bool static_runtime = false;
  /** The export id sealed into the library (library_seal.h; a model's plan and weights file record it too); empty: a fresh one. */
  std::string export_id;
};

/**
 * Writes the kernels of several modules built by build_llvm (one target for
 * all; kernel names distinct across them) as one shared library (one object
 * for all kernels, one kiln_module_metadata), with `extras`. Same linking,
 * errors and atomic rename as export_library.
 */
void export_modules_library(const std::vector<Module>& modules, const std::string& path, const LibraryExtras& extras = {});

/** LLVM IR text of the module, before or after the O3 pipeline (for debugging and tests). */
std::string emit_llvm_ir(const std::vector<PrimFunc>& funcs, const Target& target, bool optimize = true);

/** Assembly text of the optimised module (for debugging and tests). */
std::string emit_assembly(const std::vector<PrimFunc>& funcs, const Target& target);

}  // namespace kiln::codegen

#endif  // KILN_CODEGEN_LLVM_H
