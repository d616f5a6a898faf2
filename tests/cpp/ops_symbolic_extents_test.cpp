// The operator library over symbolic extents (te shape variables): the
// extent arithmetic of kiln/ops/broadcast.h (provable equality, products,
// exact quotients, broadcasting that never takes a symbol for 1) and the
// computes that use it, run through the reference interpreter at several
// sizes against a naive loop.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/broadcast.h"
#include "kiln/ops/transform.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"

namespace kiln {
namespace {

using te::Tensor;
const DataType f32 = DataType::Float(32);

struct Vars {
  Var n{"n"}, m{"m"};
};

TEST(OpsSymbolicExtents, ProductsMatchFactorByFactor) {
  Vars v;
  EXPECT_TRUE(ops::same_product({v.n, v.m, 768}, {v.n * v.m, 12, 64}));
  EXPECT_TRUE(ops::same_product({v.m * 2, v.n}, {v.n, 2, v.m}));
  EXPECT_FALSE(ops::same_product({v.n, 768}, {v.m, 768}));
  EXPECT_FALSE(ops::same_product({v.n, 768}, {v.n, 384}));
}

TEST(OpsSymbolicExtents, ExactQuotientCancelsCommonFactors) {
  Vars v;
  EXPECT_EQ(to_string(ops::exact_quotient({v.n, v.m, 768}, {v.n, v.m})), "768");
  EXPECT_EQ(to_string(ops::exact_quotient({v.n, 768}, {12})), "n*64");
  EXPECT_FALSE(ops::exact_quotient({v.n}, {v.m}).defined());
  EXPECT_FALSE(ops::exact_quotient({v.n, 6}, {4}).defined());
}

TEST(OpsSymbolicExtents, BroadcastNeverTakesASymbolFor1) {
  Vars v;
  EXPECT_EQ(ops::extents_to_string(ops::broadcast_shape({v.n, 1}, {1, v.m})), "[n, m]");
  EXPECT_EQ(ops::extents_to_string(ops::broadcast_shape({v.n, 3}, {v.n, 3})), "[n, 3]");
  try {
    ops::broadcast_shape({v.n}, {Expr(768)});
    FAIL() << "n against 768 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dimension 0: n vs 768"), std::string::npos) << e.what();
  }
}

// X[n, m, 6] reshaped to [n, 3, m * 2] and joined with Y[n, 3, 1] along the last axis.
TEST(OpsSymbolicExtents, ReshapeAndConcatRunAtEverySize) {
  Vars v;
  Tensor X = te::placeholder({v.n, v.m, 6}, f32, "X"), Y = te::placeholder({v.n, 3, 1}, f32, "Y");
  Tensor R = ops::reshape(X, std::vector<Expr>{v.n, 3, v.m * 2});
  Tensor C = ops::concat({R, Y}, 2);
  EXPECT_EQ(ops::extents_to_string(C.shape()), "[n, 3, m*2 + 1]");
  PrimFunc f = te::lower(te::create_schedule({C}), {X, Y, C}, "f");
  for (auto [n, m] : {std::pair<int64_t, int64_t>{1, 1}, {2, 3}, {3, 5}}) {
    NDArray x = NDArray::empty({n, m, 6}, f32), y = NDArray::empty({n, 3, 1}, f32), c = NDArray::empty({n, 3, 2 * m + 1}, f32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>(i);
    for (int64_t i = 0; i < y.numel(); ++i) y.data_as<float>()[i] = -1.f - static_cast<float>(i);
    interpret_args(f, {x, y, c});
    // Row-major: element (b, r, k) of the reshape is x's flat element b * 6m + r * 2m + k.
    for (int64_t b = 0; b < n; ++b)
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t k = 0; k <= 2 * m; ++k) {
          float want = k < 2 * m ? static_cast<float>(b * 6 * m + r * 2 * m + k) : -1.f - static_cast<float>(b * 3 + r);
          EXPECT_EQ(c.data_as<float>()[(b * 3 + r) * (2 * m + 1) + k], want) << "n=" << n << " m=" << m << " at " << b << "," << r << "," << k;
        }
  }
}

TEST(OpsSymbolicExtents, ReshapeThatCannotBeProvenIsRefused) {
  Vars v;
  Tensor X = te::placeholder({v.n, 6}, f32, "X");
  try {
    ops::reshape(X, std::vector<Expr>{v.m, 6});
    FAIL() << "n x 6 to m x 6 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be proven equal"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
