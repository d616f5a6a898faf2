/** \file
 * Arithmetic analysis: interval (bound) analysis of integer expressions and
 * the simplifier. Bound inference, loop partitioning and codegen rely on it.
 *
 * An Analyzer holds facts about variables (a range [min, min + extent)) and
 * answers questions under them: constant bounds of an expression, symbolic
 * intervals, provability of a condition, and the simplified form.
 *
 * Overflow: signed integers of 32 or 64 bits are index arithmetic and are
 * assumed never to overflow (as in Halide and TVM); that is what lets
 * floordiv(i*8 + j, 8) become i. Unsigned and narrow (8/16-bit) integers
 * wrap, and only rewrites that are exact under wrapping apply to them.
 * Floats are only constant-folded (plus x + 0, x - 0, x * 1, x / 1).
 *
 * Canonical form of an integer sum: terms by decreasing |coefficient|, then
 * compound terms before variables, variables by name; positive terms first,
 * then the subtracted ones, the constant last: i*8 + j - k*2 + 3.
 * Comparisons become EQ, NE, LT or LE (x > 5 is 5 < x) with the terms moved
 * to the side where they are positive.
 */
#ifndef KILN_ARITH_ANALYZER_H
#define KILN_ARITH_ANALYZER_H

#include <cstdint>
#include <limits>
#include <memory>
#include <unordered_map>

#include "kiln/ir/expr.h"
#include "kiln/ir/stmt.h"

namespace kiln::arith {

/** Inclusive constant bounds; kNegInf/kPosInf mean unbounded. */
struct ConstIntBound {
  static constexpr int64_t kNegInf = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kPosInf = std::numeric_limits<int64_t>::max();
  int64_t min = kNegInf;
  int64_t max = kPosInf;
  bool is_const() const { return min == max && min != kNegInf && min != kPosInf; }
  bool bounded() const { return min != kNegInf && max != kPosInf; }
};

/** A symbolic inclusive interval [min, max]; an undefined end is unbounded. */
struct IntervalSet {
  Expr min, max;
  static IntervalSet single_point(Expr e) { return {e, e}; }
  static IntervalSet everything() { return {}; }
  /** [r.min, r.min + r.extent - 1]. */
  static IntervalSet from_range(const Range& r);
  bool is_single_point() const;
  bool bounded() const { return min.defined() && max.defined(); }
  /** The range [min, max + 1); requires bounded(). */
  Range to_range() const;
};

/** Union hull of two intervals (either end unbounded stays unbounded). */
IntervalSet interval_union(const IntervalSet& a, const IntervalSet& b);

class Analyzer {
 public:
  Analyzer();
  ~Analyzer();
  Analyzer(const Analyzer&) = delete;
  Analyzer& operator=(const Analyzer&) = delete;

  /**
   * States var is in [range.min, range.min + range.extent). Rebinding replaces.
   * Symbolic ends are kept too, so with i in [0, n) the analyzer proves i < n.
   */
  void bind(const Var& var, const Range& range);
  /** States var == value (substituted during simplification). */
  void bind(const Var& var, const Expr& value);

  /**
   * Constant bounds of an integer (or bool) expression under the bound facts.
   * A 32/64-bit variable without a fact is unbounded (kNegInf, kPosInf), not
   * its type's range; 8/16-bit ones get their type's range. Bounds that
   * overflow int64 saturate to unbounded.
   */
  ConstIntBound const_int_bound(const Expr& e);
  /**
   * The interval e takes when each variable in `dom` ranges over its
   * interval; variables not in `dom` stay symbolic (their bound facts are
   * still used to simplify). Results are simplified. For a vector e the
   * ends are scalars bounding every lane.
   */
  IntervalSet eval_interval(const Expr& e, const std::unordered_map<const Variable*, IntervalSet>& dom);
  /** True only if cond (bool) holds for every value of the bound variables (false means "not proved"). */
  bool can_prove(const Expr& cond);
  /** Constant folding, canonical affine form, min/max/div/mod with known ranges. */
  Expr simplify(const Expr& e);
  /** The statement simplifier (see simplify_stmt.h) on top of the bound facts. */
  Stmt simplify(const Stmt& s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/** Simplify with no facts. */
Expr simplify(const Expr& e);

/**
 * A constant upper bound of the integer e under ana's facts, at least as
 * tight as const_int_bound's: also tried with each min that e grows with
 * (each max it falls with) replaced by one of its arguments, so an extent
 * clamped at a domain's edge, min(x + 3, 99) - x + 1, is bounded by 4.
 * ConstIntBound::kPosInf when unbounded.
 */
int64_t max_through_clamps(const Expr& e, Analyzer* ana);

}  // namespace kiln::arith

#endif  // KILN_ARITH_ANALYZER_H
