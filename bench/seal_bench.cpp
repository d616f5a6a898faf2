// seal_bench: what checking an exported library's seal costs (library_seal.h).
// Writes a file of N MB (default 100: about a ResNet-50 library with its
// weights embedded), seals it, and times check_library_seal on it (read +
// XXH3-128, the page cache warm, as right after an export or a copy) and the
// hash alone over memory. With --file PATH it checks that sealed library instead.
//   seal_bench [MB] [repeats] [--file PATH]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kiln/runtime/library_seal.h"

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 100;
  int repeats = 5;
  std::string file;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--file" && i + 1 < argc) file = argv[++i];
    else pos.push_back(a);
  }
  if (pos.size() > 0) mb = std::atof(pos[0].c_str());
  if (pos.size() > 1) repeats = std::max(1, std::atoi(pos[1].c_str()));
  std::string dir;
  if (file.empty()) {
    char tmpl[] = "/tmp/kiln_seal_bench_XXXXXX";
    if (!mkdtemp(tmpl)) return 1;
    dir = tmpl;
    file = dir + "/lib.so";
    std::vector<uint64_t> data(static_cast<size_t>(mb * 1e6 / 8));
    std::mt19937_64 rng(1);
    for (uint64_t& w : data) w = rng();
    std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), data.size() * 8);
    auto t0 = std::chrono::steady_clock::now();
    kiln::seal_library(file, kiln::new_export_id());
    std::printf("seal (at export):      %8.1f ms\n", ms_since(t0));
  }
  double bytes = static_cast<double>(std::filesystem::file_size(file));
  std::vector<double> check_ms;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    kiln::LibrarySeal s = kiln::check_library_seal(file);
    check_ms.push_back(ms_since(t0));
    if (!s.problem.empty()) {
      std::printf("check failed: %s\n", s.problem.c_str());
      return 1;
    }
  }
  std::vector<char> mem(static_cast<size_t>(bytes), 1);
  std::vector<double> hash_ms;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    kiln::ContentHash h;
    h.update(mem.data(), mem.size());
    std::string d = h.digest();
    hash_ms.push_back(ms_since(t0));
    if (d.empty()) return 1;
  }
  double c = median(check_ms), h = median(hash_ms);
  std::printf("file %.1f MB, %d repeats (medians)\n", bytes / 1e6, repeats);
  std::printf("check (read + hash):   %8.1f ms  %7.0f MB/s\n", c, bytes / 1e6 / (c / 1e3));
  std::printf("hash alone (memory):   %8.1f ms  %7.0f MB/s\n", h, bytes / 1e6 / (h / 1e3));
  if (!dir.empty()) std::filesystem::remove_all(dir);
  return 0;
}
