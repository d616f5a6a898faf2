// Symbolic intervals: what an integer expression ranges over when some of its
// variables range over intervals (bound inference's question). Each node
// combines its operands' intervals monotonically; what has no symbolic rule
// falls back to the constant bounds, with the domain's variables bounded by
// the constant bounds of their intervals.


#include "simplify_internal.h"

namespace kiln::arith {

using detail::Simplifier;

namespace detail {
namespace {
using Dom = std::unordered_map<const Variable*, IntervalSet>;

// Interval ends: an undefined end is unbounded, and stays so through + and *.
Expr add(const Expr& a, const Expr& b) { return a.defined() && b.defined() ? Add::make(a, b) : Expr(); }
Expr sub(const Expr& a, const Expr& b) { return a.defined() && b.defined() ? Sub::make(a, b) : Expr(); }
template <typename T>
Expr bin(const Expr& a, const Expr& b) { return a.defined() ? T::make(a, b) : Expr(); }
// min of a lower end: unbounded if either is; min of an upper end: the bounded one wins.
template <typename T>
Expr both(const Expr& a, const Expr& b) { return a.defined() && b.defined() ? T::make(a, b) : Expr(); }
template <typename T>
Expr either(const Expr& a, const Expr& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return T::make(a, b);
}

class IntervalEvaluator {
 public:
  IntervalEvaluator(Simplifier* s, const Dom& dom) : s_(s), dom_(dom) {
    // Conditions and fallbacks may use what the domain says about its variables.
    for (const auto& [v, set] : dom_) bind_const(Var(v), set);
  }

  IntervalSet eval(const Expr& e) {
    if (!uses_dom(e)) {
      // A vector's interval is over its lanes, in scalar ends: a lane-less
      // single point of a vector would make vector-typed ends.
      if (e.dtype().lanes() == 1) return IntervalSet::single_point(e);
      if (!e.as<Ramp>() && !e.as<Broadcast>()) return fallback(e);
    }
    DataType t = e.dtype();
    if (t.is_bool()) {
      Expr r = s_->mutate(e);
      return r.as<IntImm>() ? IntervalSet::single_point(r) : IntervalSet{const_false(), const_true()};
    }
    if (!t.is_integer()) return IntervalSet::everything();
    if (const Variable* v = e.as<Variable>()) return dom_.at(v);
    if (const Add* op = e.as<Add>()) {
      IntervalSet a = eval(op->a), b = eval(op->b);
      return {add(a.min, b.min), add(a.max, b.max)};
    }
    if (const Sub* op = e.as<Sub>()) {
      IntervalSet a = eval(op->a), b = eval(op->b);
      return {sub(a.min, b.max), sub(a.max, b.min)};
    }
    if (const Mul* op = e.as<Mul>()) return mul(e, eval(op->a), eval(op->b));
    if (const FloorDiv* op = e.as<FloorDiv>()) return div<FloorDiv>(e, eval(op->a), eval(op->b));
    if (const Div* op = e.as<Div>()) return div<Div>(e, eval(op->a), eval(op->b));
    if (const FloorMod* op = e.as<FloorMod>()) return mod<FloorDiv, FloorMod>(e, eval(op->a), eval(op->b), true);
    if (const Mod* op = e.as<Mod>()) return mod<Div, Mod>(e, eval(op->a), eval(op->b), false);
    if (const Min* op = e.as<Min>()) {
      IntervalSet a = eval(op->a), b = eval(op->b);
      return {both<Min>(a.min, b.min), either<Min>(a.max, b.max)};
    }
    if (const Max* op = e.as<Max>()) {
      IntervalSet a = eval(op->a), b = eval(op->b);
      return {either<Max>(a.min, b.min), both<Max>(a.max, b.max)};
    }
    if (const Select* op = e.as<Select>()) return select(op->condition, op->true_value, op->false_value);
    if (const Call* op = e.as<Call>(); op && op->op == Intrinsic::IfThenElse) return select(op->args[0], op->args[1], op->args[2]);
    if (const Let* op = e.as<Let>()) return let(op);
    if (const Cast* op = e.as<Cast>()) return cast(e, op);
    if (const Broadcast* op = e.as<Broadcast>()) return eval(op->value);
    if (const Ramp* op = e.as<Ramp>()) return ramp(e, op);
    return fallback(e);
  }

 private:
  bool uses_dom(const Expr& e) const {
    return uses_var(e, [this](const Variable* v) { return dom_.count(v) != 0; });
  }

  void bind_const(const Var& v, const IntervalSet& set) {
    ConstIntBound b;
    if (set.min.defined()) b.min = s_->bound(set.min).min;
    if (set.max.defined()) b.max = s_->bound(set.max).max;
    facts_.push(s_->facts(), VarFact{v, b, Expr(), Expr(), Expr()});
  }

  // The sign of a point: 1 when provably >= 0, -1 when <= 0, 0 when unknown.
  int sign_of(const IntervalSet& s) {
    if (!s.is_single_point()) return 0;
    ConstIntBound b = s_->bound(s.min);
    return b.min >= 0 ? 1 : b.max <= 0 ? -1 : 0;
  }

  IntervalSet mul(const Expr& e, const IntervalSet& a, const IntervalSet& b) {
    for (const auto& [x, k] : {std::pair{a, b}, std::pair{b, a}}) {
      int sign = sign_of(k);
      if (sign > 0) return {bin<Mul>(x.min, k.min), bin<Mul>(x.max, k.min)};
      if (sign < 0) return {bin<Mul>(x.max, k.min), bin<Mul>(x.min, k.min)};
    }
    return fallback(e);
  }

  // Floor and truncating division are both monotone in the dividend.
  template <typename T>
  IntervalSet div(const Expr& e, const IntervalSet& a, const IntervalSet& b) {
    int sign = sign_of(b);
    if (sign != 0 && !is_zero(b.min)) {
      if (sign > 0) return {bin<T>(a.min, b.min), bin<T>(a.max, b.min)};
      return {bin<T>(a.max, b.min), bin<T>(a.min, b.min)};
    }
    return fallback(e);
  }

  // x mod c is x - q*c while x stays in one period q; otherwise [0, c - 1].
  template <typename D, typename M>
  IntervalSet mod(const Expr& e, const IntervalSet& a, const IntervalSet& b, bool floor) {
    bool nonneg = a.min.defined() && s_->bound(a.min).min >= 0;
    if (sign_of(b) <= 0 || is_zero(b.min) || (!floor && !nonneg)) return fallback(e);
    const Expr& c = b.min;
    if (a.bounded() && c.as<IntImm>()) {
      Expr q = s_->mutate(D::make(a.min, c));
      if (is_zero(s_->mutate(Sub::make(D::make(a.max, c), q)))) {
        Expr shift = Mul::make(q, c);
        return {Sub::make(a.min, shift), Sub::make(a.max, shift)};
      }
    }
    Expr top = Sub::make(c, make_const(c.dtype(), 1));
    if (nonneg && a.max.defined()) top = Min::make(a.max, top);
    return {make_zero(c.dtype()), top};
  }

  IntervalSet select(const Expr& cond, const Expr& t, const Expr& f) {
    Expr c = s_->mutate(cond);
    if (const IntImm* v = c.as<IntImm>()) return eval(v->value ? t : f);
    IntervalSet a = eval(t), b = eval(f);
    return {both<Min>(a.min, b.min), both<Max>(a.max, b.max)};
  }

  IntervalSet let(const Let* op) {
    IntervalSet v = eval(op->value);
    const Variable* key = op->var.get();
    std::optional<IntervalSet> saved;
    if (auto it = dom_.find(key); it != dom_.end()) saved = it->second;
    dom_[key] = v;
    IntervalSet r;
    {
      ScopedFact fact(s_->facts(), op->var, s_->bound(op->value));
      r = eval(op->body);
    }
    if (saved) dom_[key] = *saved;
    else dom_.erase(key);
    return r;
  }

  IntervalSet cast(const Expr& e, const Cast* op) {
    IntervalSet v = eval(op->value);
    DataType from = op->value.dtype(), to = op->dtype;
    bool widening = from.is_integer() && to.is_integer() && (from.is_int() == to.is_int() ? to.bits() >= from.bits() : to.is_int() && to.bits() > from.bits());
    if (!widening) return fallback(e);
    DataType st = to.element_of();
    return {v.min.defined() ? Cast::make(st, v.min) : Expr(), v.max.defined() ? Cast::make(st, v.max) : Expr()};
  }

  IntervalSet ramp(const Expr& e, const Ramp* op) {
    IntervalSet base = eval(op->base), stride = eval(op->stride);
    int sign = sign_of(stride);
    if (sign == 0) return fallback(e);
    Expr span = Mul::make(stride.min, make_const(stride.min.dtype(), op->lanes - 1));
    if (sign > 0) return {base.min, add(base.max, span)};
    return {add(base.min, span), base.max};
  }

  IntervalSet fallback(const Expr& e) {
    ConstIntBound b = s_->bound(e);
    DataType t = e.dtype().element_of();
    IntervalSet r;
    if (b.min != ConstIntBound::kNegInf) r.min = IntImm::make(t, b.min);
    if (b.max != ConstIntBound::kPosInf) r.max = IntImm::make(t, b.max);
    return r;
  }

  Simplifier* s_;
  Dom dom_;
  ScopedFacts facts_;
};
}  // namespace

IntervalSet eval_interval(Simplifier* s, const Expr& e, const Dom& dom) {
  KILN_CHECK(e.defined()) << "eval_interval of an undefined expression";
  IntervalSet r;
  {
    IntervalEvaluator ev(s, dom);
    r = ev.eval(e);
  }
  if (r.min.defined()) r.min = s->mutate(r.min);
  if (r.max.defined()) r.max = s->mutate(r.max);
  return r;
}
}  // namespace detail

// ---------------------------------------------------------------- IntervalSet

IntervalSet IntervalSet::from_range(const Range& r) {
  KILN_CHECK(r.min.defined() && r.extent.defined()) << "interval of an undefined range";
  Expr last = Sub::make(Add::make(r.min, r.extent), make_const(r.min.dtype(), 1));
  return {r.min, simplify(last)};
}

bool IntervalSet::is_single_point() const { return min.defined() && max.defined() && detail::expr_equal(min, max); }

Range IntervalSet::to_range() const {
  KILN_USER_CHECK(bounded()) << "an unbounded interval has no range; bound the variables it depends on";
  Expr extent = Add::make(Sub::make(max, min), make_const(min.dtype(), 1));
  return Range(min, simplify(extent));
}

IntervalSet interval_union(const IntervalSet& a, const IntervalSet& b) {
  IntervalSet r;
  if (a.min.defined() && b.min.defined()) r.min = simplify(Min::make(a.min, b.min));
  if (a.max.defined() && b.max.defined()) r.max = simplify(Max::make(a.max, b.max));
  return r;
}

}  // namespace kiln::arith
