/** \file
 * What an exported kernel library says about itself, beyond its kernels: the
 * runtime ABI it was built for, the kiln that built it, and the machine it
 * runs on (triple, CPU, CPU features). Module::export_library writes it as
 *   extern "C" const char* kiln_library_info;   // JSON, see LibraryInfo::to_json
 * and Module::load reads it before anything else in the library, so that a
 * library for another ABI or for CPU features the host lacks is refused with
 * a message instead of crashing (SIGILL) at the first call. Libraries without
 * the symbol (hand-written, older exports) load unchecked.
 */
#ifndef KILN_RUNTIME_LIBRARY_INFO_H
#define KILN_RUNTIME_LIBRARY_INFO_H

#include <string>
#include <vector>

namespace kiln {

/**
 * The calling convention and metadata format shared by exported libraries and
 * kiln_runtime. Bump it when either changes incompatibly; the loader runs
 * libraries of versions kMinRuntimeAbiVersion..kRuntimeAbiVersion.
 */
inline constexpr int kRuntimeAbiVersion = 1;
inline constexpr int kMinRuntimeAbiVersion = 1;
/** kiln's version, recorded in exported libraries. */
const char* kiln_version();

struct LibraryInfo {
  int abi_version = kRuntimeAbiVersion;
  std::string kiln_version;
  std::string triple;  ///< LLVM target triple, e.g. x86_64-pc-linux-gnu
  std::string cpu;     ///< -mcpu ("" for generic)
  std::vector<std::string> features;  ///< LLVM feature names enabled for the code ("avx2", "fma", ...)

  /** {"abi_version": 1, "kiln_version": "0.1.0", "triple": ..., "cpu": ..., "features": [...]} */
  std::string to_json() const;
  /** Parses to_json's output; throws kiln::Error naming what is missing or malformed. */
  static LibraryInfo from_json(const std::string& json);
};

/**
 * The host's instruction-set features, by LLVM's names, among those
 * kiln_runtime can detect (cpuid on x86-64, with the OS's support for the
 * AVX and AVX-512 register state). Empty on other architectures.
 *
 * Test-only: the environment variable KILN_TEST_HIDE_CPU_FEATURES
 * (comma-separated names, e.g. "avx2,fma") removes features from the result,
 * so tests can play a host that lacks them.
 */
std::vector<std::string> host_cpu_features();

/**
 * The features in `required` that the host lacks, among those kiln_runtime
 * can detect; names it cannot detect (LLVM tuning flags such as
 * "fast-gather", other architectures' features) are not checked.
 */
std::vector<std::string> missing_cpu_features(const std::vector<std::string>& required);

}  // namespace kiln

#endif  // KILN_RUNTIME_LIBRARY_INFO_H
