// Helpers shared by the C++ tests: random data, comparisons, running a
// lowered function on host vectors through the reference interpreter.
#ifndef KILN_TESTS_TEST_UTIL_H
#define KILN_TESTS_TEST_UTIL_H

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/function.h"
#ifdef KILN_WITH_LLVM
#include "kiln/codegen/llvm.h"
#endif

namespace kiln::testing {

inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/**
 * Runs f on every backend with each vector as one buffer argument, in
 * order: the reference interpreter writes into `bufs`, and (when kiln has
 * the LLVM backend) the JIT-compiled function runs on copies of the same
 * inputs and must agree with the interpreter on every buffer. Callers then
 * compare `bufs` with their naive reference, so both backends are checked.
 */
inline void run_backends(const PrimFunc& f, std::vector<std::vector<float>*> bufs) {
  std::vector<std::vector<float>> copies;
  for (auto* b : bufs) copies.push_back(*b);
  std::vector<void*> args;
  for (auto* b : bufs) args.push_back(b->data());
  interpret(f, args);
#ifdef KILN_WITH_LLVM
  static const Target host = Target::host();
  codegen::JitModule jit = codegen::jit_compile({f}, host);
  std::vector<void*> jargs;
  for (auto& c : copies) jargs.push_back(c.data());
  int rc = jit.get_function(f.name())(jargs.data());
  ASSERT_EQ(rc, 0) << "compiled " << f.name() << " failed";
  for (size_t i = 0; i < bufs.size(); ++i)
    for (size_t j = 0; j < copies[i].size(); ++j) {
      float a = copies[i][j], b = (*bufs[i])[j];
      if (std::isnan(a) && std::isnan(b)) continue;
      ASSERT_LE(std::fabs(a - b) / std::max(1.0f, std::fabs(b)), 1e-4f) << "LLVM and the interpreter differ in argument " << i << " element " << j << ": " << a << " vs " << b;
    }
#endif
}

/** Max relative error, scaled by max(1, |ref|). */
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-4f) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    float err = std::fabs(got[i] - want[i]) / std::max(1.0f, std::fabs(want[i]));
    if (!(err <= tol)) return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

/** Runs `body` and checks it throws kiln::Error whose message contains `needle`. */
template <typename F>
::testing::AssertionResult throws_with(F&& body, const std::string& needle) {
  try {
    body();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (msg.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "message '" << msg << "' lacks '" << needle << "'";
  }
  return ::testing::AssertionFailure() << "no exception thrown (expected one mentioning '" << needle << "')";
}

}  // namespace kiln::testing

#endif  // KILN_TESTS_TEST_UTIL_H
