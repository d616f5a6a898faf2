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

namespace kiln::testing {

inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/** Runs f through the interpreter with each vector as one buffer argument, in order. */
inline void interpret_on(const PrimFunc& f, std::vector<std::vector<float>*> bufs) {
  std::vector<void*> args;
  for (auto* b : bufs) args.push_back(b->data());
  interpret(f, args);
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
