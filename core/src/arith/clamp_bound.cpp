// max_through_clamps: a constant upper bound of an expression that looks
// through the mins and maxes clamping it at a domain's edge. An extent cut
// at the edge, min(x + 3, 99) - x + 1, is at most 4, but the bound of the
// min alone is about 99: the two x do not cancel. Replacing a min by one of
// its arguments where the expression grows with it (a max where it falls
// with it) gives an expression at least as large, whose bound may be tight.
#include <algorithm>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/op.h"

namespace kiln::arith {

namespace {

// e bounded from above (upper) or below, the choice-th min/max taking its
// second argument when bit `choice` of pick is set; *choices counts them.
Expr one_sided(const Expr& e, bool upper, uint32_t pick, int* choices) {
  auto choose = [&](const Expr& a, const Expr& b) {
    bool second = *choices < 32 && (pick >> *choices & 1);
    ++*choices;
    return one_sided(second ? b : a, upper, pick, choices);
  };
  if (const Add* op = e.as<Add>()) return one_sided(op->a, upper, pick, choices) + one_sided(op->b, upper, pick, choices);
  if (const Sub* op = e.as<Sub>()) return one_sided(op->a, upper, pick, choices) - one_sided(op->b, !upper, pick, choices);
  if (const Mul* op = e.as<Mul>())
    if (const int64_t* c = as_const_int(op->b)) return one_sided(op->a, *c >= 0 ? upper : !upper, pick, choices) * op->b;
  if (const Min* op = e.as<Min>(); op && upper) return choose(op->a, op->b);
  if (const Max* op = e.as<Max>(); op && !upper) return choose(op->a, op->b);
  // A max bounded from above (a min from below) keeps both sides, each bounded in turn: a region's
  // extent max(hi - lo + 1, 0) is at most the larger of the two bounds.
  if (const Max* op = e.as<Max>(); op && upper) return max(one_sided(op->a, upper, pick, choices), one_sided(op->b, upper, pick, choices));
  if (const Min* op = e.as<Min>(); op && !upper) return min(one_sided(op->a, upper, pick, choices), one_sided(op->b, upper, pick, choices));
  return e;
}

}  // namespace

int64_t max_through_clamps(const Expr& e, Analyzer* ana) {
  int64_t best = ana->const_int_bound(e).max;
  int choices = 0;
  one_sided(e, true, 0, &choices);
  // Each choice gives an upper bound; the first 16 combinations are tried.
  for (uint32_t pick = 0; pick < (1u << std::min(choices, 4)); ++pick) {
    int n = 0;
    best = std::min(best, ana->const_int_bound(ana->simplify(one_sided(e, true, pick, &n))).max);
  }
  return best;
}

}  // namespace kiln::arith
