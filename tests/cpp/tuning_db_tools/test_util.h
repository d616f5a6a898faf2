// Helpers shared by the tuning DB tests: a scratch directory, file bytes, and
// sample workloads, targets and records.
#ifndef KILN_TESTS_TUNING_DB_TEST_UTIL_H
#define KILN_TESTS_TUNING_DB_TEST_UTIL_H

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "../error_of.h"

namespace kiln::tuning_db::testing {

/** A fresh directory under $TMPDIR, removed with everything in it at the end. */
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln_db_test_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

using kiln::testing::error_of;

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

inline Workload sample_workload(const std::string& key = "0123456789abcdef",
                                const std::string& name = "matmul_64") {
  return {key, name, R"({"ops":[{"op":"matmul","shape":[64,64,64],"dtype":"float32"}]})"};
}

inline TargetInfo sample_target(const std::string& target = "llvm -mcpu=znver3 -num-cores=2") {
  return {target, "AMD EPYC 7763", {"fma", "avx2"}, "", "0.1.0"};
}

/** A valid record whose trace names `step` and whose median is `median`. */
inline Record sample_record(const std::string& key, double median, int step = 0) {
  Record r;
  r.workload_key = key;
  r.target = sample_target();
  r.trace = R"([{"kind":"split","axis":0,"factor":)" + std::to_string(step + 1) + "}]";
  r.run_times = {median * 1.5, median, median * 0.9};
  r.build_time = 0.25;
  return r;
}

inline Record failed_record(const std::string& key, ErrorKind kind, const std::string& msg) {
  Record r;
  r.workload_key = key;
  r.target = sample_target();
  r.trace = R"([{"kind":"vectorize","axis":1}])";
  r.error_kind = kind;
  r.error_msg = msg;
  return r;
}

}  // namespace kiln::tuning_db::testing

#endif  // KILN_TESTS_TUNING_DB_TEST_UTIL_H
