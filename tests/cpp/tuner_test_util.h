// What the tuner's session tests share: a throw-away database folder and the
// small GEMM task they tune.
#ifndef KILN_TESTS_TUNER_TEST_UTIL_H
#define KILN_TESTS_TUNER_TEST_UTIL_H

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "kiln/ops/nn.h"
#include "kiln/tuner/schedule_rules.h"

namespace kiln::tuner::testing {

/** A fresh folder under /tmp holding tune.db, removed with everything in it. */
struct TempDb {
  std::filesystem::path dir;
  TempDb() {
    char tmpl[] = "/tmp/kiln_tuner_test_XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~TempDb() { std::filesystem::remove_all(dir); }
  std::string path() const { return (dir / "tune.db").string(); }
};

/** C = A x B on n x n float32, for the host. */
inline Task gemm_task(int n) {
  te::Tensor A = te::placeholder({n, n}, DataType::Float(32), "A");
  te::Tensor B = te::placeholder({n, n}, DataType::Float(32), "B");
  return make_task({A, B, ops::matmul(A, B, "C")}, Target::host(), "matmul_" + std::to_string(n));
}

}  // namespace kiln::tuner::testing

#endif  // KILN_TESTS_TUNER_TEST_UTIL_H
