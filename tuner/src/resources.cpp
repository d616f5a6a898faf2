// Where the tuner's companion files are: the peer launcher (bench/peers) and
// the curve plotter (python/kiln/plot_curve.py). They live next to
// libkiln_tuner: installed, the library sits in the kiln Python package with
// plot_curve.py and peers/ beside it; in a build tree CMake copies both next
// to the library (tuner/CMakeLists.txt), so a moved build keeps working.
// The source tree configured by CMake is the last resort.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

#include "kiln/tuner/peer.h"

namespace kiln::tuner {

namespace {

namespace fs = std::filesystem;

fs::path library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&library_dir), &info) == 0 || !info.dli_fname) return {};
  std::error_code ec;
  fs::path p = fs::weakly_canonical(info.dli_fname, ec);
  return ec ? fs::path(info.dli_fname).parent_path() : p.parent_path();
}

std::string find(const char* env, const fs::path& beside_library, const fs::path& in_source) {
  if (const char* v = std::getenv(env); v && *v) return v;
  fs::path lib = library_dir();
  if (!lib.empty() && fs::exists(lib / beside_library)) return (lib / beside_library).string();
  return (fs::path(KILN_SOURCE_DIR) / in_source).lexically_normal().string();
}

}  // namespace

std::string peers_dir() { return find("KILN_PEERS_DIR", "peers", "bench/peers"); }

std::string plot_curve_script() { return find("KILN_PLOT_CURVE_SCRIPT", "plot_curve.py", "python/kiln/plot_curve.py"); }

std::string python_executable() {
  if (const char* env = std::getenv("KILN_PYTHON"); env && *env) return env;
  // Debian's interpreter: numpy, PyTorch and matplotlib are installed for it.
  return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

}  // namespace kiln::tuner
