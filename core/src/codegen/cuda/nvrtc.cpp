// NVRTC through dlopen: the few entry points kiln needs, declared here, so
// that kiln builds and loads on machines without the CUDA toolkit and says
// clearly what is missing only when a cuda target is compiled.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <vector>

#include "kiln/codegen/cuda.h"
#include "kiln/support/error.h"

namespace kiln::codegen {

namespace {

using nvrtcProgram = struct _nvrtcProgram*;
using Result = int;  // nvrtcResult; 0 is NVRTC_SUCCESS

struct Nvrtc {
  void* lib = nullptr;
  std::string tried;
  const char* (*GetErrorString)(Result) = nullptr;
  Result (*Version)(int*, int*) = nullptr;
  Result (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  Result (*DestroyProgram)(nvrtcProgram*) = nullptr;
  Result (*CompileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  Result (*GetProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  Result (*GetProgramLog)(nvrtcProgram, char*) = nullptr;
  Result (*GetPTXSize)(nvrtcProgram, size_t*) = nullptr;
  Result (*GetPTX)(nvrtcProgram, char*) = nullptr;
  Result (*GetCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  Result (*GetCUBIN)(nvrtcProgram, char*) = nullptr;
};

template <typename F>
bool bind(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

// Loaded once per process; a library without every entry point counts as missing.
const Nvrtc& nvrtc() {
  static Nvrtc n;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<const char*> candidates = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
                                           "/usr/local/cuda/lib64/libnvrtc.so.12"};
    // KILN_NVRTC_LIBRARY names the one library to load (another toolkit, or a
    // missing file to check how kiln behaves without NVRTC).
    if (const char* forced = std::getenv("KILN_NVRTC_LIBRARY"); forced && *forced) candidates = {forced};
    for (const char* c : candidates) {
      n.tried += std::string(n.tried.empty() ? "" : ", ") + c;
      n.lib = dlopen(c, RTLD_NOW | RTLD_LOCAL);
      if (n.lib) break;
    }
    if (!n.lib) return;
    bool ok = bind(n.lib, "nvrtcGetErrorString", &n.GetErrorString) && bind(n.lib, "nvrtcVersion", &n.Version) && bind(n.lib, "nvrtcCreateProgram", &n.CreateProgram) &&
              bind(n.lib, "nvrtcDestroyProgram", &n.DestroyProgram) && bind(n.lib, "nvrtcCompileProgram", &n.CompileProgram) &&
              bind(n.lib, "nvrtcGetProgramLogSize", &n.GetProgramLogSize) && bind(n.lib, "nvrtcGetProgramLog", &n.GetProgramLog) && bind(n.lib, "nvrtcGetPTXSize", &n.GetPTXSize) &&
              bind(n.lib, "nvrtcGetPTX", &n.GetPTX) && bind(n.lib, "nvrtcGetCUBINSize", &n.GetCUBINSize) && bind(n.lib, "nvrtcGetCUBIN", &n.GetCUBIN);
    if (!ok) {
      n.tried += " (found a libnvrtc without the expected entry points)";
      n.lib = nullptr;
    }
  });
  return n;
}

std::string numbered(const std::string& source) {
  std::istringstream in(source);
  std::ostringstream out;
  std::string l;
  for (int k = 1; std::getline(in, l); ++k) out << (k < 10 ? "   " : k < 100 ? "  " : " ") << k << "  " << l << "\n";
  return out.str();
}

// Frees the program on every path out (errors throw).
struct Program {
  explicit Program(const Nvrtc& a) : api(a) {}
  const Nvrtc& api;
  nvrtcProgram prog = nullptr;
  ~Program() {
    if (prog) api.DestroyProgram(&prog);
  }
  std::string log() const {
    size_t n = 0;
    if (api.GetProgramLogSize(prog, &n) != 0 || n <= 1) return "";
    std::string s(n, '\0');
    api.GetProgramLog(prog, s.data());
    s.resize(n - 1);
    return s;
  }
};

}  // namespace

bool nvrtc_available(std::string* why) {
  const Nvrtc& n = nvrtc();
  if (!n.lib && why) *why = "NVRTC (libnvrtc.so) was not found; tried " + n.tried + "; install the CUDA toolkit or add its lib64 to LD_LIBRARY_PATH";
  return n.lib != nullptr;
}

std::string nvrtc_compile(const std::string& source, const std::string& kernel_name, const Target& target, NvrtcOutput output) {
  std::string why;
  KILN_USER_CHECK(nvrtc_available(&why)) << "cannot compile kernel '" << kernel_name << "' for " << target.str() << ": " << why;
  KILN_USER_CHECK(target.kind == Target::Kind::CUDA && target.arch.rfind("sm_", 0) == 0) << "nvrtc_compile needs a cuda target with -arch=sm_XX, got '" << target.str() << "'";
  const Nvrtc& api = nvrtc();
  Program p(api);
  std::string file = kernel_name + ".cu";
  Result r = api.CreateProgram(&p.prog, source.c_str(), file.c_str(), 0, nullptr, nullptr);
  KILN_USER_CHECK(r == 0) << "NVRTC could not create a program for kernel '" << kernel_name << "': " << api.GetErrorString(r);
  // sm_XX makes a cubin for that GPU; compute_XX makes PTX, which a newer driver compiles.
  std::string arch = "--gpu-architecture=" + (output == NvrtcOutput::Cubin ? target.arch : "compute_" + target.arch.substr(3));
  std::vector<std::string> opts = {arch, "--std=c++17", "-I/usr/local/cuda/include"};
  if (target.fast_math) opts.push_back("--use_fast_math");
  std::vector<const char*> argv;
  for (const std::string& o : opts) argv.push_back(o.c_str());
  r = api.CompileProgram(p.prog, static_cast<int>(argv.size()), argv.data());
  KILN_USER_CHECK(r == 0) << "NVRTC failed to compile kernel '" << kernel_name << "' for " << target.arch << " (" << api.GetErrorString(r) << "):\n"
                          << p.log() << "\n--- CUDA source ---\n" << numbered(source);
  size_t n = 0;
  auto size_fn = output == NvrtcOutput::Cubin ? api.GetCUBINSize : api.GetPTXSize;
  auto get_fn = output == NvrtcOutput::Cubin ? api.GetCUBIN : api.GetPTX;
  KILN_USER_CHECK(size_fn(p.prog, &n) == 0 && n > 0) << "NVRTC compiled kernel '" << kernel_name << "' but produced no " << (output == NvrtcOutput::Cubin ? "cubin" : "PTX");
  std::string out(n, '\0');
  KILN_USER_CHECK(get_fn(p.prog, out.data()) == 0) << "NVRTC: reading the compiled code of kernel '" << kernel_name << "' failed";
  if (output == NvrtcOutput::Ptx && !out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

}  // namespace kiln::codegen
