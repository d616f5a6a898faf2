#include "kiln/runtime/module.h"

#include <dlfcn.h>
#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_map>

#include "kiln/runtime/arg_binder.h"
#include "kiln/runtime/cache_flush.h"
#include "kiln/runtime/library_info.h"
#include "kiln/runtime/library_seal.h"
#include "kiln/support/error.h"

namespace kiln {

ModuleNode::~ModuleNode() = default;

void ModuleNode::export_library(const std::string& path, const std::vector<KernelInfo>&) const {
  KILN_USER_ERROR() << "export_library('" << path << "'): this module's code cannot be exported; build it with kiln::build "
                    << "(the LLVM backend) or load it from a library";
}

const char* Arg::kind_name() const {
  switch (kind_) {
    case Kind::Tensor: return "a tensor";
    case Kind::Int: return "an integer";
    case Kind::Float: return "a float";
  }
  return "?";
}

// ---------------------------------------------------------------- TimeResult

double TimeResult::min() const {
  KILN_USER_CHECK(!results.empty()) << "TimeResult::min: no timings recorded";
  return *std::min_element(results.begin(), results.end());
}

double TimeResult::max() const {
  KILN_USER_CHECK(!results.empty()) << "TimeResult::max: no timings recorded";
  return *std::max_element(results.begin(), results.end());
}

double TimeResult::median() const {
  KILN_USER_CHECK(!results.empty()) << "TimeResult::median: no timings recorded";
  std::vector<double> v = results;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double TimeResult::mean() const {
  KILN_USER_CHECK(!results.empty()) << "TimeResult::mean: no timings recorded";
  double sum = 0;
  for (double r : results) sum += r;
  return sum / static_cast<double>(results.size());
}

// ------------------------------------------------------------------ calling

namespace {

void invoke(const std::string& name, KilnKernel fn, void* const* args) {
  kiln_set_last_error("");
  int32_t rc = fn(args);
  if (rc != 0) {
    std::string msg = kiln_get_last_error();
    KILN_USER_ERROR() << name << ": kernel failed (returned " << rc << "): " << (msg.empty() ? "no error message was set" : msg);
  }
}

}  // namespace

// ------------------------------------------------------------------- Module

struct Module::State {
  std::shared_ptr<ModuleNode> backing;
  std::vector<KernelInfo> kernels;
  std::unordered_map<std::string, size_t> index;
  // Entry points, looked up on first use. Racing lookups store the same value.
  std::unique_ptr<std::atomic<KilnKernel>[]> resolved;

  size_t find(const std::string& name) const {
    auto it = index.find(name);
    if (it != index.end()) return it->second;
    std::string names;
    for (size_t i = 0; i < kernels.size(); ++i) names += (i ? ", " : "") + kernels[i].name;
    KILN_USER_ERROR() << "module has no kernel '" << name << "'; it has: " << (names.empty() ? "(none)" : names);
    return 0;
  }

  KilnKernel resolve(size_t k) const {
    KilnKernel fn = resolved[k].load(std::memory_order_acquire);
    if (fn) return fn;
    fn = backing->lookup(kernels[k].name);
    KILN_USER_CHECK(fn) << "kernel '" << kernels[k].name
                        << "' is listed in the module's metadata but its code has no such symbol";
    resolved[k].store(fn, std::memory_order_release);
    return fn;
  }
};

Module::Module(std::shared_ptr<ModuleNode> backing, std::vector<KernelInfo> kernels) : state_(std::make_shared<State>()) {
  KILN_USER_CHECK(backing) << "Module: the backing ModuleNode is null";
  for (size_t i = 0; i < kernels.size(); ++i) {
    const KernelInfo& k = kernels[i];
    KILN_USER_CHECK(state_->index.emplace(k.name, i).second) << "Module: two kernels are named '" << k.name << "'";
    for (const ParamInfo& p : k.params) {
      KILN_USER_CHECK(p.is_buffer || p.shape.empty())
          << "Module: kernel '" << k.name << "' scalar parameter '" << p.name << "' has a shape; scalars have none";
      for (int64_t d : p.shape) {
        KILN_USER_CHECK(d >= -1) << "Module: kernel '" << k.name << "' parameter '" << p.name << "' has shape "
                                 << shape_to_string(p.shape) << "; use -1 for a symbolic dimension";
      }
    }
    try {
      check_shape_metadata(k);
    } catch (const Error& e) {
      KILN_USER_ERROR() << "Module: " << e.what();
    }
  }
  state_->backing = std::move(backing);
  state_->resolved.reset(new std::atomic<KilnKernel>[kernels.size()]);
  for (size_t i = 0; i < kernels.size(); ++i) state_->resolved[i].store(nullptr);
  state_->kernels = std::move(kernels);
}

namespace {
// A shared library opened with dlopen, closed with the last Module using it.
class DsoModuleNode : public ModuleNode {
 public:
  DsoModuleNode(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  ~DsoModuleNode() override { dlclose(handle_); }
  KilnKernel lookup(const std::string& symbol) override {
    return reinterpret_cast<KilnKernel>(dlsym(handle_, symbol.c_str()));
  }
  void* symbol(const char* name) const { return dlsym(handle_, name); }
  // The library is its own export: copy the file (seal and all), checked
  // before it is renamed into place.
  void export_library(const std::string& path, const std::vector<KernelInfo>&) const override {
    static std::atomic<int> counter{0};  // two threads copying to one path get distinct temporaries
    std::string tmp = path + ".tmp" + std::to_string(getpid()) + "_" + std::to_string(counter++);
    std::error_code ec;
    std::filesystem::copy_file(path_, tmp, std::filesystem::copy_options::overwrite_existing, ec);
    std::string problem = ec ? ec.message() : check_library_seal(tmp).problem;
    if (problem.empty()) std::filesystem::rename(tmp, path, ec);
    if (ec) problem = ec.message();
    if (!problem.empty()) {
      std::filesystem::remove(tmp, ec);
      KILN_USER_ERROR() << "export_library('" << path << "'): cannot copy '" << path_ << "': " << problem;
    }
  }

 private:
  void* handle_;
  std::string path_;
};

// A clearer message than dlopen's for the common bad files: not ELF at all,
// or cut short (an interrupted copy). "" when the file looks whole.
std::string elf_problem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";  // missing or unreadable: dlopen says which
  Elf64_Ehdr h{};
  in.read(reinterpret_cast<char*>(&h), sizeof(h));
  std::streamsize got = in.gcount();
  if (got < EI_NIDENT || std::memcmp(h.e_ident, ELFMAG, SELFMAG) != 0) return "it is not a shared library (no ELF header)";
  if (h.e_ident[EI_CLASS] != ELFCLASS64) return "";  // not ours to judge: dlopen reports a wrong class
  if (got < static_cast<std::streamsize>(sizeof(h))) return "the file is truncated (its ELF header is incomplete)";
  in.seekg(0, std::ios::end);
  uint64_t size = static_cast<uint64_t>(in.tellg());
  uint64_t need = std::max<uint64_t>(h.e_shoff + uint64_t(h.e_shnum) * h.e_shentsize, h.e_phoff + uint64_t(h.e_phnum) * h.e_phentsize);
  if (size < need) {
    return "the file is truncated (" + std::to_string(size) + " bytes; its headers need " + std::to_string(need) + ")";
  }
  return "";
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// The checks of kiln_library_info, before any kernel is looked up.
void check_library_info(const std::string& so_path, const char* text) {
  LibraryInfo info;
  try {
    info = LibraryInfo::from_json(text);
  } catch (const Error& e) {
    KILN_USER_ERROR() << "Module::load: '" << so_path << "': " << e.what();
  }
  KILN_USER_CHECK(info.abi_version >= kMinRuntimeAbiVersion && info.abi_version <= kRuntimeAbiVersion)
      << "Module::load: '" << so_path << "' was built for runtime ABI version " << info.abi_version
      << " (by kiln " << (info.kiln_version.empty() ? "?" : info.kiln_version) << "), but this kiln_runtime (kiln "
      << kiln_version() << ") runs ABI version" << (kMinRuntimeAbiVersion == kRuntimeAbiVersion ? " " : "s " + std::to_string(kMinRuntimeAbiVersion) + " to ")
      << kRuntimeAbiVersion << "; export the library again with this kiln";
  std::vector<std::string> missing = missing_cpu_features(info.features);
  KILN_USER_CHECK(missing.empty()) << "Module::load: '" << so_path << "' was compiled for a CPU with features this machine lacks: "
                                   << join(missing) << " (library target: " << (info.cpu.empty() ? "generic" : info.cpu)
                                   << ", " << info.triple << "); export it for this machine, e.g. with target \"llvm\"";
}
}  // namespace

Module Module::combine(const std::vector<Module>& modules) {
  struct Kernels : ModuleNode {
    std::vector<Module> modules;
    KilnKernel lookup(const std::string& symbol) override {
      for (const Module& mod : modules)
        if (mod.has(symbol)) return mod.get_kernel(symbol);
      return nullptr;
    }
  };
  auto node = std::make_shared<Kernels>();
  node->modules = modules;
  std::vector<KernelInfo> infos;
  for (const Module& mod : modules) infos.insert(infos.end(), mod.kernels().begin(), mod.kernels().end());
  return Module(node, std::move(infos));
}

Module Module::load(const std::string& so_path) {
  dlerror();
  // A path without a slash would make dlopen search the library path; a
  // kernel library is always named by its file.
  std::string path = so_path.find('/') == std::string::npos ? "./" + so_path : so_path;
  std::string problem = elf_problem(path);
  // The whole file against its seal before dlopen, which maps it and runs its
  // relocations and initialisers: damaged code or weights never get that far.
  // (A file swapped between this check and dlopen would be another whole
  // export, since exports are renamed into place; a model's plan then still
  // refuses the other export's weights file by its id.)
  if (problem.empty()) problem = check_library_seal(path).problem;
  KILN_USER_CHECK(problem.empty()) << "Module::load: cannot load kernel library '" << so_path << "': " << problem;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    KILN_USER_ERROR() << "Module::load: cannot load kernel library '" << so_path << "': " << (why ? why : "unknown error")
                      << "; check that the file exists and was exported by kiln for this machine";
  }
  auto node = std::make_shared<DsoModuleNode>(handle, path);
  if (auto* info = static_cast<const char* const*>(node->symbol("kiln_library_info")); info && *info) {
    check_library_info(so_path, *info);
  }
  auto* metadata = static_cast<const char* const*>(node->symbol("kiln_module_metadata"));
  KILN_USER_CHECK(metadata && *metadata) << "Module::load: '" << so_path
                                         << "' has no kiln_module_metadata symbol; it is not a library exported by kiln";
  std::vector<KernelInfo> kernels;
  try {
    kernels = kernels_from_json(*metadata);
  } catch (const Error& e) {
    KILN_USER_ERROR() << "Module::load: '" << so_path << "': " << e.what();
  }
  for (const KernelInfo& k : kernels) {
    KILN_USER_CHECK(node->lookup(k.name)) << "Module::load: '" << so_path << "' lists kernel '" << k.name
                                          << "' in its metadata but does not export that symbol";
  }
  return Module(std::move(node), std::move(kernels));
}

bool Module::has(const std::string& name) const { return state_ && state_->index.count(name) > 0; }

bool Module::is_model_library() const { return state_ && state_->backing->lookup("kiln_model_plan") != nullptr; }

const KernelInfo& Module::info(const std::string& name) const {
  KILN_USER_CHECK(state_) << "use of a null Module; create one with Module::load or a backend's build";
  return state_->kernels[state_->find(name)];
}

std::vector<std::string> Module::names() const {
  std::vector<std::string> out;
  for (const KernelInfo& k : kernels()) out.push_back(k.name);
  return out;
}

const std::vector<KernelInfo>& Module::kernels() const {
  KILN_USER_CHECK(state_) << "use of a null Module; create one with Module::load or a backend's build";
  return state_->kernels;
}

void Module::export_library(const std::string& path) const {
  KILN_USER_CHECK(state_) << "export_library of a null Module; create one with kiln::build or Module::load";
  KILN_USER_CHECK(!path.empty()) << "export_library: the path is empty; name the .so file to write";
  state_->backing->export_library(path, state_->kernels);
}

const std::shared_ptr<ModuleNode>& Module::backing() const {
  KILN_USER_CHECK(state_) << "use of a null Module; create one with Module::load or a backend's build";
  return state_->backing;
}

KilnKernel Module::get_kernel(const std::string& name) const {
  const KernelInfo& k = info(name);
  return state_->resolve(static_cast<size_t>(&k - state_->kernels.data()));
}

void Module::call(const std::string& name, const std::vector<Arg>& args) const {
  const KernelInfo& k = info(name);
  PackedArgs packed(k, args);
  invoke(k.name, get_kernel(name), packed.data());
}

TimeResult Module::time_evaluator(const std::string& name, const std::vector<Arg>& args, int number, int repeat,
                                  double min_repeat_ms) const {
  KILN_USER_CHECK(number >= 1 && repeat >= 1 && min_repeat_ms >= 0)
      << "time_evaluator of '" << name << "': number (" << number << ") and repeat (" << repeat
      << ") must be at least 1 and min_repeat_ms (" << min_repeat_ms << ") at least 0";
  const KernelInfo& k = info(name);
  PackedArgs packed(k, args);
  KilnKernel fn = get_kernel(name);
  void* const* argv = packed.data();
  invoke(k.name, fn, argv);  // warm-up: caches, page faults, lazy thread-pool start

  using Clock = std::chrono::steady_clock;
  TimeResult out;
  for (int r = 0; r < repeat; ++r) {
    for (;;) {
      auto start = Clock::now();
      for (int i = 0; i < number; ++i) invoke(k.name, fn, argv);
      double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (seconds * 1e3 >= min_repeat_ms || number >= std::numeric_limits<int>::max() / 2) {
        out.results.push_back(seconds / number);
        break;
      }
      // Too short to trust: aim straight for the target (as TVM does), but
      // grow by at least 1.618x so a noisy first guess still converges fast.
      double per_call = std::max(seconds / number, 1e-9);
      double want = std::max(min_repeat_ms / 1e3 / per_call + 1, number * 1.618);
      number = static_cast<int>(std::min(want, double(std::numeric_limits<int>::max() / 2)));
    }
  }
  out.number = number;
  return out;
}

namespace {

// Bytes of a tensor argument's data: what a kernel may touch.
size_t tensor_bytes(const DLTensor& t) {
  size_t n = (t.dtype.bits * size_t(t.dtype.lanes) + 7) / 8;
  for (int d = 0; d < t.ndim; ++d) n *= static_cast<size_t>(t.shape[d]);
  return n;
}

}  // namespace

TimeResult time_evaluator_cold(const Module& mod, const std::string& name, const std::vector<Arg>& args,
                               const std::vector<size_t>& flush_args, int number, int repeat, double min_repeat_ms, bool fastest_call) {
  KILN_USER_CHECK(number >= 1 && repeat >= 1 && min_repeat_ms >= 0)
      << "time_evaluator_cold of '" << name << "': number (" << number << ") and repeat (" << repeat
      << ") must be at least 1 and min_repeat_ms (" << min_repeat_ms << ") at least 0";
  std::vector<std::pair<const void*, size_t>> cold;
  for (size_t i : flush_args) {
    KILN_USER_CHECK(i < args.size() && args[i].kind() == Arg::Kind::Tensor && args[i].tensor())
        << "time_evaluator_cold of '" << name << "': flush index " << i << " is not a tensor argument (the call has "
        << args.size() << " arguments)";
    const DLTensor& t = *args[i].tensor();
    cold.emplace_back(static_cast<const char*>(t.data) + t.byte_offset, tensor_bytes(t));
  }
  KilnKernel fn = mod.get_kernel(name);
  // Packing checks every argument against the kernel's signature, as time_evaluator does.
  PackedArgs packed(mod.info(name), args);
  void* const* argv = packed.data();
  invoke(name, fn, argv);  // warm-up: page faults, lazy thread-pool start

  using Clock = std::chrono::steady_clock;
  TimeResult out;
  int most_calls = 0;
  for (int r = 0; r < repeat; ++r) {
    auto wall_start = Clock::now();
    double timed = 0, fastest = std::numeric_limits<double>::infinity();
    int calls = 0;
    while (calls < number || std::chrono::duration<double, std::milli>(Clock::now() - wall_start).count() < min_repeat_ms) {
      for (const auto& [p, n] : cold) evict_from_cache(p, n);
      auto start = Clock::now();
      invoke(name, fn, argv);
      double t = std::chrono::duration<double>(Clock::now() - start).count();
      timed += t;
      fastest = std::min(fastest, t);
      ++calls;
    }
    out.results.push_back(fastest_call ? fastest : timed / calls);
    most_calls = std::max(most_calls, calls);
  }
  out.number = most_calls;
  return out;
}

}  // namespace kiln
