/** \file
 * What target.cpp needs from LLVM, behind a header without LLVM types:
 * host detection and the feature set of a named CPU. Private to core/src/codegen.
 */
#ifndef KILN_CODEGEN_LLVM_LLVM_TARGET_INFO_H
#define KILN_CODEGEN_LLVM_LLVM_TARGET_INFO_H

#include <string>
#include <vector>

namespace kiln::codegen::detail {

/** Registers the native target with LLVM once per process (thread-safe). */
void ensure_llvm_initialized();
/** The triple of the running process ("x86_64-pc-linux-gnu"). */
std::string llvm_host_triple();
/** LLVM's name of the host CPU ("znver3"). */
std::string llvm_host_cpu();
/** The host's enabled features, without '+' ("avx2", "fma", ...). */
std::vector<std::string> llvm_host_features();
/**
 * The features the host CPU's name enables in LLVM's table but the host
 * lacks (a VM hiding AMX from a Sapphire Rapids), sorted; computed once.
 */
const std::vector<std::string>& llvm_host_hidden_features();
/**
 * The features enabled for `cpu` on `triple` after applying `mattr`
 * ("+avx2,-avx512f"), without '+'. Throws kiln::Error for an unknown CPU or
 * feature, listing the known ones.
 */
std::vector<std::string> llvm_cpu_features(const std::string& triple, const std::string& cpu, const std::string& mattr);

}  // namespace kiln::codegen::detail

#endif  // KILN_CODEGEN_LLVM_LLVM_TARGET_INFO_H
