// Target machine, O3 pipeline and machine code emission; object, IR and
// assembly output of the public API.
#include "llvm_build.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/PassManager.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>

#include <chrono>
#include <fstream>

#include "codegen_llvm.h"
#include "kiln/support/error.h"
#include "llvm_target_info.h"

namespace kiln::codegen::detail {

long long now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double elapsed_ms(long long start_ns) { return static_cast<double>(now_ns() - start_ns) * 1e-6; }

// The -mattr string for LLVM. A target parsed from "llvm" carries exactly the
// host's features; pass the host's full on/off list then (as LLVM's own host
// detection does), because a VM may hide features that the CPU name implies.
static std::string feature_string(const Target& t) {
  std::string out;
  if (t.mattr.empty() && t.mcpu == llvm_host_cpu() && t.features == llvm_host_features()) {
    for (const auto& kv : llvm::sys::getHostCPUFeatures()) out += std::string(out.empty() ? "" : ",") + (kv.getValue() ? "+" : "-") + kv.getKey().str();
    return out;
  }
  for (const std::string& f : t.mattr) out += (out.empty() ? "" : ",") + f;
  return out;
}

std::unique_ptr<llvm::TargetMachine> create_target_machine(const Target& target) {
  KILN_USER_CHECK(target.kind == Target::Kind::LLVM) << "the LLVM backend cannot build for target '" << target.str() << "'; use an llvm target such as \"llvm\"";
  ensure_llvm_initialized();
  std::string triple = target.triple.empty() ? llvm_host_triple() : target.triple;
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
  KILN_USER_CHECK(t) << "target triple '" << triple << "' is not supported by this LLVM build: " << err;
  llvm::TargetOptions options;
  options.AllowFPOpFusion = llvm::FPOpFusion::Fast;
  if (target.fast_math) {
    options.UnsafeFPMath = true;
    options.NoInfsFPMath = true;
    options.NoNaNsFPMath = true;
    options.NoSignedZerosFPMath = true;
  }
  std::string cpu = target.mcpu.empty() ? "generic" : target.mcpu;
  llvm::TargetMachine* tm = t->createTargetMachine(triple, cpu, feature_string(target), options, llvm::Reloc::PIC_, llvm::CodeModel::Small, llvm::CodeGenOptLevel::Aggressive);
  KILN_USER_CHECK(tm) << "LLVM could not create a target machine for '" << target.str() << "'";
  return std::unique_ptr<llvm::TargetMachine>(tm);
}

std::unique_ptr<llvm::Module> generate_module(llvm::LLVMContext* ctx, llvm::TargetMachine* tm, const std::vector<PrimFunc>& funcs, const Target& target) {
  KILN_USER_CHECK(!funcs.empty()) << "nothing to build: the list of functions is empty";
  CodeGenLLVM cg(ctx, tm, target, funcs[0].name());
  for (const PrimFunc& f : funcs) cg.add_function(f);
  return cg.finish();
}

void optimize_module(llvm::Module* module, llvm::TargetMachine* tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  pto.LoopUnrolling = true;
  llvm::PassBuilder pb(tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(*module, mam);
}

llvm::SmallVector<char, 0> emit_machine_code(llvm::Module* module, llvm::TargetMachine* tm, bool assembly) {
  llvm::SmallVector<char, 0> out;
  llvm::raw_svector_ostream os(out);
  llvm::legacy::PassManager pm;
  // Verbose assembly carries the register allocator's notes ("32-byte
  // Spill", "Folded Reload"), which the schedule tests count.
  tm->Options.MCOptions.AsmVerbose = assembly;
  auto kind = assembly ? llvm::CodeGenFileType::AssemblyFile : llvm::CodeGenFileType::ObjectFile;
  KILN_CHECK(!tm->addPassesToEmitFile(pm, os, nullptr, kind)) << "LLVM cannot emit " << (assembly ? "assembly" : "object files") << " for " << tm->getTargetTriple().str();
  pm.run(*module);
  return out;
}

}  // namespace kiln::codegen::detail

namespace kiln::codegen {

// Codegen and O3 of `funcs` in a fresh context, then `use` on the result.
template <typename F>
static auto with_optimized_module(const std::vector<PrimFunc>& funcs, const Target& target, bool optimize, F use) {
  std::unique_ptr<llvm::TargetMachine> tm = detail::create_target_machine(target);
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m = detail::generate_module(&ctx, tm.get(), funcs, target);
  if (optimize) detail::optimize_module(m.get(), tm.get());
  return use(m.get(), tm.get());
}

void emit_object_file(const std::vector<PrimFunc>& funcs, const Target& target, const std::string& path) {
  llvm::SmallVector<char, 0> obj = with_optimized_module(funcs, target, true, [](llvm::Module* m, llvm::TargetMachine* tm) { return detail::emit_machine_code(m, tm, false); });
  std::ofstream os(path, std::ios::binary | std::ios::trunc);
  KILN_USER_CHECK(os.good()) << "cannot open '" << path << "' to write the object file; check that its directory exists and is writable";
  os.write(obj.data(), static_cast<std::streamsize>(obj.size()));
  os.close();
  KILN_USER_CHECK(os.good()) << "writing the object file '" << path << "' failed (disk full?)";
}

std::string emit_llvm_ir(const std::vector<PrimFunc>& funcs, const Target& target, bool optimize) {
  return with_optimized_module(funcs, target, optimize, [](llvm::Module* m, llvm::TargetMachine*) {
    std::string s;
    llvm::raw_string_ostream os(s);
    m->print(os, nullptr);
    os.flush();
    return s;
  });
}

std::string emit_assembly(const std::vector<PrimFunc>& funcs, const Target& target) {
  llvm::SmallVector<char, 0> text = with_optimized_module(funcs, target, true, [](llvm::Module* m, llvm::TargetMachine* tm) { return detail::emit_machine_code(m, tm, true); });
  return std::string(text.data(), text.size());
}

}  // namespace kiln::codegen
