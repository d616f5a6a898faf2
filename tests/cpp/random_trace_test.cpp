// Property test: random valid schedules of matmul and conv2d compute the
// same results as the unscheduled function (through the interpreter).
#include <gtest/gtest.h>

#include "kiln/ops/nn.h"
#include "kiln/te/lower.h"
#include "random_schedule.h"
#include "reference_ops.h"
#include "test_util.h"

namespace kiln {
namespace {

using te::Schedule;
using te::Tensor;

TEST(RandomTrace, MatmulMatchesReference) {
  const int m = 11, n = 13, k = 7;
  Tensor A = te::placeholder({m, k}, DataType::Float(32), "A"), B = te::placeholder({k, n}, DataType::Float(32), "B");
  Tensor C = ops::matmul(A, B);
  auto a = testing::random_vector(m * k, 1), b = testing::random_vector(k * n, 2);
  auto want = testing::ref::matmul(a, b, m, n, k);
  for (uint32_t seed = 0; seed < 200; ++seed) {
    Schedule s = te::create_schedule({C});
    testing::random_schedule(s, C, {}, seed);
    // The trace replays to the same schedule.
    Schedule r = Schedule::from_trace({C}, te::Trace::from_json(s.trace().to_json()));
    std::vector<float> c(m * n, 99.f);
    testing::run_backends(te::lower(r, {A, B, C}), {&a, &b, &c});
    ASSERT_TRUE(testing::all_close(c, want)) << "seed " << seed << "\n" << s.trace().str();
  }
}

TEST(RandomTrace, Conv2dMatchesReference) {
  testing::ref::ConvShape cs{1, 2, 7, 6, 3, 3, 3, 1, 1, 1};
  Tensor X = te::placeholder({cs.N, cs.C, cs.H, cs.W}, DataType::Float(32), "X");
  Tensor W = te::placeholder({cs.K, cs.C, cs.KH, cs.KW}, DataType::Float(32), "W");
  Tensor P;
  Tensor O = ops::conv2d_nchw(X, W, 1, 1, 1, "conv", &P);
  auto x = testing::random_vector(cs.N * cs.C * cs.H * cs.W, 3), w = testing::random_vector(cs.K * cs.C * 9, 4);
  auto want = testing::ref::conv2d(x, w, cs);
  for (uint32_t seed = 0; seed < 200; ++seed) {
    Schedule s = te::create_schedule({O});
    testing::random_schedule(s, O, {P}, seed + 1000);
    std::vector<float> o(want.size(), 99.f);
    testing::run_backends(te::lower(s, {X, W, O}), {&x, &w, &o});
    ASSERT_TRUE(testing::all_close(o, want)) << "seed " << seed << "\n" << s.trace().str();
  }
}

}  // namespace
}  // namespace kiln
