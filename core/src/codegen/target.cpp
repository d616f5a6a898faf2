#include "kiln/codegen/target.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include "kiln/support/error.h"

#ifdef KILN_WITH_LLVM
#include "llvm/llvm_target_info.h"
#endif

namespace kiln {

static std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, sep)) {
    if (!cur.empty()) out.push_back(cur);
  }
  return out;
}

static std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

static int parse_int_option(const std::string& key, const std::string& value, const std::string& target) {
  size_t used = 0;
  int n = -1;
  try {
    n = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  KILN_USER_CHECK(used == value.size() && n >= 0) << "target '" << target << "': " << key << " needs a non-negative integer, got '" << value << "'";
  return n;
}

// The widest float vector the features give; the order is from widest down.
static int vector_bits_of(const Target& t) {
  if (t.kind == Target::Kind::CUDA) return 0;
  if (t.has_feature("avx512f")) return 512;
  if (t.has_feature("avx")) return 256;
  return 128;
}

static void resolve_llvm_features(Target* t, bool host) {
#ifdef KILN_WITH_LLVM
  if (t->triple.empty()) t->triple = codegen::detail::llvm_host_triple();
  if (host) {
    // The host's own feature list, not its CPU's table: a VM may hide some.
    t->mcpu = codegen::detail::llvm_host_cpu();
    t->features = codegen::detail::llvm_host_features();
    return;
  }
  t->features = codegen::detail::llvm_cpu_features(t->triple, t->mcpu, join(t->mattr, ","));
#else
  if (host && t->mcpu.empty()) t->mcpu = "generic";
  t->features.clear();
  for (const std::string& f : t->mattr) {
    if (f[0] == '+') t->features.push_back(f.substr(1));
  }
#endif
  std::sort(t->features.begin(), t->features.end());
}

Target Target::parse(const std::string& s) {
  std::vector<std::string> words = split(s, ' ');
  KILN_USER_CHECK(!words.empty()) << "empty target string; use \"llvm\" (the host CPU) or \"cuda -arch=sm_90\"";
  Target t;
  if (words[0] == "llvm") t.kind = Kind::LLVM;
  else if (words[0] == "cuda") t.kind = Kind::CUDA;
  else KILN_USER_ERROR() << "unknown target kind '" << words[0] << "' in '" << s << "'; known kinds: llvm, cuda";

  const char* known = t.kind == Kind::LLVM ? "-mcpu=, -mattr=, -mtriple=, -num-cores=, -fast-math" : "-arch=, -num-cores=, -fast-math";
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string& w = words[i];
    size_t eq = w.find('=');
    std::string key = w.substr(0, eq), value = eq == std::string::npos ? "" : w.substr(eq + 1);
    bool llvm = t.kind == Kind::LLVM;
    if (key == "-fast-math" && eq == std::string::npos) t.fast_math = true;
    else if (key == "-num-cores" && eq != std::string::npos) t.num_cores = parse_int_option(key, value, s);
    else if (llvm && key == "-mcpu" && !value.empty()) t.mcpu = value;
    else if (llvm && key == "-mtriple" && !value.empty()) t.triple = value;
    else if (llvm && key == "-mattr" && !value.empty()) {
      for (const std::string& f : split(value, ',')) {
        KILN_USER_CHECK(f.size() > 1 && (f[0] == '+' || f[0] == '-')) << "target '" << s << "': -mattr entries look like +avx2 or -avx512f, got '" << f << "'";
        t.mattr.push_back(f);
      }
    } else if (!llvm && key == "-arch" && value.rfind("sm_", 0) == 0 && value.size() > 3) t.arch = value;
    else KILN_USER_ERROR() << "target '" << s << "': unknown or malformed option '" << w << "'; known options for " << words[0] << ": " << known;
  }

  if (t.kind == Kind::CUDA) {
    if (t.arch.empty()) t.arch = "sm_90";
  } else {
    bool host = t.mcpu.empty() && t.mattr.empty() && t.triple.empty();
    if (t.mcpu.empty() && !host) t.mcpu = "generic";
    resolve_llvm_features(&t, host);
    // "llvm" alone is the whole host, cores included.
    if (host && t.num_cores == 0) t.num_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  t.vector_bits = vector_bits_of(t);
  return t;
}

Target Target::host() { return parse("llvm"); }

#ifdef KILN_WITH_LLVM
// A target parsed from "llvm" alone (and a -num-cores or -fast-math).
static bool is_detected_host(const Target& t) {
  return t.triple == codegen::detail::llvm_host_triple() && t.mcpu == codegen::detail::llvm_host_cpu() && t.features == codegen::detail::llvm_host_features();
}
#endif

const char* Target::kind_name() const { return kind == Kind::LLVM ? "llvm" : "cuda"; }

std::string Target::str() const {
  std::string s = kind_name();
  if (kind == Kind::CUDA) s += " -arch=" + arch;
  if (kind == Kind::LLVM && !mcpu.empty()) s += " -mcpu=" + mcpu;
  if (kind == Kind::LLVM && !mattr.empty()) s += " -mattr=" + join(mattr, ",");
#ifdef KILN_WITH_LLVM
  // The host as detected names its CPU; where it lacks features the name
  // implies (a VM without AMX), say so, or parsing the string would enable them.
  if (kind == Kind::LLVM && mattr.empty() && is_detected_host(*this)) {
    std::vector<std::string> off;
    for (const std::string& f : codegen::detail::llvm_host_hidden_features()) off.push_back("-" + f);
    if (!off.empty()) s += " -mattr=" + join(off, ",");
  }
  if (kind == Kind::LLVM && !triple.empty() && triple != codegen::detail::llvm_host_triple()) s += " -mtriple=" + triple;
#endif
  if (num_cores > 0) s += " -num-cores=" + std::to_string(num_cores);
  if (fast_math) s += " -fast-math";
  return s;
}

bool Target::has_feature(const std::string& feature) const { return std::binary_search(features.begin(), features.end(), feature); }

int Target::natural_lanes(DataType t) const {
  if (vector_bits <= 0 || t.bits() <= 0) return 1;
  return std::max(1, vector_bits / t.bits());
}

int Target::num_vector_registers() const {
  if (kind == Kind::CUDA) return 0;
  // The architecture is the triple's first component ("x86_64-pc-linux-gnu").
  std::string arch = triple.substr(0, triple.find('-'));
  if (arch == "aarch64" || arch == "arm64" || arch == "aarch64_be") return 32;
  if (arch == "i386" || arch == "i486" || arch == "i586" || arch == "i686") return 8;
  if (has_feature("avx512f")) return 32;
  return 16;
}

bool Target::is_cross() const {
#ifdef KILN_WITH_LLVM
  return kind == Kind::LLVM && !triple.empty() && triple != codegen::detail::llvm_host_triple();
#else
  return false;
#endif
}

}  // namespace kiln
