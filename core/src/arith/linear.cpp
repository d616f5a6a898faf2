// Linear (affine) forms of integer expressions: the canonical form of sums.
//
// +, - and * by constants are ring operations modulo 2^bits, so collecting
// terms is exact for every integer type, wrapping or not; coefficients are
// therefore kept wrapped to the type's width.

#include <algorithm>

#include "simplify_internal.h"

namespace kiln::arith::detail {

namespace {
int64_t wadd(DataType t, int64_t a, int64_t b) { return wrap_int(t, static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b))); }
int64_t wmul(DataType t, int64_t a, int64_t b) { return wrap_int(t, static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b))); }
int64_t wneg(DataType t, int64_t a) { return wrap_int(t, static_cast<int64_t>(0 - static_cast<uint64_t>(a))); }

uint64_t uabs(int64_t v) { return v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v); }

// A negative coefficient is printed as a subtraction unless its negation
// does not fit (the most negative value of the type).
bool negatable(DataType t, int64_t k) { return k < 0 && wneg(t, k) > 0; }

// Whether e is y / c (of the division kind matching mod_kind) with y == x,
// or with y == x mod a where c divides a (then y mod c == x mod c too).
bool is_div_of(IRNodeKind mod_kind, const Expr& e, const Expr& x, int64_t c, Expr* y) {
  IRNodeKind div_kind = mod_kind == IRNodeKind::FloorMod ? IRNodeKind::FloorDiv : IRNodeKind::Div;
  if (e->kind != div_kind) return false;
  *y = div_kind == IRNodeKind::FloorDiv ? e.as<FloorDiv>()->a : e.as<Div>()->a;
  const Expr& b = div_kind == IRNodeKind::FloorDiv ? e.as<FloorDiv>()->b : e.as<Div>()->b;
  const IntImm* cb = b.as<IntImm>();
  if (!cb || cb->value != c) return false;
  if (expr_equal(*y, x)) return true;
  if ((*y)->kind != mod_kind) return false;
  const Expr& inner_x = mod_kind == IRNodeKind::FloorMod ? y->as<FloorMod>()->a : y->as<Mod>()->a;
  const IntImm* a = (mod_kind == IRNodeKind::FloorMod ? y->as<FloorMod>()->b : y->as<Mod>()->b).as<IntImm>();
  return a && a->value % c == 0 && expr_equal(inner_x, x);
}

// Whether e is (x / d) * d or d * (x / d), the division of the kind matching mod_kind.
bool is_div_times(IRNodeKind mod_kind, const Expr& e, const Expr& x, const Expr& d) {
  const Mul* mul = e.as<Mul>();
  if (!mul) return false;
  IRNodeKind div_kind = mod_kind == IRNodeKind::FloorMod ? IRNodeKind::FloorDiv : IRNodeKind::Div;
  for (const auto& [q, other] : {std::make_pair(mul->a, mul->b), std::make_pair(mul->b, mul->a)}) {
    if (q->kind != div_kind || !expr_equal(other, d)) continue;
    const Expr& qa = div_kind == IRNodeKind::FloorDiv ? q.as<FloorDiv>()->a : q.as<Div>()->a;
    const Expr& qb = div_kind == IRNodeKind::FloorDiv ? q.as<FloorDiv>()->b : q.as<Div>()->b;
    if (expr_equal(qa, x) && expr_equal(qb, d)) return true;
  }
  return false;
}

// floordiv(y, c)*(k*c) + floormod(y, c)*k == y*k (and the same for truncating
// div/mod): the identity of division with remainder. The remainder may read
// floormod(x, c) for y == floormod(x, a) with c | a, as split-of-fused loops
// produce. The divisor may be an expression (floordiv(y, n)*n*k +
// floormod(y, n)*k == y*k). Returns true when it merged a pair (the form is then no longer
// normalized).
bool merge_div_mod(LinearForm* f) {
  for (size_t i = 0; i < f->terms.size(); ++i) {
    const Expr& m = f->terms[i].atom;
    Expr x, divisor;
    if (const FloorMod* fm = m.as<FloorMod>()) x = fm->a, divisor = fm->b;
    else if (const Mod* tm = m.as<Mod>()) x = tm->a, divisor = tm->b;
    if (!divisor.defined()) continue;
    const IntImm* c = divisor.as<IntImm>();
    int64_t k = f->terms[i].coeff;
    if (!c) {
      // A divisor that is not a constant (a shape variable: rows fused over [seq, batch]).
      for (size_t j = 0; j < f->terms.size(); ++j) {
        Expr y;
        if (j == i || f->terms[j].coeff != k || !is_div_times(m->kind, f->terms[j].atom, x, divisor)) continue;
        f->terms.erase(f->terms.begin() + std::max(i, j));
        f->terms.erase(f->terms.begin() + std::min(i, j));
        linear_accumulate(f, x, k);
        return true;
      }
      continue;
    }
    if (c->value == 0) continue;
    for (size_t j = 0; j < f->terms.size(); ++j) {
      Expr y;
      if (j == i || f->terms[j].coeff != wmul(f->dtype, k, c->value) || !is_div_of(m->kind, f->terms[j].atom, x, c->value, &y)) continue;
      f->terms.erase(f->terms.begin() + std::max(i, j));
      f->terms.erase(f->terms.begin() + std::min(i, j));
      linear_accumulate(f, y, k);
      return true;
    }
  }
  return false;
}

// x*k - floordiv(x, c)*(k*c) == floormod(x, c)*k (and the same for truncating
// div/mod): the remainder, whose bounds [0, c) are known where x's are not.
// With i in [0, floordiv(n, 6)) the last full tile ends at
// n - floordiv(n, 6)*6 - 1 + ... : the remainder is what proves i*6 + 5 < n
// for a symbolic n (loop partitioning of a tiled dynamic axis).
bool split_remainder(LinearForm* f) {
  for (size_t j = 0; j < f->terms.size(); ++j) {
    const Expr& d = f->terms[j].atom;
    Expr x, divisor;
    if (const FloorDiv* fd = d.as<FloorDiv>()) x = fd->a, divisor = fd->b;
    else if (const Div* td = d.as<Div>()) x = td->a, divisor = td->b;
    const IntImm* c = divisor.defined() ? divisor.as<IntImm>() : nullptr;
    if (!c || c->value <= 1) continue;
    for (size_t i = 0; i < f->terms.size(); ++i) {
      int64_t k = f->terms[i].coeff;
      if (i == j || f->terms[j].coeff != wneg(f->dtype, wmul(f->dtype, k, c->value)) || !expr_equal(f->terms[i].atom, x)) continue;
      Expr rem = d->kind == IRNodeKind::FloorDiv ? Expr(FloorMod::make(x, divisor)) : Expr(Mod::make(x, divisor));
      f->terms.erase(f->terms.begin() + std::max(i, j));
      f->terms.erase(f->terms.begin() + std::min(i, j));
      f->terms.push_back({rem, k});
      return true;
    }
  }
  return false;
}
}  // namespace

int64_t wrap_int(DataType t, int64_t v) {
  int bits = t.bits();
  if (bits >= 64 || bits <= 0) return v;
  uint64_t mask = (uint64_t(1) << bits) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if ((u >> (bits - 1)) & 1) u |= ~mask;
  return static_cast<int64_t>(u);
}

void linear_accumulate(LinearForm* f, const Expr& e, int64_t scale) {
  DataType t = f->dtype;
  scale = wrap_int(t, scale);
  if (scale == 0) return;
  if (const IntImm* i = e.as<IntImm>()) {
    f->constant = wadd(t, f->constant, wmul(t, scale, i->value));
  } else if (const Add* add = e.as<Add>()) {
    linear_accumulate(f, add->a, scale);
    linear_accumulate(f, add->b, scale);
  } else if (const Sub* sub = e.as<Sub>()) {
    linear_accumulate(f, sub->a, scale);
    linear_accumulate(f, sub->b, wneg(t, scale));
  } else if (const Mul* mul = e.as<Mul>(); mul && (mul->a.as<IntImm>() || mul->b.as<IntImm>())) {
    const IntImm* k = mul->b.as<IntImm>() ? mul->b.as<IntImm>() : mul->a.as<IntImm>();
    linear_accumulate(f, mul->b.as<IntImm>() ? mul->a : mul->b, wmul(t, scale, k->value));
  } else {
    f->terms.push_back({e, scale});
  }
}

void linear_normalize(LinearForm* f) {
  std::stable_sort(f->terms.begin(), f->terms.end(), [](const Term& x, const Term& y) { return expr_compare(x.atom, y.atom) < 0; });
  std::vector<Term> merged;
  for (Term& t : f->terms) {
    if (!merged.empty() && expr_equal(merged.back().atom, t.atom)) merged.back().coeff = wadd(f->dtype, merged.back().coeff, t.coeff);
    else merged.push_back(std::move(t));
  }
  std::erase_if(merged, [](const Term& t) { return t.coeff == 0; });
  f->terms = std::move(merged);
  if (merge_div_mod(f) || split_remainder(f)) linear_normalize(f);
}

LinearForm linear_form(const Expr& e) {
  KILN_CHECK(e.dtype().is_integer() && e.dtype().is_scalar()) << "linear form of " << e.dtype().str();
  LinearForm f;
  f.dtype = e.dtype();
  linear_accumulate(&f, e, 1);
  linear_normalize(&f);
  return f;
}

LinearForm linear_sub(const LinearForm& a, const LinearForm& b) {
  LinearForm r = a;
  for (const Term& t : b.terms) r.terms.push_back({t.atom, wneg(a.dtype, t.coeff)});
  r.constant = wadd(a.dtype, a.constant, wneg(a.dtype, b.constant));
  linear_normalize(&r);
  return r;
}

Expr linear_to_expr(const LinearForm& f) {
  DataType t = f.dtype;
  std::vector<Term> terms = f.terms;
  std::stable_sort(terms.begin(), terms.end(), [](const Term& x, const Term& y) {
    if (uabs(x.coeff) != uabs(y.coeff)) return uabs(x.coeff) > uabs(y.coeff);
    return expr_compare(x.atom, y.atom) < 0;
  });
  auto term = [&](const Expr& atom, int64_t k) { return k == 1 ? atom : Mul::make(atom, IntImm::make(t, k)); };
  Expr acc;
  bool any_negative = false;
  for (const Term& x : terms) {
    if (negatable(t, x.coeff)) {
      any_negative = true;
      continue;
    }
    acc = acc.defined() ? Add::make(acc, term(x.atom, x.coeff)) : term(x.atom, x.coeff);
  }
  // c - x reads better than x*-1 + c when nothing else is positive.
  bool constant_done = false;
  if (!acc.defined() && any_negative && f.constant > 0) {
    acc = IntImm::make(t, f.constant);
    constant_done = true;
  }
  for (const Term& x : terms) {
    if (!negatable(t, x.coeff)) continue;
    acc = acc.defined() ? Sub::make(acc, term(x.atom, wneg(t, x.coeff))) : term(x.atom, x.coeff);
  }
  if (constant_done || (f.constant == 0 && acc.defined())) return acc;
  if (!acc.defined()) return IntImm::make(t, f.constant);
  if (negatable(t, f.constant)) return Sub::make(acc, IntImm::make(t, wneg(t, f.constant)));
  return Add::make(acc, IntImm::make(t, f.constant));
}

ConstIntBound linear_bound(const LinearForm& f, const std::function<ConstIntBound(const Expr&)>& atom_bound) {
  ConstIntBound r{f.constant, f.constant};
  for (const Term& t : f.terms) r = bound_add(r, bound_scale(atom_bound(t.atom), t.coeff));
  return r;
}

}  // namespace kiln::arith::detail
