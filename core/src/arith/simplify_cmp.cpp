// Min/Max, comparisons and logic. Integer comparisons and min/max are first
// decided by the bounds of the difference of their operands (a linear form,
// so shared terms cancel: min(x, x + 1) -> x); undecided comparisons of
// no-overflow types are normalized to `positive terms < negative terms - c`,
// with GT/GE turned into LT/LE.

#include <numeric>

#include "simplify_internal.h"

namespace kiln::arith::detail {

namespace {
bool is_cmp(IRNodeKind k) {
  return k == IRNodeKind::EQ || k == IRNodeKind::NE || k == IRNodeKind::LT || k == IRNodeKind::LE || k == IRNodeKind::GT || k == IRNodeKind::GE;
}

// The operands of a comparison node.
std::pair<Expr, Expr> cmp_operands(const Expr& e) {
  switch (e->kind) {
#define KILN_X(T) \
  case IRNodeKind::T: return {e.as<T>()->a, e.as<T>()->b};
    KILN_X(EQ) KILN_X(NE) KILN_X(LT) KILN_X(LE) KILN_X(GT) KILN_X(GE) KILN_X(Min) KILN_X(Max) KILN_X(And) KILN_X(Or)
#undef KILN_X
    default: KILN_UNREACHABLE() << "operands of " << ir_node_kind_name(e->kind);
  }
  return {};
}

const IntImm* scalar_const(const Expr& e) {
  if (const Broadcast* b = e.as<Broadcast>()) return b->value.as<IntImm>();
  return e.as<IntImm>();
}

uint64_t uabs(int64_t v) { return v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v); }
int64_t negate(int64_t v) { return static_cast<int64_t>(0 - static_cast<uint64_t>(v)); }
}  // namespace

// ---------------------------------------------------------------- min / max

Expr Simplifier::simplify_min_max(IRNodeKind kind, const Expr& a, const Expr& b) {
  DataType t = a.dtype();
  bool is_min = kind == IRNodeKind::Min;
  if (expr_equal(a, b)) return a;
  const Broadcast* ba = a.as<Broadcast>();
  const Broadcast* bb = b.as<Broadcast>();
  if (ba && bb) return Broadcast::make(simplify_min_max(kind, ba->value, bb->value), t.lanes());
  if (t.is_float() && t.is_scalar()) {
    const FloatImm* x = a.as<FloatImm>();
    const FloatImm* y = b.as<FloatImm>();
    // NaN operands: the result depends on the target's min, so leave it.
    if (x && y && x->value == x->value && y->value == y->value) return is_min ? (x->value <= y->value ? a : b) : (x->value >= y->value ? a : b);
    return make_binary(kind, a, b);
  }
  if (!t.is_integer() || t.is_vector()) return make_binary(kind, a, b);
  const IntImm* x = a.as<IntImm>();
  const IntImm* y = b.as<IntImm>();
  if (x && y) return IntImm::make(t, *fold_int(kind, t, x->value, y->value));
  if (x) return simplify_min_max(kind, b, a);  // constants on the right
  bool a_le_b, a_ge_b;
  if (no_overflow(t)) {
    ConstIntBound d = diff_bound(a, b);
    a_le_b = d.max <= 0;
    a_ge_b = d.min >= 0;
  } else {
    ConstIntBound p = bound(a), q = bound(b);
    a_le_b = p.max <= q.min;
    a_ge_b = p.min >= q.max;
  }
  if (a_le_b) return is_min ? a : b;
  if (a_ge_b) return is_min ? b : a;
  // min(a, max(a, b)) == a and max(a, min(a, b)) == a.
  IRNodeKind other = is_min ? IRNodeKind::Max : IRNodeKind::Min;
  for (const auto& [p, q] : {std::pair{a, b}, std::pair{b, a}}) {
    if (q->kind != other) continue;
    auto [q0, q1] = cmp_operands(q);
    if (expr_equal(p, q0) || expr_equal(p, q1)) return p;
  }
  // min(min(x, c1), c2) -> min(x, min(c1, c2)).
  if (y && a->kind == kind) {
    auto [inner_a, inner_b] = cmp_operands(a);
    if (const IntImm* c = inner_b.as<IntImm>()) return simplify_min_max(kind, inner_a, IntImm::make(t, *fold_int(kind, t, c->value, y->value)));
  }
  // Commutative: operands in expression order (a constant is already on the right).
  if (!y && expr_compare(b, a) < 0) return make_binary(kind, b, a);
  return make_binary(kind, a, b);
}

Expr Simplifier::visit(const Min* op) { return simplify_min_max(IRNodeKind::Min, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const Max* op) { return simplify_min_max(IRNodeKind::Max, mutate(op->a), mutate(op->b)); }

// ---------------------------------------------------------------- comparisons

std::optional<bool> Simplifier::decide_cmp(IRNodeKind kind, const Expr& a, const Expr& b) {
  ConstIntBound d;
  if (no_overflow(a.dtype())) {
    d = diff_bound(a, b);
  } else if (expr_equal(a, b)) {
    d = {0, 0};
  } else {
    // Without the no-overflow assumption only the operands' own ranges are sound.
    ConstIntBound p = bound(a), q = bound(b);
    if (p.max < q.min) d = {ConstIntBound::kNegInf, -1};
    else if (p.min > q.max) d = {1, ConstIntBound::kPosInf};
    else if (p.max <= q.min) d = {ConstIntBound::kNegInf, 0};
    else if (p.min >= q.max) d = {0, ConstIntBound::kPosInf};
  }
  switch (kind) {
    case IRNodeKind::LT:
      if (d.max < 0) return true;
      if (d.min >= 0) return false;
      break;
    case IRNodeKind::LE:
      if (d.max <= 0) return true;
      if (d.min > 0) return false;
      break;
    case IRNodeKind::EQ:
    case IRNodeKind::NE:
      if (d.min == 0 && d.max == 0) return kind == IRNodeKind::EQ;
      if (d.min > 0 || d.max < 0) return kind == IRNodeKind::NE;
      break;
    default: break;
  }
  return std::nullopt;
}

Expr Simplifier::normalize_cmp(IRNodeKind kind, const Expr& a, const Expr& b) {
  DataType t = a.dtype();
  LinearForm d = linear_sub(linear_form(a), linear_form(b));
  bool equality = kind == IRNodeKind::EQ || kind == IRNodeKind::NE;
  if (equality) {
    // x*2 == 3 never holds; x*2 == 4 is x == 2.
    uint64_t g = 0;
    for (const Term& term : d.terms) g = std::gcd(g, uabs(term.coeff));
    if (g > 1) {
      if (uabs(d.constant) % g != 0) return IntImm::make(DataType::Bool(), kind == IRNodeKind::NE);
      for (Term& term : d.terms) term.coeff /= static_cast<int64_t>(g);
      d.constant /= static_cast<int64_t>(g);
    }
  }
  LinearForm pos{t, {}, 0}, neg{t, {}, 0};
  for (const Term& term : d.terms) {
    if (term.coeff > 0) pos.terms.push_back(term);
    else neg.terms.push_back({term.atom, wrap_int(t, negate(term.coeff))});
  }
  int64_t c = d.constant;
  if (equality && pos.terms.empty()) {
    std::swap(pos, neg);
    c = wrap_int(t, negate(c));
  }
  // d = pos - neg + c, so d < 0 <=> pos < neg - c (or c < neg when pos is empty).
  if (pos.terms.empty()) return make_binary(kind, IntImm::make(t, c), linear_to_expr(neg));
  neg.constant = wrap_int(t, negate(c));
  return make_binary(kind, linear_to_expr(pos), linear_to_expr(neg));
}

Expr Simplifier::simplify_cmp(IRNodeKind kind, const Expr& a, const Expr& b) {
  if (kind == IRNodeKind::GT) return simplify_cmp(IRNodeKind::LT, b, a);
  if (kind == IRNodeKind::GE) return simplify_cmp(IRNodeKind::LE, b, a);
  DataType t = a.dtype();
  const Broadcast* ba = a.as<Broadcast>();
  const Broadcast* bb = b.as<Broadcast>();
  if (ba && bb) return Broadcast::make(simplify_cmp(kind, ba->value, bb->value), t.lanes());
  if (t.is_vector()) return make_binary(kind, a, b);
  const IntImm* x = a.as<IntImm>();
  const IntImm* y = b.as<IntImm>();
  if (x && y) return IntImm::make(DataType::Bool(), fold_int_cmp(kind, t, x->value, y->value));
  const FloatImm* fx = a.as<FloatImm>();
  const FloatImm* fy = b.as<FloatImm>();
  if (fx && fy) return IntImm::make(DataType::Bool(), fold_float_cmp(kind, fx->value, fy->value));
  if (t.is_integer()) {
    if (auto r = decide_cmp(kind, a, b)) return IntImm::make(DataType::Bool(), *r);
    if (no_overflow(t)) return normalize_cmp(kind, a, b);
  }
  return make_binary(kind, a, b);
}

Expr Simplifier::visit(const EQ* op) { return simplify_cmp(IRNodeKind::EQ, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const NE* op) { return simplify_cmp(IRNodeKind::NE, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const LT* op) { return simplify_cmp(IRNodeKind::LT, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const LE* op) { return simplify_cmp(IRNodeKind::LE, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const GT* op) { return simplify_cmp(IRNodeKind::GT, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const GE* op) { return simplify_cmp(IRNodeKind::GE, mutate(op->a), mutate(op->b)); }

// ---------------------------------------------------------------- logic

Expr Simplifier::simplify_not(const Expr& a) {
  DataType t = a.dtype();
  if (const IntImm* x = a.as<IntImm>()) return IntImm::make(t, !x->value);
  if (const Broadcast* b = a.as<Broadcast>()) return Broadcast::make(simplify_not(b->value), b->lanes);
  if (const Not* n = a.as<Not>()) return n->a;
  if (is_cmp(a->kind)) {
    auto [x, y] = cmp_operands(a);
    // !(x < y) is y <= x only without NaN, so only for integers; == and != negate exactly for every type.
    bool integer = !x.dtype().is_float();
    switch (a->kind) {
      case IRNodeKind::EQ: return simplify_cmp(IRNodeKind::NE, x, y);
      case IRNodeKind::NE: return simplify_cmp(IRNodeKind::EQ, x, y);
      case IRNodeKind::LT: if (integer) return simplify_cmp(IRNodeKind::LE, y, x); break;
      case IRNodeKind::LE: if (integer) return simplify_cmp(IRNodeKind::LT, y, x); break;
      case IRNodeKind::GT: if (integer) return simplify_cmp(IRNodeKind::LE, x, y); break;
      case IRNodeKind::GE: if (integer) return simplify_cmp(IRNodeKind::LT, x, y); break;
      default: break;
    }
  }
  return Not::make(a);
}

Expr Simplifier::visit(const Not* op) {
  Expr a = mutate(op->a);
  return simplify_not(a);
}

Expr Simplifier::simplify_and_or(IRNodeKind kind, const Expr& a, const Expr& b) {
  DataType t = a.dtype();
  bool is_and = kind == IRNodeKind::And;
  const Broadcast* ba = a.as<Broadcast>();
  const Broadcast* bb = b.as<Broadcast>();
  if (ba && bb) return Broadcast::make(simplify_and_or(kind, ba->value, bb->value), t.lanes());
  const IntImm* x = scalar_const(a);
  const IntImm* y = scalar_const(b);
  // true && b == b, false && b == false; dually for ||.
  if (x) return (x->value != 0) == is_and ? b : a;
  if (y) return (y->value != 0) == is_and ? a : b;
  if (expr_equal(a, b)) return a;
  // a && !a is false, a || !a is true.
  if (expr_equal(simplify_not(a), b)) return make_int(t, is_and ? 0 : 1);
  if (expr_compare(b, a) < 0) return make_binary(kind, b, a);
  return make_binary(kind, a, b);
}

Expr Simplifier::visit(const And* op) { return simplify_and_or(IRNodeKind::And, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const Or* op) { return simplify_and_or(IRNodeKind::Or, mutate(op->a), mutate(op->b)); }

}  // namespace kiln::arith::detail
