// Host detection and CPU feature tables, from LLVM's target registry.
#include "llvm_target_info.h"

#include <llvm/ADT/StringMap.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/ErrorHandling.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "kiln/support/error.h"

namespace kiln::codegen::detail {

// LLVM's fatal errors ("cannot select", a broken pass invariant) would abort
// the process. Throwing instead unwinds through LLVM's frames (built with
// unwind tables) and may leak what they held, which beats losing the
// process, e.g. a whole tuning session.
static void throw_fatal_error(void*, const char* reason, bool) { throw Error(std::string("LLVM fatal error: ") + reason); }

void ensure_llvm_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::install_fatal_error_handler(throw_fatal_error);
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    // Every target of the LLVM build, for cross-compiled objects
    // (-mtriple=aarch64-linux-gnu); the JIT still runs the host's only.
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
  });
}

std::string llvm_host_triple() { return llvm::sys::getProcessTriple(); }

// Detected once: cpuid traps to the hypervisor in a VM, and Target::str() asks on every call.
std::string llvm_host_cpu() {
  static const std::string cpu = llvm::sys::getHostCPUName().str();
  return cpu;
}

std::vector<std::string> llvm_host_features() {
  static const std::vector<std::string> features = [] {
    std::vector<std::string> out;
    for (const auto& kv : llvm::sys::getHostCPUFeatures()) {
      if (kv.getValue()) out.push_back(kv.getKey().str());
    }
    std::sort(out.begin(), out.end());
    return out;
  }();
  return features;
}

const std::vector<std::string>& llvm_host_hidden_features() {
  static const std::vector<std::string> hidden = [] {
    // Only what host detection reports off: the table's tuning flags (no detection) are not hidden.
    std::vector<std::string> table = llvm_cpu_features(llvm_host_triple(), llvm_host_cpu(), ""), out;
    std::sort(table.begin(), table.end());
    for (const auto& kv : llvm::sys::getHostCPUFeatures())
      if (!kv.getValue() && std::binary_search(table.begin(), table.end(), kv.getKey().str())) out.push_back(kv.getKey().str());
    std::sort(out.begin(), out.end());
    return out;
  }();
  return hidden;
}

static const llvm::Target* lookup_target(const std::string& triple) {
  ensure_llvm_initialized();
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
  KILN_USER_CHECK(t) << "target triple '" << triple << "' is not supported by this LLVM build (" << err << "); use the host's triple " << llvm_host_triple();
  return t;
}

std::vector<std::string> llvm_cpu_features(const std::string& triple, const std::string& cpu, const std::string& mattr) {
  const llvm::Target* target = lookup_target(triple);
  // A generic subtarget first: it only serves to validate names, so that LLVM
  // never prints its own "not a recognized processor" warning to stderr.
  std::unique_ptr<llvm::MCSubtargetInfo> generic(target->createMCSubtargetInfo(triple, "", ""));
  KILN_CHECK(generic) << "no subtarget info for " << triple;
  if (cpu != "generic" && !generic->isCPUStringValid(cpu)) {
    std::string known;
    for (const auto& kv : generic->getAllProcessorDescriptions()) known += std::string(known.empty() ? "" : ", ") + kv.Key;
    KILN_USER_ERROR() << "unknown -mcpu=" << cpu << " for " << triple << "; known CPUs: " << known;
  }
  auto features = generic->getAllProcessorFeatures();
  auto is_feature = [&](llvm::StringRef name) {
    return std::any_of(features.begin(), features.end(), [&](const llvm::SubtargetFeatureKV& kv) { return name == kv.Key; });
  };
  llvm::StringRef rest(mattr);
  while (!rest.empty()) {
    auto [item, tail] = rest.split(',');
    rest = tail;
    KILN_USER_CHECK(is_feature(item.drop_front())) << "unknown CPU feature '" << item.str() << "' in -mattr for " << triple << " (features look like +avx2, +fma, -avx512f)";
  }
  std::unique_ptr<llvm::MCSubtargetInfo> sti(target->createMCSubtargetInfo(triple, cpu, mattr));
  KILN_CHECK(sti) << "no subtarget info for " << triple << " " << cpu;
  std::vector<std::string> out;
  for (const auto& kv : features) {
    if (sti->checkFeatures(std::string("+") + kv.Key)) out.push_back(kv.Key);
  }
  return out;
}

}  // namespace kiln::codegen::detail
