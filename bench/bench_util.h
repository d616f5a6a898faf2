// Shared helpers of the benchmarks: peers run as subprocesses in the same
// run (so kiln and its peer see the same machine state), statistics, and
// the table format every benchmark prints.
#ifndef KILN_BENCH_BENCH_UTIL_H
#define KILN_BENCH_BENCH_UTIL_H

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace kiln::bench {

inline double min_of(std::vector<double> v) { return *std::min_element(v.begin(), v.end()); }
inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/** Runs a shell command and returns its standard output; throws on failure. */
inline std::string run_command(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run: " + cmd);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  int rc = pclose(p);
  if (rc != 0) throw std::runtime_error("command failed (" + std::to_string(rc) + "): " + cmd + "\n" + out);
  return out;
}

/** Parses the "times" array of a peer's JSON line without a JSON library. */
inline std::vector<double> parse_times(const std::string& json) {
  std::vector<double> v;
  size_t a = json.find('['), b = json.find(']', a);
  if (a == std::string::npos || b == std::string::npos) throw std::runtime_error("peer printed no timings: " + json);
  std::string body = json.substr(a + 1, b - a - 1);
  for (size_t pos = 0; pos < body.size();) {
    size_t end = body.find(',', pos);
    v.push_back(std::stod(body.substr(pos, end - pos)));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return v;
}

/** The directory of this source tree's bench/ (for peer scripts). */
inline std::string bench_dir() { return KILN_BENCH_DIR; }

}  // namespace kiln::bench

#endif  // KILN_BENCH_BENCH_UTIL_H
