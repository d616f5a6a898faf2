// Index terms: a flat index taken apart into the terms of its sum, and split
// into the part of the thread variables and the rest. Shared by the tensor
// core pass and the CUDA local compaction, which both find each thread's (or
// warp's) share of a block-level buffer this way.
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/pass/gpu.h"

namespace kiln::pass {

void sum_terms(const Expr& e, int sign, std::vector<std::pair<int, Expr>>* out) {
  if (const Add* a = e.as<Add>()) {
    sum_terms(a->a, sign, out);
    sum_terms(a->b, sign, out);
  } else if (const Sub* s = e.as<Sub>()) {
    sum_terms(s->a, sign, out);
    sum_terms(s->b, -sign, out);
  } else {
    out->emplace_back(sign, e);
  }
}

static Expr add_term(const Expr& acc, int sign, const Expr& t) {
  if (!acc.defined()) return sign > 0 ? t : make_zero(t.dtype()) - t;
  return sign > 0 ? acc + t : acc - t;
}

bool split_thread_part(const Expr& index, const std::unordered_set<const Variable*>& thread_vars, Expr* thread_part, Expr* rest) {
  std::vector<std::pair<int, Expr>> terms;
  sum_terms(index, 1, &terms);
  Expr t, r;
  for (const auto& [sign, term] : terms) {
    bool any_thread = uses_var(term, [&](const Variable* v) { return thread_vars.count(v) > 0; });
    bool any_other = uses_var(term, [&](const Variable* v) { return thread_vars.count(v) == 0; });
    if (any_thread && any_other) return false;
    if (any_thread) t = add_term(t, sign, term);
    else r = add_term(r, sign, term);
  }
  *thread_part = t.defined() ? t : make_zero(index.dtype());
  *rest = r.defined() ? r : make_zero(index.dtype());
  return true;
}

}  // namespace kiln::pass
