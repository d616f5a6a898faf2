// The in-memory build: machine code from our own TargetMachine, linked into
// the process by ORC's LLJIT. Runtime functions (kiln_parallel_launch, ...)
// are defined by address; libm and the rest resolve from the process.
#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Support/MemoryBuffer.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "kiln/runtime/amx.h"
#include "kiln/support/compile_times.h"
#include "kiln/support/error.h"
#include "llvm_build.h"
#include "llvm_target_info.h"

namespace kiln::codegen {

struct JitModule::Impl {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::vector<std::string> names;
  std::vector<KilnKernel> kernels;
  BuildTimings timings;
  // LLJIT lookups are thread-safe, but keep symbol lookups of one module serial anyway: they are rare.
  std::mutex mutex;
};

// ORC reports some failures (unresolved symbols) through the session's
// reporter as well as the returned Error; collect them instead of printing.
static std::string take_error(llvm::Error err) {
  std::string msg;
  llvm::handleAllErrors(std::move(err), [&](const llvm::ErrorInfoBase& e) { msg += (msg.empty() ? "" : "; ") + e.message(); });
  return msg;
}

static std::unique_ptr<llvm::orc::LLJIT> create_jit(const Target& target) {
  std::string triple = target.triple.empty() ? detail::llvm_host_triple() : target.triple;
  KILN_USER_CHECK(triple == detail::llvm_host_triple()) << "cannot run code for -mtriple=" << triple << " in this process (" << detail::llvm_host_triple()
                                                       << "); use emit_object_file for other triples";
  // LLJIT only links here: the code is already compiled by our TargetMachine.
  llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(triple)};
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create();
  KILN_CHECK(jit) << "cannot start the LLVM JIT: " << take_error(jit.takeError());
  (*jit)->getExecutionSession().setErrorReporter([](llvm::Error e) { llvm::consumeError(std::move(e)); });
  return std::move(*jit);
}

// The runtime's entry points by address: a process search (dlsym) misses them
// when kiln was loaded with RTLD_LOCAL, as Python loads extension modules.
static std::vector<std::pair<std::string, void*>> runtime_symbols() {
  return {{"kiln_parallel_launch", reinterpret_cast<void*>(&kiln_parallel_launch)},
          {"kiln_num_threads", reinterpret_cast<void*>(&kiln_num_threads)},
          {"kiln_alloc_workspace", reinterpret_cast<void*>(&kiln_alloc_workspace)},
          {"kiln_free_workspace", reinterpret_cast<void*>(&kiln_free_workspace)},
          {"kiln_set_last_error", reinterpret_cast<void*>(&kiln_set_last_error)},
          {"kiln_amx_request", reinterpret_cast<void*>(&kiln_amx_request)},
          {"kiln_get_last_error", reinterpret_cast<void*>(&kiln_get_last_error)}};
}

static void define_symbols(llvm::orc::LLJIT* jit, const JitOptions& options) {
  llvm::orc::JITDylib& jd = jit->getMainJITDylib();
  llvm::orc::SymbolMap symbols;
  auto flags = llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable;
  for (const auto& [name, addr] : runtime_symbols()) symbols[jit->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(addr), flags};
  for (const auto& [name, addr] : options.symbol_overrides) {
    KILN_USER_CHECK(addr) << "symbol override '" << name << "' has a null address";
    symbols[jit->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(addr), flags};
  }
  llvm::Error err = jd.define(llvm::orc::absoluteSymbols(std::move(symbols)));
  KILN_CHECK(!err) << "cannot define JIT symbols: " << take_error(std::move(err));
  auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(jit->getDataLayout().getGlobalPrefix());
  KILN_CHECK(gen) << "cannot search the process for symbols: " << take_error(gen.takeError());
  jd.addGenerator(std::move(*gen));
}

JitModule jit_compile(const std::vector<PrimFunc>& funcs, const Target& target, const JitOptions& options) {
  using detail::elapsed_ms;
  auto impl = std::make_shared<JitModule::Impl>();
  long long t0 = detail::now_ns();
  std::unique_ptr<llvm::TargetMachine> tm = detail::create_target_machine(target);
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m = detail::generate_module(&ctx, tm.get(), funcs, target);
  impl->timings.codegen_ms = elapsed_ms(t0);
  long long t1 = detail::now_ns();
  detail::optimize_module(m.get(), tm.get());
  impl->timings.optimize_ms = elapsed_ms(t1);
  long long t2 = detail::now_ns();
  llvm::SmallVector<char, 0> obj = detail::emit_machine_code(m.get(), tm.get(), false);
  impl->timings.emit_ms = elapsed_ms(t2);

  long long t3 = detail::now_ns();
  impl->jit = create_jit(target);
  define_symbols(impl->jit.get(), options);
  llvm::Error err = impl->jit->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(obj.data(), obj.size()), funcs[0].name()));
  KILN_CHECK(!err) << "the JIT rejected the object code: " << take_error(std::move(err));
  for (const PrimFunc& f : funcs) {
    // The first lookup links the object; missing runtime symbols surface here.
    auto addr = impl->jit->lookup(f.name());
    KILN_USER_CHECK(addr) << "cannot link kernel '" << f.name() << "': " << take_error(addr.takeError())
                          << " (the runtime functions come from kiln_runtime; link it into the process)";
    impl->names.push_back(f.name());
    impl->kernels.push_back(addr->toPtr<KilnKernel>());
  }
  impl->timings.link_ms = elapsed_ms(t3);
  add_compile_time(CompilePhase::IrGen, impl->timings.codegen_ms);
  add_compile_time(CompilePhase::Optimize, impl->timings.optimize_ms);
  add_compile_time(CompilePhase::Emit, impl->timings.emit_ms);
  add_compile_time(CompilePhase::Link, impl->timings.link_ms);
  if (compile_times_enabled() && std::getenv("KILN_COMPILE_TIMES")[0] == '2')
    std::fprintf(stderr, "  kernel %s: irgen %.0f ms, opt %.0f ms, emit %.0f ms, %zu bytes of code\n", funcs[0].name().c_str(), impl->timings.codegen_ms,
                 impl->timings.optimize_ms, impl->timings.emit_ms, obj.size());
  return JitModule(std::move(impl));
}

KilnKernel JitModule::get_function(const std::string& name) const {
  KILN_USER_CHECK(impl_) << "get_function('" << name << "') on an empty JitModule; build one with jit_compile";
  std::string known;
  for (size_t i = 0; i < impl_->names.size(); ++i) {
    if (impl_->names[i] == name) return impl_->kernels[i];
    known += (i ? ", " : "") + impl_->names[i];
  }
  KILN_USER_ERROR() << "no kernel named '" << name << "' in this module; it has: " << known;
  return nullptr;
}

void* JitModule::lookup_symbol(const std::string& name) const {
  if (!impl_) return nullptr;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto addr = impl_->jit->lookup(name);
  if (!addr) {
    llvm::consumeError(addr.takeError());
    return nullptr;
  }
  return addr->toPtr<void*>();
}

const std::vector<std::string>& JitModule::function_names() const {
  static const std::vector<std::string> empty;
  return impl_ ? impl_->names : empty;
}

const BuildTimings& JitModule::timings() const {
  static const BuildTimings none;
  return impl_ ? impl_->timings : none;
}

// ------------------------------------------------------------ runtime Module

namespace {
// The backing of a runtime Module: keeps the JIT session (and its code) alive,
// and the lowered functions and target to emit them again for export.
class JitModuleNode : public ModuleNode {
 public:
  JitModuleNode(JitModule jit, std::vector<PrimFunc> funcs, Target target)
      : jit_(std::move(jit)), funcs_(std::move(funcs)), target_(std::move(target)) {}
  void export_library(const std::string& path, const std::vector<KernelInfo>& kernels) const override {
    codegen::export_library(funcs_, target_, kernels, path);
  }
  KilnKernel lookup(const std::string& symbol) override {
    for (size_t i = 0; i < jit_.function_names().size(); ++i) {
      if (jit_.function_names()[i] == symbol) return jit_.get_function(symbol);
    }
    return nullptr;
  }

 private:
  JitModule jit_;
  std::vector<PrimFunc> funcs_;
  Target target_;
};
}  // namespace

// Kernels compiled for another machine (-mtriple): nothing runs here; they
// export as a library for that machine (linked by a $CC for it).
class CrossModuleNode : public ModuleNode {
 public:
  CrossModuleNode(std::vector<PrimFunc> funcs, Target target) : funcs_(std::move(funcs)), target_(std::move(target)) {}
  void export_library(const std::string& path, const std::vector<KernelInfo>& kernels) const override {
    codegen::export_library(funcs_, target_, kernels, path);
  }
  KilnKernel lookup(const std::string& symbol) override {
    KILN_USER_ERROR() << "kernel '" << symbol << "' was compiled for " << target_.triple << ", and this machine ("
                      << detail::llvm_host_triple() << ") cannot run it; export it with export_library (CC set to a compiler "
                      << "for that machine) and run it there";
    return nullptr;
  }

 private:
  std::vector<PrimFunc> funcs_;
  Target target_;
};

Module build_llvm(const std::vector<PrimFunc>& funcs, const Target& target) {
  std::vector<KernelInfo> infos;
  for (const PrimFunc& f : funcs) infos.push_back(kernel_info(f));
  if (!target.triple.empty() && target.triple != detail::llvm_host_triple()) {
    // Compile once now, so a bad schedule or target fails here and not at export.
    (void)emit_assembly(funcs, target);
    return Module(std::make_shared<CrossModuleNode>(funcs, target), std::move(infos));
  }
  JitModule jit = jit_compile(funcs, target);
  return Module(std::make_shared<JitModuleNode>(std::move(jit), funcs, target), std::move(infos));
}

}  // namespace kiln::codegen
