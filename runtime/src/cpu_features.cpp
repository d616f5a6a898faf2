// The host's CPU features, for the load-time check of exported libraries: a
// library compiled for features the host lacks must be refused before any of
// its code runs (it would die of SIGILL). Detection is by cpuid, checking
// the OS saves the wider registers (xgetbv): /proc/cpuinfo is Linux-only and
// names features differently from LLVM.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "kiln/runtime/library_info.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KILN_X86 1
#endif

namespace kiln {

namespace {

#ifdef KILN_X86
enum Reg { EAX, EBX, ECX, EDX };

// One feature: its LLVM name, where cpuid reports it, and the register state
// the OS must save for it to be usable.
struct X86Feature {
  const char* name;
  unsigned leaf, subleaf;
  Reg reg;
  int bit;
  enum State { None, Avx, Avx512 } state;
};

constexpr X86Feature kX86Features[] = {
    {"sse", 1, 0, EDX, 25, X86Feature::None},          {"sse2", 1, 0, EDX, 26, X86Feature::None},
    {"sse3", 1, 0, ECX, 0, X86Feature::None},          {"pclmul", 1, 0, ECX, 1, X86Feature::None},
    {"ssse3", 1, 0, ECX, 9, X86Feature::None},         {"fma", 1, 0, ECX, 12, X86Feature::Avx},
    {"sse4.1", 1, 0, ECX, 19, X86Feature::None},       {"sse4.2", 1, 0, ECX, 20, X86Feature::None},
    {"movbe", 1, 0, ECX, 22, X86Feature::None},        {"popcnt", 1, 0, ECX, 23, X86Feature::None},
    {"aes", 1, 0, ECX, 25, X86Feature::None},          {"avx", 1, 0, ECX, 28, X86Feature::Avx},
    {"f16c", 1, 0, ECX, 29, X86Feature::Avx},          {"bmi", 7, 0, EBX, 3, X86Feature::None},
    {"avx2", 7, 0, EBX, 5, X86Feature::Avx},           {"bmi2", 7, 0, EBX, 8, X86Feature::None},
    {"avx512f", 7, 0, EBX, 16, X86Feature::Avx512},    {"avx512dq", 7, 0, EBX, 17, X86Feature::Avx512},
    {"avx512ifma", 7, 0, EBX, 21, X86Feature::Avx512}, {"avx512cd", 7, 0, EBX, 28, X86Feature::Avx512},
    {"avx512bw", 7, 0, EBX, 30, X86Feature::Avx512},   {"avx512vl", 7, 0, EBX, 31, X86Feature::Avx512},
    {"avx512vbmi", 7, 0, ECX, 1, X86Feature::Avx512},  {"avx512vbmi2", 7, 0, ECX, 6, X86Feature::Avx512},
    {"gfni", 7, 0, ECX, 8, X86Feature::None},          {"vpclmulqdq", 7, 0, ECX, 10, X86Feature::Avx},
    {"avx512vnni", 7, 0, ECX, 11, X86Feature::Avx512}, {"avx512bitalg", 7, 0, ECX, 12, X86Feature::Avx512},
    {"avx512vpopcntdq", 7, 0, ECX, 14, X86Feature::Avx512},
    {"avx512fp16", 7, 0, EDX, 23, X86Feature::Avx512}, {"avxvnni", 7, 1, EAX, 4, X86Feature::Avx},
    {"avx512bf16", 7, 1, EAX, 5, X86Feature::Avx512},  {"lzcnt", 0x80000001, 0, ECX, 5, X86Feature::None},
    {"sse4a", 0x80000001, 0, ECX, 6, X86Feature::None}, {"xop", 0x80000001, 0, ECX, 11, X86Feature::Avx},
    {"fma4", 0x80000001, 0, ECX, 16, X86Feature::Avx},
};

bool known_feature(const std::string& name) {
  return std::any_of(std::begin(kX86Features), std::end(kX86Features), [&](const X86Feature& f) { return name == f.name; });
}

std::vector<std::string> detect() {
  unsigned max_leaf = __get_cpuid_max(0, nullptr), max_ext = __get_cpuid_max(0x80000000, nullptr);
  // OS support: xgetbv's XCR0 says which register files the kernel saves.
  bool avx_state = false, avx512_state = false;
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27))) {  // OSXSAVE
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    avx_state = (lo & 0x6) == 0x6;
    avx512_state = avx_state && (lo & 0xe0) == 0xe0;
  }
  std::vector<std::string> out;
  for (const X86Feature& f : kX86Features) {
    if (f.leaf >= 0x80000000 ? f.leaf > max_ext : f.leaf > max_leaf) continue;
    unsigned r[4] = {0, 0, 0, 0};
    __cpuid_count(f.leaf, f.subleaf, r[0], r[1], r[2], r[3]);
    if (!(r[f.reg] & (1u << f.bit))) continue;
    if ((f.state == X86Feature::Avx && !avx_state) || (f.state == X86Feature::Avx512 && !avx512_state)) continue;
    out.push_back(f.name);
  }
  return out;
}
#else
bool known_feature(const std::string&) { return false; }
std::vector<std::string> detect() { return {}; }
#endif

}  // namespace

std::vector<std::string> host_cpu_features() {
  static const std::vector<std::string> detected = detect();
  std::vector<std::string> out = detected;
  // Test-only hook (see the header): read at every call so tests can set it.
  if (const char* hide = std::getenv("KILN_TEST_HIDE_CPU_FEATURES")) {
    std::stringstream ss(hide);
    std::string name;
    while (std::getline(ss, name, ',')) out.erase(std::remove(out.begin(), out.end(), name), out.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> missing_cpu_features(const std::vector<std::string>& required) {
  std::vector<std::string> host = host_cpu_features(), missing;
  for (const std::string& f : required) {
    if (known_feature(f) && std::find(host.begin(), host.end(), f) == host.end()) missing.push_back(f);
  }
  return missing;
}

}  // namespace kiln
