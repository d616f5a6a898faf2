// Tests of core/src/arith: constant bounds, symbolic intervals, the expression and
// statement simplifiers, provability; and a randomized check of all of them
// against exhaustive evaluation.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>

#include "kiln/arith/analyzer.h"
#include "kiln/arith/simplify_stmt.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ir/structural.h"
#include "kiln/support/error.h"

namespace kiln {
namespace {

using arith::Analyzer;
using arith::ConstIntBound;
using arith::IntervalSet;

constexpr int64_t kNegInf = ConstIntBound::kNegInf;
constexpr int64_t kPosInf = ConstIntBound::kPosInf;

// Simplifies `in` under `an`, compares with `expected`, and checks idempotence.
void check(Analyzer& an, const Expr& in, const Expr& expected) {
  Expr out = an.simplify(in);
  EXPECT_TRUE(structural_equal(out, expected)) << "input:    " << in << "\noutput:   " << out << "\nexpected: " << expected;
  Expr again = an.simplify(out);
  EXPECT_TRUE(structural_equal(again, out)) << "not idempotent: " << out << " -> " << again;
}

void check(const Expr& in, const Expr& expected) {
  Analyzer an;
  check(an, in, expected);
}

// The input must come back unchanged (and as the very same node).
void check_same(Analyzer& an, const Expr& in) {
  Expr out = an.simplify(in);
  EXPECT_TRUE(out.same_as(in)) << "input: " << in << "\noutput: " << out;
}

Expr i8(int64_t v) { return IntImm::make(DataType::Int(8), v); }
Expr u32(int64_t v) { return IntImm::make(DataType::UInt(32), v); }
Expr i64(int64_t v) { return IntImm::make(DataType::Int(64), v); }
Expr bcast(Expr v, int lanes) { return Broadcast::make(std::move(v), lanes); }

class ArithTest : public ::testing::Test {
 protected:
  Var x{"x"}, y{"y"}, z{"z"}, i{"i"}, j{"j"}, k{"k"}, n{"n"}, io{"io"};
  Var fx{"fx", DataType::Float(32)}, fy{"fy", DataType::Float(32)};
};

// ---------------------------------------------------------------- constant folding

TEST_F(ArithTest, FoldsIntegerConstants) {
  check(Expr(3) + 4, 7);
  check(Expr(7) - 10, -3);
  check(Expr(6) * 7, 42);
  check(truncdiv(-7, 2), -3);
  check(truncmod(-7, 2), -1);
  check(floordiv(-7, 2), -4);
  check(floormod(-7, 2), 1);
  check(floordiv(7, -2), -4);
  check(floormod(7, -2), -1);
  check(min(Expr(3), 9), 3);
  check(max(Expr(3), 9), 9);
  check(Expr(3) < 4, const_true());
  check(Expr(3) >= 4, const_false());
}

TEST_F(ArithTest, FoldsWithWrapAround) {
  check(i8(100) + i8(100), i8(-56));
  check(u32(0) - u32(1), u32(4294967295));
  check(Expr(2147483647) + 1, Expr(-2147483647 - 1));
  check(truncdiv(i64(std::numeric_limits<int64_t>::min()), i64(-1)), i64(std::numeric_limits<int64_t>::min()));
  // Unsigned comparison of a uint64 above 2^63.
  Expr big = IntImm::make(DataType::UInt(64), -1);
  check(LT::make(IntImm::make(DataType::UInt(64), 1), big), const_true());
}

TEST_F(ArithTest, LeavesDivisionByZero) {
  Analyzer an;
  check_same(an, truncdiv(Expr(7), 0));
  check_same(an, floormod(x, 0));
}

TEST_F(ArithTest, FoldsFloatsAndCasts) {
  check(Expr(1.5f) + 2.25f, Expr(3.75f));
  check(Expr(1.0f) / 4.0f, Expr(0.25f));
  check(Expr(1.5f) < 2.0f, const_true());
  check(Cast::make(DataType::Int(32), Expr(3.7f)), 3);
  check(Cast::make(DataType::Int(32), Expr(-3.7f)), -3);
  check(Cast::make(DataType::Int(8), Expr(300)), i8(44));
  check(Cast::make(DataType::Bool(), Expr(5)), const_true());
  check(Cast::make(DataType::Float(32), Expr(3)), Expr(3.0f));
  // An out-of-range float to int cast is undefined: left for run time.
  Analyzer an;
  check_same(an, Cast::make(DataType::Int(8), Expr(1e10)));
  // Widening then narrowing back is the identity.
  check(Cast::make(DataType::Int(32), Cast::make(DataType::Int(64), x)), x);
}

TEST_F(ArithTest, FloatsOnlyGetIdentities) {
  check(fx + 0.0f, fx);
  check(fx * 1.0f, fx);
  check(fx / 1.0f, fx);
  Analyzer an;
  check_same(an, (fx + fy) - fy);
  check_same(an, fx - fx);
  check_same(an, fx * 0.0f);
  check_same(an, !(fx < fy));  // not fy <= fx: NaN
}

// ---------------------------------------------------------------- canonical affine form

TEST_F(ArithTest, CanonicalAffineForm) {
  check((i * 8 + j) - (j + i * 8), 0);
  check((x + 3) + (y - 3) - x, y);
  check(2 * (i + 1), i * 2 + 2);
  check(y + x, x + y);
  check(y - x, y - x);
  check(0 - x, x * -1);
  check(5 - x, 5 - x);
  check(x * y - y * x, 0);
  check((x * 2) * (y * 3), (x * y) * 6);
  check(j + i * 8, i * 8 + j);
  check(x + x + x, x * 3);
  check((x - 1) * 4 + 4, x * 4);
  check(floordiv(x, 8) * 8 + floormod(x, 8), x);
  check(truncdiv(x, 4) * 4 + truncmod(x, 4), x);
  check(floordiv(floormod(x, 512), 16) * 16 + floormod(x, 16), floormod(x, 512));
  check(floordiv(floormod(x, 512), 16) * 1024 + floormod(x, 16) * 64 + floordiv(x, 512) * 32768, x * 64);
  check(floordiv(x + y, 8) * 16 + floormod(x + y, 8) * 2, x * 2 + y * 2);
}

// ---------------------------------------------------------------- div / mod

TEST_F(ArithTest, RemainderOfASymbolicDivision) {
  // x - floordiv(x, c)*c is the remainder, whose bounds are known where x's are not.
  check(n - floordiv(n, 6) * 6, floormod(n, 6));
  check(n * 2 - floordiv(n, 4) * 8, floormod(n, 4) * 2);
  Analyzer an;
  EXPECT_TRUE(an.can_prove(floordiv(n, 6) * 6 <= n));
  // The tiles of a dynamic extent: io below floordiv(n, 6) is a full tile.
  an.bind(io, Range(Expr(0), floordiv(n, 6)));
  an.bind(i, Range(0, 6));
  EXPECT_TRUE(an.can_prove(io * 6 + i < n));
  check(an, min(n - 1, io * 6 + 5) - io * 6 + 1, Expr(6));
}

TEST_F(ArithTest, DivisionWithRemainderByAShapeVariable) {
  // Rows fused over [seq, batch] read back at x*batch + y with x, y the fused
  // loop's division and remainder: the identity holds for any divisor.
  check(floordiv(x, n) * n + floormod(x, n), x);
  check(n * floordiv(x + 3, n) * 4 + floormod(x + 3, n) * 4, x * 4 + 12);
  check(floordiv(x, n) * n + floormod(x, y), floordiv(x, n) * n + floormod(x, y));  // another divisor: no identity
  check(floordiv(x, n) * n * 2 + floormod(x, n), floordiv(x, n) * n * 2 + floormod(x, n));  // coefficients differ
}

TEST_F(ArithTest, InnerSymbolicRangeIsSubstitutedFirst) {
  // i in [0, n - io*6) with io a loop of its own: i's end brings -io*6, which
  // cancels io's term before io is replaced by its own end.
  Analyzer an;
  an.bind(io, Range(Expr(0), floordiv(n + 5, 6)));
  an.bind(j, Range(Expr(0), floordiv(n, 6) - io + 1));
  an.bind(i, Range(Expr(0), n - io * 6 - j * 6));
  EXPECT_TRUE(an.can_prove(io * 6 + j * 6 + i < n));
  EXPECT_FALSE(an.can_prove(io * 6 + j * 6 + i < n - 1));
}


TEST_F(ArithTest, DivModWithRanges) {
  Analyzer an;
  an.bind(i, Range(0, 16));
  an.bind(j, Range(0, 8));
  check(an, floordiv(i * 8 + j, 8), i);
  check(an, floormod(i * 8 + j, 8), j);
  check(an, floordiv(i * 8 + j + 8, 8), i + 1);
  check(an, floordiv(i * 8 + j + 9, 8), floordiv(j + 1, 8) + i + 1);
  check(an, floormod(i * 8 + j + 9, 8), floormod(j + 1, 8));
  check(an, truncdiv(i * 8 + j, 8), i);
  check(an, truncmod(i * 8 + j, 8), j);
  check(an, floormod(j, 8), j);
  check(an, floordiv(j, 8), 0);
  check(an, floordiv(i * 16 + j * 2, 16), i);
  check(an, floordiv(x, 1), x);
  check(an, floormod(x, 1), 0);
  check(an, floordiv(floordiv(x, 4), 8), floordiv(x, 32));
  check(an, floormod(floormod(x, 16), 8), floormod(x, 8));
  check(an, floordiv(x * 4 + 6, 2), x * 2 + 3);
  check(an, floordiv(x * 6, 4), floordiv(x * 3, 2));
  check(an, floordiv(x * 8 + y, 8), floordiv(y, 8) + x);  // compound atoms sort first
  check(an, floormod(x * 8 + y, 8), floormod(y, 8));
  check(an, floormod(x + 9, 8), floormod(x + 1, 8));
  // Truncating division of a possibly negative numerator is not split.
  check_same(an, truncdiv(x * 8 + y, 8));
}

TEST_F(ArithTest, VectorIndexArithmetic) {
  Analyzer an;
  an.bind(i, Range(0, 16));
  check(an, Ramp::make(x, 1, 4) + bcast(y, 4), Ramp::make(x + y, 1, 4));
  check(an, bcast(y, 4) + Ramp::make(x, 1, 4), Ramp::make(x + y, 1, 4));
  check(an, bcast(x, 4) + bcast(y, 4), bcast(x + y, 4));
  check(an, bcast(x, 4) - Ramp::make(y, 2, 4), Ramp::make(x - y, -2, 4));
  check(an, Ramp::make(x, 2, 4) * bcast(3, 4), Ramp::make(x * 3, 6, 4));
  check(an, Ramp::make(x, 1, 4) - Ramp::make(x, 1, 4), bcast(0, 4));
  check(an, floordiv(Ramp::make(i * 8, 1, 8), bcast(8, 8)), bcast(i, 8));
  check(an, floormod(Ramp::make(i * 8, 1, 8), bcast(8, 8)), Ramp::make(0, 1, 8));
  check(an, floordiv(Ramp::make(i * 16, 8, 4), bcast(8, 4)), Ramp::make(i * 2, 1, 4));
}

// ---------------------------------------------------------------- min / max / compare / logic

TEST_F(ArithTest, MinMax) {
  Analyzer an;
  an.bind(i, Range(0, 64));
  check(an, min(x, x + 1), x);
  check(an, max(x, x + 1), x + 1);
  check(an, min(i, 64), i);
  check(an, max(i, 64), 64);
  check(an, min(i, 63), i);
  check(an, max(i, -1), i);
  check(an, min(min(x, 5), 3), min(x, 3));
  check(an, min(Expr(5), x), min(x, 5));
  check(an, max(y, x), max(x, y));
  check(an, min(x, max(x, y)), x);
  check(an, max(min(y, x), x), x);
  check_same(an, min(i, 32));
}

TEST_F(ArithTest, Comparisons) {
  Analyzer an;
  an.bind(i, Range(0, 64));
  check(an, i < 64, const_true());
  check(an, i >= 64, const_false());
  check(an, i * 2 + 1 < 128, const_true());
  check(an, i == -1, const_false());
  check_same(an, i < 63);
  check(an, x + 1 < y + 1, x < y);
  check(an, x > 5, 5 < x);
  check(an, x + 2 <= 7, x <= 5);
  check(an, x * 2 == 3, const_false());
  check(an, x * 2 == 4, x == 2);
  check(an, x == x, const_true());
  check(an, x - y != 0, x != y);
}

TEST_F(ArithTest, Logic) {
  Expr c = x < y;
  check(c && const_true(), c);
  check(const_false() || c, c);
  check(c && const_false(), const_false());
  check(c || const_true(), const_true());
  check(c && !c, const_false());
  check(c || !c, const_true());
  check(c && c, c);
  check(!(x < y), y <= x);
  check(!(x == y), x != y);
  check(!!(x == y), x == y);
}

TEST_F(ArithTest, Select) {
  Analyzer an;
  an.bind(i, Range(0, 64));
  check(an, select(i < 64, x, y), x);
  check(an, select(i < 0, x, y), y);
  check(an, select(x < y, z, z), z);
  check(an, select(!(fx < fy), z, x), select(fx < fy, x, z));
  check(an, select(!(x == y), z, x), select(x != y, z, x));
  check(an, select(Expr(1) < 2, x, y), x);
  check(an, if_then_else(i < 64, x, y), x);
  // Each value is simplified knowing which way the condition went.
  check(an, select(x < 5, min(x, 7), max(x, 4)), x);
  check(an, select(x < 5 && 2 <= y, min(x, 7) + max(y, 1), z), select(x < 5 && 2 <= y, x + y, z));
  check(an, if_then_else(i < 8, floordiv(i, 8), j), if_then_else(i < 8, 0, j));
}

TEST_F(ArithTest, SelectKeepsItsLoadsInBounds) {
  // Both values of a select are evaluated (a vector select loads every
  // lane): a load's index must stay in bounds where the condition is false,
  // so the clamp of A[max(i - 2, 0)] stays under `2 <= i`. Around the load,
  // and in the lazy if_then_else, the condition still simplifies.
  Analyzer an;
  an.bind(i, Range(0, 64));
  Buffer A = Buffer::make("A", DataType::Float(32), {64});
  Expr clamped = BufferLoad::make(A, {max(i - 2, 0)});
  Expr f0 = FloatImm::make(DataType::Float(32), 0.0);
  check_same(an, select(2 <= i, clamped, f0));
  check_same(an, select(x < 5 && 2 <= i, clamped, f0));
  check(an, select(2 <= i, clamped * cast(DataType::Float(32), max(i - 2, 0)), f0),
        select(2 <= i, clamped * cast(DataType::Float(32), i - 2), f0));
  check(an, select(2 <= i, select(x < 5, clamped, f0), f0), select(2 <= i, select(x < 5, clamped, f0), f0));
  check(an, if_then_else(2 <= i, clamped, f0), if_then_else(2 <= i, BufferLoad::make(A, {i - 2}), f0));
  // A lazy branch inside a select value is still evaluated wherever the select is.
  check_same(an, select(2 <= i, if_then_else(x < 5, clamped, f0), f0));
}

TEST_F(ArithTest, LetAndBoundValues) {
  Var v("v");
  check(Let::make(v, 3, v + 1), 4);
  check(Let::make(v, x * y, v + v), Let::make(v, x * y, v * 2));
  check(Let::make(v, x * y, x + 1), x + 1);
  Analyzer an;
  an.bind(n, Expr(16));
  check(an, floordiv(n * 4, 8), 8);
}

// ---------------------------------------------------------------- bounds

void expect_bound(Analyzer& an, const Expr& e, int64_t lo, int64_t hi) {
  ConstIntBound b = an.const_int_bound(e);
  EXPECT_EQ(b.min, lo) << e;
  EXPECT_EQ(b.max, hi) << e;
}

TEST_F(ArithTest, ConstIntBound) {
  Analyzer an;
  an.bind(i, Range(0, 8));
  an.bind(j, Range(-3, 7));
  expect_bound(an, i * 4 + 3, 3, 31);
  expect_bound(an, i - i, 0, 0);
  expect_bound(an, i * j, -21, 21);
  expect_bound(an, floordiv(i, 3), 0, 2);
  expect_bound(an, floordiv(j, 2), -2, 1);
  expect_bound(an, truncdiv(j, 2), -1, 1);
  expect_bound(an, floormod(x, 8), 0, 7);
  expect_bound(an, floormod(i + 8, 8), 0, 7);
  expect_bound(an, floormod(j, 8), 0, 7);
  expect_bound(an, truncmod(x, 5), -4, 4);
  expect_bound(an, truncmod(i, 5), 0, 4);
  expect_bound(an, min(i, 5) + max(j, 0), 0, 8);
  expect_bound(an, select(x < 0, i, j), -3, 7);
  expect_bound(an, x, kNegInf, kPosInf);
  expect_bound(an, x + 1, kNegInf, kPosInf);
  expect_bound(an, floordiv(i, x), -7, 7);
  Var v("v");
  expect_bound(an, Let::make(v, i + 1, v * v), 1, 64);
  // Narrow and unsigned types: their own range, and wrapping leaves it.
  Var b8("b8", DataType::UInt(8));
  expect_bound(an, b8, 0, 255);
  expect_bound(an, Cast::make(DataType::Int(32), b8) + 1, 1, 256);
  expect_bound(an, b8 + IntImm::make(DataType::UInt(8), 1), 0, 255);
  expect_bound(an, Cast::make(DataType::Int(8), i * 100), -128, 127);
  expect_bound(an, Cast::make(DataType::Int(8), i), 0, 7);
}

TEST_F(ArithTest, MaxThroughClamps) {
  Analyzer an;
  an.bind(i, Range(0, 2));   // the block
  an.bind(j, Range(0, 16));  // the thread
  // A thread's 4 of 100 rows, the block's 64 from i*64, cut at the edge: at most 4, though the min alone reaches 99.
  Expr start = i * 64 + j * 4;
  Expr cut = an.simplify(min(start + 3, 99) - start + 1);
  EXPECT_GT(an.const_int_bound(cut).max, 4) << cut;
  EXPECT_EQ(arith::max_through_clamps(cut, &an), 4) << cut;
  // The start clamped too (a max subtracted): still the tile.
  EXPECT_EQ(arith::max_through_clamps(an.simplify(min(start + 3, 99) - max(start - 2, 0) + 1), &an), 6);
  // A min that the expression falls with is kept: 10 - min(i, 5) reaches 10.
  EXPECT_EQ(arith::max_through_clamps(10 - min(j, 5), &an), 10);
  EXPECT_EQ(arith::max_through_clamps(min(j, 5) * -2 + 10, &an), 10);
  EXPECT_EQ(arith::max_through_clamps(x + 1, &an), kPosInf);
}

TEST_F(ArithTest, ConstIntBoundSaturates) {
  Analyzer an;
  Var w("w", DataType::Int(64));
  an.bind(w, Range(i64(0), i64(int64_t(1) << 62)));
  expect_bound(an, w * i64(8), 0, kPosInf);
  expect_bound(an, w * i64(-8), kNegInf, 0);
  expect_bound(an, w + w + w, 0, kPosInf);
  expect_bound(an, w * w, 0, kPosInf);
}

// ---------------------------------------------------------------- intervals

void expect_interval(Analyzer& an, const Expr& e, const std::unordered_map<const Variable*, IntervalSet>& dom, const Expr& lo, const Expr& hi) {
  IntervalSet s = an.eval_interval(e, dom);
  if (lo.defined()) EXPECT_TRUE(s.min.defined() && structural_equal(s.min, lo)) << e << ": min " << (s.min.defined() ? to_string(s.min) : "-inf") << ", expected " << lo;
  else EXPECT_FALSE(s.min.defined()) << e << ": min " << s.min;
  if (hi.defined()) EXPECT_TRUE(s.max.defined() && structural_equal(s.max, hi)) << e << ": max " << (s.max.defined() ? to_string(s.max) : "+inf") << ", expected " << hi;
  else EXPECT_FALSE(s.max.defined()) << e << ": max " << s.max;
}

TEST_F(ArithTest, EvalInterval) {
  Analyzer an;
  an.bind(io, Range(0, 4));
  std::unordered_map<const Variable*, IntervalSet> dom = {{i.get(), {io * 8, io * 8 + 7}}, {k.get(), {0, 2}}};
  expect_interval(an, i + k, dom, io * 8, io * 8 + 9);
  expect_interval(an, i - k, dom, io * 8 - 2, io * 8 + 7);
  expect_interval(an, floormod(i, 8), dom, 0, 7);
  expect_interval(an, floordiv(i, 8), dom, io, io);
  expect_interval(an, floormod(i + k, 8), dom, 0, 7);
  expect_interval(an, k * -2, dom, -4, 0);
  expect_interval(an, k * n, dom, Expr(), Expr());
  expect_interval(an, min(k, n), dom, min(n, 0), min(n, 2));
  expect_interval(an, i * 2 + n, dom, io * 16 + n, io * 16 + n + 14);
  expect_interval(an, x, dom, x, x);
  Var v("v");
  expect_interval(an, Let::make(v, k + 1, v * 4), dom, 4, 12);
  // A variable without a domain interval is unbounded through the fallback.
  std::unordered_map<const Variable*, IntervalSet> open = {{x.get(), IntervalSet::everything()}};
  expect_interval(an, x + 1, open, Expr(), Expr());
  expect_interval(an, floormod(x, 8), open, 0, 7);
  // Vector indices (a vectorized loop's): the interval is over the lanes, in
  // scalar ends, also for the parts that use no variable of the domain.
  expect_interval(an, Broadcast::make(k, 4) + Ramp::make(Expr(0), Expr(1), 4), dom, 0, 5);
  expect_interval(an, Ramp::make(i, Expr(2), 4), dom, io * 8, io * 8 + 13);
}

TEST_F(ArithTest, IntervalSetHelpers) {
  IntervalSet s = IntervalSet::from_range(Range(n, 8));
  EXPECT_TRUE(structural_equal(s.max, n + 7)) << s.max;
  Range r = s.to_range();
  EXPECT_TRUE(structural_equal(r.extent, Expr(8))) << r.extent;
  EXPECT_TRUE(IntervalSet::single_point(x).is_single_point());
  IntervalSet u = arith::interval_union({0, 4}, {2, 9});
  EXPECT_TRUE(structural_equal(u.min, Expr(0)) && structural_equal(u.max, Expr(9)));
  EXPECT_THROW(IntervalSet::everything().to_range(), Error);
}

TEST_F(ArithTest, CanProve) {
  Analyzer an;
  an.bind(i, Range(0, 8));
  EXPECT_TRUE(an.can_prove(i < 8));
  EXPECT_FALSE(an.can_prove(i < 7));
  EXPECT_TRUE(an.can_prove(i * 2 + 1 < 16));
  EXPECT_TRUE(an.can_prove(floormod(x, 8) < 8));
  EXPECT_TRUE(an.can_prove(x - 1 < x));
  EXPECT_FALSE(an.can_prove(x < y));
  EXPECT_TRUE(an.can_prove(i < 8 && 0 <= i));
  EXPECT_THROW(an.can_prove(x + 1), Error);
}

TEST_F(ArithTest, UserErrors) {
  Analyzer an;
  EXPECT_THROW(an.bind(x, Range(Expr(), 4)), Error);
  EXPECT_THROW(an.bind(x, Expr(1.5f)), Error);
  EXPECT_THROW(an.bind(x, Range(i64(0), 4)), Error);
}

// ---------------------------------------------------------------- statements

class StmtSimplifyTest : public ArithTest {
 protected:
  Buffer a = Buffer::make("A", DataType::Float(32), {64});
  Stmt store(const Expr& index, const Expr& value) { return BufferStore::make(a, value, {index}); }
  void check_stmt(const Stmt& in, const Stmt& expected) {
    Stmt out = arith::simplify(in);
    EXPECT_TRUE(structural_equal(out, expected)) << "input:\n" << in << "output:\n" << out << "expected:\n" << expected;
  }
};

TEST_F(StmtSimplifyTest, FoldsUnitAndEmptyLoops) {
  check_stmt(For::make(i, 0, 1, ForKind::Serial, store(i + 1, 1.0f)), store(1, 1.0f));
  check_stmt(For::make(i, n, 1, ForKind::Serial, store(i, 1.0f)), store(n, 1.0f));
  EXPECT_TRUE(is_nop(arith::simplify(For::make(i, 0, 0, ForKind::Serial, store(i, 1.0f)))));
  EXPECT_TRUE(is_nop(arith::simplify(For::make(i, 0, n - n, ForKind::Serial, store(i, 1.0f)))));
  // A thread-bound loop of extent 1 stays.
  Stmt bound = For::make(i, 0, 1, ForKind::ThreadBinding, store(i, 1.0f), "threadIdx.x");
  EXPECT_TRUE(arith::simplify(bound).same_as(bound));
}

TEST_F(StmtSimplifyTest, UsesLoopRanges) {
  Stmt in = For::make(i, 0, 4, ForKind::Serial, For::make(j, 0, 8, ForKind::Serial, store(floordiv(i * 8 + j, 8) + floormod(i * 8 + j, 8), 0.0f)));
  Stmt expected = For::make(i, 0, 4, ForKind::Serial, For::make(j, 0, 8, ForKind::Serial, store(i + j, 0.0f)));
  check_stmt(in, expected);
  // An if that the loop range decides.
  Stmt guarded = For::make(i, 0, 8, ForKind::Serial, IfThenElse::make(i < 8, store(i, 0.0f), store(i, 1.0f)));
  check_stmt(guarded, For::make(i, 0, 8, ForKind::Serial, store(i, 0.0f)));
  Stmt learned = For::make(i, 0, 16, ForKind::Serial, IfThenElse::make(i < 8, store(floordiv(i, 8), 0.0f), store(floordiv(i, 8), 1.0f)));
  check_stmt(learned, For::make(i, 0, 16, ForKind::Serial, IfThenElse::make(i < 8, store(0, 0.0f), store(1, 1.0f))));
  Stmt never = For::make(i, 0, 8, ForKind::Serial, IfThenElse::make(8 <= i, store(i, 0.0f)));
  EXPECT_TRUE(is_nop(arith::simplify(never)));
  // Symbolic bounds: i in [n, n + 4) makes i - n < 4.
  Stmt sym = For::make(i, n, 4, ForKind::Serial, IfThenElse::make(i - n < 4, store(i, 0.0f)));
  check_stmt(sym, For::make(i, n, 4, ForKind::Serial, store(i, 0.0f)));
  Stmt upto_n = For::make(i, 0, n, ForKind::Serial, IfThenElse::make(i < n, store(i, 0.0f)));
  check_stmt(upto_n, For::make(i, 0, n, ForKind::Serial, store(i, 0.0f)));
  Stmt tiled = For::make(io, 0, floordiv(n + 7, 8), ForKind::Serial,
                         For::make(i, 0, 8, ForKind::Serial, IfThenElse::make(io * 8 + i < floordiv(n + 7, 8) * 8, store(i, 0.0f))));
  check_stmt(tiled, For::make(io, 0, floordiv(n + 7, 8), ForKind::Serial, For::make(i, 0, 8, ForKind::Serial, store(i, 0.0f))));
}

TEST_F(StmtSimplifyTest, LetsSeqsAndAsserts) {
  Var v("v");
  check_stmt(LetStmt::make(v, 3, store(v * 2, 1.0f)), store(6, 1.0f));
  check_stmt(LetStmt::make(v, x * y, store(x, 1.0f)), store(x, 1.0f));
  Stmt kept = LetStmt::make(v, x * y, store(v + 0, 1.0f));
  check_stmt(kept, LetStmt::make(v, x * y, store(v, 1.0f)));
  check_stmt(Seq::make({store(0, 1.0f), make_nop(), IfThenElse::make(Expr(1) < 0, store(1, 1.0f))}), store(0, 1.0f));
  check_stmt(AssertStmt::make(Expr(1) < 2, "never", store(0, 1.0f)), store(0, 1.0f));
  check_stmt(IfThenElse::make(x < y, make_nop(), store(0, 1.0f)), IfThenElse::make(y <= x, store(0, 1.0f)));
  Stmt same = For::make(i, 0, n, ForKind::Serial, store(i, 1.0f));
  EXPECT_TRUE(arith::simplify(same).same_as(same));
}

// ---------------------------------------------------------------- randomized

// Evaluates an integer or bool expression with int64 arithmetic; flags when
// a value leaves int32 (the generator then discards the sample).
class Evaluator {
 public:
  std::unordered_map<const Variable*, int64_t> env;
  bool overflow = false;

  int64_t eval(const Expr& e) {
    int64_t v = eval_node(e);
    if (e.dtype() == DataType::Int(32) && (v < INT32_MIN || v > INT32_MAX)) overflow = true;
    return v;
  }

 private:
  static int64_t fdiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
  static int64_t fmod(int64_t a, int64_t b) { return a - fdiv(a, b) * b; }

  int64_t eval_node(const Expr& e) {
    if (const IntImm* op = e.as<IntImm>()) return op->value;
    if (const Variable* op = e.as<Variable>()) {
      auto it = env.find(op);
      if (it == env.end()) ADD_FAILURE() << "unbound variable " << op->name;
      return it == env.end() ? 0 : it->second;
    }
#define BIN(T, expr)                          \
  if (const T* op = e.as<T>()) {              \
    int64_t a = eval(op->a), b = eval(op->b); \
    return expr;                              \
  }
    BIN(Add, a + b)
    BIN(Sub, a - b)
    BIN(Mul, a * b)
    BIN(Div, b ? a / b : (ADD_FAILURE() << "division by zero in " << e, 0))
    BIN(Mod, b ? a % b : (ADD_FAILURE() << "division by zero in " << e, 0))
    BIN(FloorDiv, b ? fdiv(a, b) : (ADD_FAILURE() << "division by zero in " << e, 0))
    BIN(FloorMod, b ? fmod(a, b) : (ADD_FAILURE() << "division by zero in " << e, 0))
    BIN(Min, std::min(a, b))
    BIN(Max, std::max(a, b))
    BIN(EQ, a == b)
    BIN(NE, a != b)
    BIN(LT, a < b)
    BIN(LE, a <= b)
    BIN(GT, a > b)
    BIN(GE, a >= b)
    BIN(And, a && b)
    BIN(Or, a || b)
#undef BIN
    if (const Not* op = e.as<Not>()) return !eval(op->a);
    if (const Select* op = e.as<Select>()) {
      int64_t c = eval(op->condition), t = eval(op->true_value), f = eval(op->false_value);
      return c ? t : f;
    }
    if (const Let* op = e.as<Let>()) {
      env[op->var.get()] = eval(op->value);
      int64_t r = eval(op->body);
      env.erase(op->var.get());
      return r;
    }
    ADD_FAILURE() << "the test evaluator cannot evaluate " << e;
    return 0;
  }
};

class ExprGenerator {
 public:
  ExprGenerator(std::vector<Var> vars, uint32_t seed) : vars_(std::move(vars)), rng_(seed) {}

  Expr gen(int depth) {
    if (depth == 0 || pick(5) == 0) return leaf();
    Expr a = gen(depth - 1);
    switch (pick(13)) {
      case 0: return a + gen(depth - 1);
      case 1: return a - gen(depth - 1);
      case 2: return a * constant(-4, 4);
      case 3: return a * gen(depth - 1);
      case 4: return floordiv(a, divisor());
      case 5: return floormod(a, divisor());
      case 6: return truncdiv(a, divisor());
      case 7: return truncmod(a, divisor());
      case 8: return min(a, gen(depth - 1));
      case 9: return max(a, gen(depth - 1));
      case 10: return select(cond(depth - 1), a, gen(depth - 1));
      case 11: {
        Var v("t");
        return Let::make(v, a, gen(depth - 1) + v * constant(-2, 2));
      }
      default: return a + constant(-9, 9);
    }
  }

  Expr cond(int depth) {
    Expr a = gen(depth), b = gen(depth);
    switch (pick(8)) {
      case 0: return a < b;
      case 1: return a <= b;
      case 2: return a == b;
      case 3: return a != b;
      case 4: return a > b;
      case 5: return a >= b;
      case 6: return (a < b) && (gen(depth) < constant(-5, 5));
      default: return !(a < b) || (a == gen(depth));
    }
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  Expr constant(int lo, int hi) { return Expr(std::uniform_int_distribution<int>(lo, hi)(rng_)); }
  Expr divisor() {
    static const int kDivisors[] = {1, 2, 3, 4, 8, 5, 16, -2, -3};
    return Expr(kDivisors[pick(9)]);
  }
  Expr leaf() { return pick(3) == 0 ? constant(-8, 8) : vars_[pick(static_cast<int>(vars_.size()))]; }

  std::vector<Var> vars_;
  std::mt19937 rng_;
};

// Runs the randomized check: random expressions and conditions over `vars`,
// simplified under `an` and without facts, compared at every point that
// for_all_points visits (it sets ev.env); const_int_bound and eval_interval
// over `dom` must contain every value.
void run_randomized(const std::vector<Var>& vars, Analyzer& an, const std::unordered_map<const Variable*, IntervalSet>& dom, Evaluator& ev,
                    const std::function<void(const std::function<void()>&)>& for_all_points, uint32_t default_seed) {
  // KILN_ARITH_SEED / KILN_ARITH_ITERS widen the search when hunting a bug.
  const char* seed_env = std::getenv("KILN_ARITH_SEED");
  const char* iters_env = std::getenv("KILN_ARITH_ITERS");
  uint32_t seed = seed_env ? static_cast<uint32_t>(std::stoul(seed_env)) : default_seed;
  int iters = iters_env ? std::stoi(iters_env) : 3000;
  ExprGenerator gen(vars, seed);
  int tested = 0, proved = 0;
  for (int iter = 0; iter < iters && !::testing::Test::HasFailure(); ++iter) {
    Expr e = gen.gen(4);
    ev.overflow = false;
    for_all_points([&] { ev.eval(e); });
    if (ev.overflow) continue;
    ++tested;
    Expr with_facts = an.simplify(e);
    Expr without = arith::simplify(e);
    ASSERT_TRUE(structural_equal(an.simplify(with_facts), with_facts)) << e << "\n-> " << with_facts << "\n-> " << an.simplify(with_facts);
    ASSERT_TRUE(structural_equal(arith::simplify(without), without)) << e << "\n-> " << without << "\n-> " << arith::simplify(without);
    ConstIntBound b = an.const_int_bound(e), bs = an.const_int_bound(with_facts);
    IntervalSet s = an.eval_interval(e, dom);
    for_all_points([&] {
      int64_t want = ev.eval(e);
      ASSERT_EQ(ev.eval(with_facts), want) << e << "\nsimplified under facts: " << with_facts;
      ASSERT_EQ(ev.eval(without), want) << e << "\nsimplified: " << without;
      ASSERT_TRUE(b.min <= want && want <= b.max) << e << " = " << want << " outside const_int_bound [" << b.min << ", " << b.max << "]";
      ASSERT_TRUE(bs.min <= want && want <= bs.max) << with_facts << " = " << want << " outside const_int_bound [" << bs.min << ", " << bs.max << "]";
      // Interval ends may name variables outside dom: evaluate them at the same point.
      int64_t lo = s.min.defined() ? ev.eval(s.min) : kNegInf;
      int64_t hi = s.max.defined() ? ev.eval(s.max) : kPosInf;
      ASSERT_TRUE(lo <= want && want <= hi) << e << " = " << want << " outside eval_interval [" << s.min << ", " << s.max << "]";
    });
    // A random condition: simplification keeps it, and can_prove only claims what holds.
    Expr c = gen.cond(3);
    ev.overflow = false;
    for_all_points([&] { ev.eval(c); });
    if (ev.overflow) continue;
    Expr sc = an.simplify(c);
    bool provable = an.can_prove(c);
    proved += provable;
    for_all_points([&] {
      int64_t want = ev.eval(c);
      ASSERT_EQ(ev.eval(sc), want) << c << "\nsimplified: " << sc;
      if (provable) {
        ASSERT_TRUE(want) << "can_prove claimed " << c;
      }
    });
  }
  EXPECT_GT(tested, iters / 2);
  EXPECT_GT(proved, 0);
  std::printf("randomized: %d expressions checked, %d conditions proved\n", tested, proved);
}

TEST_F(ArithTest, RandomizedConstantRanges) {
  Analyzer an;
  an.bind(x, Range(-4, 10));
  an.bind(y, Range(0, 8));
  an.bind(z, Range(1, 3));
  std::unordered_map<const Variable*, IntervalSet> dom = {{x.get(), {-4, 5}}, {y.get(), {0, 7}}, {z.get(), {1, 3}}};
  Evaluator ev;
  run_randomized({x, y, z}, an, dom, ev,
                 [&](const std::function<void()>& f) {
                   for (int a = -4; a <= 5; ++a)
                     for (int b = 0; b <= 7; ++b)
                       for (int c = 1; c <= 3; ++c) {
                         ev.env = {{x.get(), a}, {y.get(), b}, {z.get(), c}};
                         f();
                       }
                 },
                 20240611);
}

// y ranges over [x, x + 4): exercises symbolic ranges (facts and intervals in terms of x).
TEST_F(ArithTest, RandomizedSymbolicRanges) {
  Analyzer an;
  an.bind(x, Range(-6, 12));
  an.bind(y, Range(x, 4));
  an.bind(z, Range(0, x + 7));
  std::unordered_map<const Variable*, IntervalSet> dom = {{y.get(), {x, x + 3}}, {z.get(), {0, x + 6}}};
  Evaluator ev;
  run_randomized({x, y, z}, an, dom, ev,
                 [&](const std::function<void()>& f) {
                   for (int a = -6; a <= 5; ++a)
                     for (int b = a; b <= a + 3; ++b)
                       for (int c = 0; c <= a + 6; ++c) {
                         ev.env = {{x.get(), a}, {y.get(), b}, {z.get(), c}};
                         f();
                       }
                 },
                 777);
}

}  // namespace
}  // namespace kiln
