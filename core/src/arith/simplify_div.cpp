// Division and remainder: Div/Mod truncate (C), FloorDiv/FloorMod round to
// -inf. Rules that need floor semantics also apply to the truncating forms
// when the numerator is provably non-negative (then the two agree).
//
// The central rule splits the numerator's linear form by the divisor c > 0:
//   floordiv(q*c + r, c) == q + floordiv(r, c),  floormod(q*c + r, c) == floormod(r, c)
// and then r is decided by its bounds when it stays in one period of c.

#include <numeric>

#include "simplify_internal.h"

namespace kiln::arith::detail {

namespace {
bool is_floor(IRNodeKind k) { return k == IRNodeKind::FloorDiv || k == IRNodeKind::FloorMod; }

// The divisor of a nested division of the same kind: (x / d) / c.
const IntImm* nested_divisor(IRNodeKind kind, const Expr& a, Expr* x) {
  Expr inner_b;
  if (a->kind != kind) return nullptr;
  switch (kind) {
    case IRNodeKind::Div: *x = a.as<Div>()->a, inner_b = a.as<Div>()->b; break;
    case IRNodeKind::FloorDiv: *x = a.as<FloorDiv>()->a, inner_b = a.as<FloorDiv>()->b; break;
    case IRNodeKind::Mod: *x = a.as<Mod>()->a, inner_b = a.as<Mod>()->b; break;
    case IRNodeKind::FloorMod: *x = a.as<FloorMod>()->a, inner_b = a.as<FloorMod>()->b; break;
    default: return nullptr;
  }
  const IntImm* d = inner_b.as<IntImm>();
  return d && d->value > 0 ? d : nullptr;
}

int64_t type_max(DataType t) {
  if (t.bits() >= 64) return t.is_uint() ? ConstIntBound::kPosInf : ConstIntBound::kPosInf - 1;
  return t.is_uint() ? (int64_t(1) << t.bits()) - 1 : (int64_t(1) << (t.bits() - 1)) - 1;
}

uint64_t uabs(int64_t v) { return v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v); }

bool one_period(ConstIntBound b, int64_t c) { return b.bounded() && floor_div(b.min, c) == floor_div(b.max, c); }
}  // namespace

Expr Simplifier::div_by_const(IRNodeKind kind, const Expr& a, int64_t c) {
  DataType t = a.dtype();
  bool floor = is_floor(kind);
  if (c == 1) return a;
  Expr x;
  if (const IntImm* d = nested_divisor(kind, a, &x)) {
    // floor(floor(x/d)/c) == floor(x/(d*c)); the same holds truncating.
    int64_t dc;
    if (!__builtin_mul_overflow(d->value, c, &dc) && dc <= type_max(t)) return div_by_const(kind, x, dc);
  }
  ConstIntBound ba = int_bound(a);
  bool floor_like = floor || ba.min >= 0 || t.is_uint();
  if (floor_like && one_period(ba, c)) return IntImm::make(t, floor_div(ba.min, c));
  if (!floor && ba.bounded() && ba.max <= 0 && ba.min / c == ba.max / c) return IntImm::make(t, ba.min / c);
  Expr unchanged = make_binary(kind, a, IntImm::make(t, c));
  if (!no_overflow(t) || !floor_like) return unchanged;

  LinearForm f = linear_form(a);
  // floordiv(g*x, g*c') == floordiv(x, c').
  uint64_t g = static_cast<uint64_t>(c);
  for (const Term& term : f.terms) g = std::gcd(g, uabs(term.coeff));
  g = std::gcd(g, uabs(f.constant));
  if (g > 1) {
    for (Term& term : f.terms) term.coeff /= static_cast<int64_t>(g);
    f.constant /= static_cast<int64_t>(g);
    return div_by_const(kind, linear_to_expr(f), c / static_cast<int64_t>(g));
  }
  LinearForm q{t, {}, 0}, r{t, {}, f.constant};
  for (const Term& term : f.terms) {
    if (term.coeff % c == 0) q.terms.push_back({term.atom, term.coeff / c});
    else r.terms.push_back(term);
  }
  ConstIntBound br = linear_bound_sym(r);
  if (one_period(br, c)) {
    q.constant = floor_div(br.min, c);
    return linear_to_expr(q);
  }
  if (q.terms.empty() && floor_mod(f.constant, c) == f.constant) return unchanged;
  q.constant = floor_div(f.constant, c);
  r.constant = floor_mod(f.constant, c);
  Expr rest = linear_to_expr(r);
  // The remainder part no longer has divisible terms, so this recursion stops.
  Expr rest_div = div_by_const(!floor && int_bound(rest).min >= 0 ? IRNodeKind::Div : IRNodeKind::FloorDiv, rest, c);
  linear_accumulate(&q, rest_div, 1);
  linear_normalize(&q);
  return linear_to_expr(q);
}

Expr Simplifier::mod_by_const(IRNodeKind kind, const Expr& a, int64_t c) {
  DataType t = a.dtype();
  bool floor = is_floor(kind);
  if (c == 1) return make_zero(t);
  Expr x;
  if (const IntImm* d = nested_divisor(kind, a, &x); d && d->value % c == 0) return mod_by_const(kind, x, c);
  ConstIntBound ba = int_bound(a);
  bool floor_like = floor || ba.min >= 0 || t.is_uint();
  if (floor_like && one_period(ba, c)) {
    int64_t k = floor_div(ba.min, c);
    return k == 0 ? a : simplify_add_sub(IRNodeKind::Sub, a, IntImm::make(t, k * c));
  }
  if (!floor && ba.bounded() && ba.max <= 0 && ba.min / c == ba.max / c) {
    int64_t k = ba.min / c;
    return k == 0 ? a : simplify_add_sub(IRNodeKind::Sub, a, IntImm::make(t, k * c));
  }
  Expr unchanged = make_binary(kind, a, IntImm::make(t, c));
  if (!no_overflow(t) || !floor_like) return unchanged;

  LinearForm f = linear_form(a);
  LinearForm r{t, {}, floor_mod(f.constant, c)};
  for (const Term& term : f.terms) {
    if (term.coeff % c != 0) r.terms.push_back(term);
  }
  ConstIntBound br = linear_bound_sym(r);
  if (one_period(br, c)) {
    r.constant -= floor_div(br.min, c) * c;
    return linear_to_expr(r);
  }
  if (r.terms.size() == f.terms.size() && r.constant == f.constant) return unchanged;
  Expr rest = linear_to_expr(r);
  return mod_by_const(!floor && int_bound(rest).min >= 0 ? IRNodeKind::Mod : IRNodeKind::FloorMod, rest, c);
}

// Vector index arithmetic: a Ramp inside one period of c divides to a
// Broadcast, and its remainder stays a Ramp (what vectorized loads need).
Expr Simplifier::div_mod_vector(IRNodeKind kind, const Expr& a, const Expr& b) {
  DataType t = a.dtype();
  int lanes = t.lanes();
  bool is_div = kind == IRNodeKind::Div || kind == IRNodeKind::FloorDiv;
  const Broadcast* ba = a.as<Broadcast>();
  const Broadcast* bb = b.as<Broadcast>();
  if (ba && bb) return Broadcast::make(simplify_div(kind, ba->value, bb->value), lanes);
  const Ramp* ra = a.as<Ramp>();
  const IntImm* c = bb ? bb->value.as<IntImm>() : nullptr;
  const IntImm* s = ra ? ra->stride.as<IntImm>() : nullptr;
  if (c && c->value == 1) return is_div ? a : make_zero(t);
  if (s && c && c->value > 0 && is_floor(kind) && no_overflow(t.element_of())) {
    int64_t cv = c->value;
    if (s->value % cv == 0) {
      if (!is_div) return Broadcast::make(simplify_div(IRNodeKind::FloorMod, ra->base, bb->value), lanes);
      Expr stride = IntImm::make(t.element_of(), s->value / cv);
      Expr base = simplify_div(IRNodeKind::FloorDiv, ra->base, bb->value);
      return is_zero(stride) ? Broadcast::make(base, lanes) : Ramp::make(base, stride, lanes);
    }
    if (s->value > 0) {
      Expr m = simplify_div(IRNodeKind::FloorMod, ra->base, bb->value);
      ConstIntBound bm = bound(m);
      if (bm.min >= 0 && sat_add(bm.max, sat_mul(s->value, lanes - 1)) < cv) {
        if (is_div) return Broadcast::make(simplify_div(IRNodeKind::FloorDiv, ra->base, bb->value), lanes);
        return Ramp::make(m, ra->stride, lanes);
      }
    }
  }
  return make_binary(kind, a, b);
}

Expr Simplifier::simplify_div(IRNodeKind kind, const Expr& a, const Expr& b) {
  DataType t = a.dtype();
  bool is_div = kind == IRNodeKind::Div || kind == IRNodeKind::FloorDiv;
  if (t.is_float()) {
    const FloatImm* x = a.as<FloatImm>();
    const FloatImm* y = b.as<FloatImm>();
    bool foldable = !t.is_bfloat() && (t.bits() == 32 || t.bits() == 64);
    if (kind == IRNodeKind::Div && x && y && foldable) return FloatImm::make(t, x->value / y->value);
    if (kind == IRNodeKind::Div && y && y->value == 1) return a;
    const Broadcast* ba = a.as<Broadcast>();
    const Broadcast* bb = b.as<Broadcast>();
    if (ba && bb) return Broadcast::make(simplify_div(kind, ba->value, bb->value), t.lanes());
    return make_binary(kind, a, b);
  }
  if (!t.is_integer()) return make_binary(kind, a, b);
  if (t.is_vector()) return div_mod_vector(kind, a, b);
  const IntImm* x = a.as<IntImm>();
  const IntImm* y = b.as<IntImm>();
  if (x && y) {
    if (auto r = fold_int(kind, t, x->value, y->value)) return IntImm::make(t, *r);
  }
  if (x && x->value == 0) return a;  // 0 / b and 0 % b are 0 wherever defined
  if (y && y->value > 0) return is_div ? div_by_const(kind, a, y->value) : mod_by_const(kind, a, y->value);
  return make_binary(kind, a, b);
}

Expr Simplifier::visit(const Div* op) { return simplify_div(IRNodeKind::Div, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const Mod* op) { return simplify_div(IRNodeKind::Mod, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const FloorDiv* op) { return simplify_div(IRNodeKind::FloorDiv, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const FloorMod* op) { return simplify_div(IRNodeKind::FloorMod, mutate(op->a), mutate(op->b)); }

}  // namespace kiln::arith::detail
