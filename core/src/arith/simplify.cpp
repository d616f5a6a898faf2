// The simplifier's driver: dispatch, constants, casts, variables and the
// scoping nodes (Let, Reduce). The arithmetic rules live in
// simplify_arith.cpp, simplify_div.cpp and simplify_cmp.cpp.

#include <cmath>

#include "simplify_internal.h"

namespace kiln::arith::detail {

// ---------------------------------------------------------------- facts

ScopedFact::ScopedFact(Facts* facts, const Var& var, ConstIntBound bound, Expr value) : facts_(facts), key_(var.get()) {
  auto it = facts->find(key_);
  if (it != facts->end()) old_ = it->second;
  (*facts)[key_] = VarFact{var, bound, std::move(value), Expr(), Expr()};
}

ScopedFact::ScopedFact(Facts* facts, VarFact fact) : facts_(facts), key_(fact.var.get()) {
  auto it = facts->find(key_);
  if (it != facts->end()) old_ = it->second;
  (*facts)[key_] = std::move(fact);
}

ScopedFact::ScopedFact(Facts* facts, const Variable* key, const std::optional<VarFact>& fact) : facts_(facts), key_(key) {
  auto it = facts->find(key_);
  if (it != facts->end()) old_ = it->second;
  if (fact) (*facts)[key_] = *fact;
  else facts->erase(key_);
}

ScopedFact::~ScopedFact() {
  if (old_) (*facts_)[key_] = std::move(*old_);
  else facts_->erase(key_);
}

// ---------------------------------------------------------------- constants

std::optional<int64_t> fold_int(IRNodeKind kind, DataType t, int64_t a, int64_t b) {
  bool u64 = t.is_uint() && t.bits() == 64;
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (kind) {
    case IRNodeKind::Add: return static_cast<int64_t>(ua + ub);
    case IRNodeKind::Sub: return static_cast<int64_t>(ua - ub);
    case IRNodeKind::Mul: return static_cast<int64_t>(ua * ub);
    case IRNodeKind::Min: return u64 ? static_cast<int64_t>(std::min(ua, ub)) : std::min(a, b);
    case IRNodeKind::Max: return u64 ? static_cast<int64_t>(std::max(ua, ub)) : std::max(a, b);
    case IRNodeKind::Div:
    case IRNodeKind::Mod:
    case IRNodeKind::FloorDiv:
    case IRNodeKind::FloorMod: {
      if (b == 0) return std::nullopt;  // undefined: leave the division in place
      bool is_div = kind == IRNodeKind::Div || kind == IRNodeKind::FloorDiv;
      if (u64) return static_cast<int64_t>(is_div ? ua / ub : ua % ub);
      if (b == -1) return is_div ? static_cast<int64_t>(0 - ua) : 0;  // INT64_MIN / -1 wraps
      if (kind == IRNodeKind::Div) return a / b;
      if (kind == IRNodeKind::Mod) return a % b;
      return is_div ? floor_div(a, b) : floor_mod(a, b);
    }
    default: return std::nullopt;
  }
}

bool fold_int_cmp(IRNodeKind kind, DataType t, int64_t a, int64_t b) {
  bool u64 = t.is_uint() && t.bits() == 64;
  auto lt = [&](int64_t x, int64_t y) { return u64 ? static_cast<uint64_t>(x) < static_cast<uint64_t>(y) : x < y; };
  switch (kind) {
    case IRNodeKind::EQ: return a == b;
    case IRNodeKind::NE: return a != b;
    case IRNodeKind::LT: return lt(a, b);
    case IRNodeKind::LE: return !lt(b, a);
    case IRNodeKind::GT: return lt(b, a);
    case IRNodeKind::GE: return !lt(a, b);
    default: KILN_UNREACHABLE() << "fold of a non-comparison";
  }
  return false;
}

bool fold_float_cmp(IRNodeKind kind, double a, double b) {
  switch (kind) {
    case IRNodeKind::EQ: return a == b;
    case IRNodeKind::NE: return a != b;
    case IRNodeKind::LT: return a < b;
    case IRNodeKind::LE: return a <= b;
    case IRNodeKind::GT: return a > b;
    case IRNodeKind::GE: return a >= b;
    default: KILN_UNREACHABLE() << "fold of a non-comparison";
  }
  return false;
}

Expr make_int(DataType t, int64_t v) {
  if (t.is_vector()) return Broadcast::make(IntImm::make(t.element_of(), v), t.lanes());
  return IntImm::make(t, v);
}

Expr make_binary(IRNodeKind kind, const Expr& a, const Expr& b) {
  switch (kind) {
#define KILN_X(T) \
  case IRNodeKind::T: return T::make(a, b);
    KILN_X(Add) KILN_X(Sub) KILN_X(Mul) KILN_X(Div) KILN_X(Mod) KILN_X(FloorDiv) KILN_X(FloorMod) KILN_X(Min) KILN_X(Max)
    KILN_X(EQ) KILN_X(NE) KILN_X(LT) KILN_X(LE) KILN_X(GT) KILN_X(GE) KILN_X(And) KILN_X(Or)
#undef KILN_X
    default: KILN_UNREACHABLE() << "make_binary of " << ir_node_kind_name(kind);
  }
  return Expr();
}

// ---------------------------------------------------------------- driver

Expr Simplifier::mutate(const Expr& e) {
  Expr r = IRMutator::mutate(e);
  // Keep the original node when the rules rebuilt it unchanged, so callers can use same_as.
  if (!r.same_as(e) && expr_equal(r, e)) return e;
  return r;
}

namespace {
// Replaces each variable with a symbolic range by the end of the range that
// bounds f from above (upper) or below, by the sign of its coefficient.
// With `dependent_only`, only the innermost of the variables whose end
// reads another variable of f that has a symbolic range itself (an inner
// loop's range over an outer one's, ii in [0, n - io*6)): the one no other
// such end reads. Substituted first, its outer variables cancel before they
// are replaced by their own (looser) ends.
bool substitute_range_ends(const Facts& facts, LinearForm* f, bool upper, bool dependent_only = false) {
  auto end_of = [&](const Term& t) -> const Expr* {
    const Variable* v = t.atom.as<Variable>();
    auto it = v ? facts.find(v) : facts.end();
    if (it == facts.end() || !it->second.sym_min.defined() || it->second.sym_min.dtype() != f->dtype) return nullptr;
    return (t.coeff > 0) == upper ? &it->second.sym_max : &it->second.sym_min;
  };
  auto reads = [&](const Expr& end, const Variable* u) { return uses_var(end, [&](const Variable* x) { return x == u; }); };
  std::vector<bool> pick(f->terms.size(), false);
  for (size_t i = 0; i < f->terms.size(); ++i) {
    const Expr* end = end_of(f->terms[i]);
    if (!end) continue;
    if (!dependent_only) {
      pick[i] = true;
      continue;
    }
    bool dependent = false, read_by_other = false;
    for (size_t j = 0; j < f->terms.size(); ++j) {
      if (j == i || !end_of(f->terms[j])) continue;
      dependent = dependent || reads(*end, f->terms[j].atom.as<Variable>());
      read_by_other = read_by_other || reads(*end_of(f->terms[j]), f->terms[i].atom.as<Variable>());
    }
    pick[i] = dependent && !read_by_other;
  }
  LinearForm out{f->dtype, {}, f->constant};
  bool changed = false;
  for (size_t i = 0; i < f->terms.size(); ++i) {
    if (pick[i]) {
      linear_accumulate(&out, *end_of(f->terms[i]), f->terms[i].coeff);
      changed = true;
    } else {
      out.terms.push_back(f->terms[i]);
    }
  }
  if (changed) {
    linear_normalize(&out);
    *f = std::move(out);
  }
  return changed;
}
}  // namespace

ConstIntBound Simplifier::linear_bound_sym(const LinearForm& f) const {
  auto atom_bound = [this](const Expr& x) { return bound(x); };
  ConstIntBound r = linear_bound(f, atom_bound);
  // Each substitution only loosens the form in the bounded direction, so
  // every round yields a sound bound; nested loops need a few rounds.
  for (bool upper : {true, false}) {
    LinearForm g = f;
    for (int round = 0; round < 4 && (substitute_range_ends(*facts_, &g, upper, true) || substitute_range_ends(*facts_, &g, upper)); ++round) {
      ConstIntBound b = linear_bound(g, atom_bound);
      if (upper) r.max = std::min(r.max, b.max);
      else r.min = std::max(r.min, b.min);
    }
  }
  return r;
}

ConstIntBound Simplifier::int_bound(const Expr& e) const {
  DataType t = e.dtype();
  if (no_overflow(t) && t.is_scalar()) return linear_bound_sym(linear_form(e));
  return bound(e);
}

ConstIntBound Simplifier::diff_bound(const Expr& a, const Expr& b) const {
  DataType t = a.dtype();
  if (no_overflow(t) && t.is_scalar()) return linear_bound_sym(linear_sub(linear_form(a), linear_form(b)));
  ConstIntBound x = bound(a), y = bound(b);
  return bound_add(x, {sat_neg(y.max), sat_neg(y.min)});
}

bool Simplifier::prove(const Expr& cond) {
  Expr r = mutate(cond);
  const int64_t* v = as_const_int(r);
  return v && *v != 0;
}

ConstIntBound Simplifier::range_bound(const Expr& min, const Expr& extent) {
  ConstIntBound lo = bound(min);
  ConstIntBound hi;
  if (no_overflow(min.dtype())) {
    LinearForm last = linear_form(Add::make(min, extent));
    last.constant -= 1;
    hi = linear_bound(last, [this](const Expr& x) { return bound(x); });
  } else {
    hi = bound_add(bound_add(lo, bound(extent)), {-1, -1});
  }
  // An empty loop runs no iteration, so any bound is true; keep min <= max for consumers.
  return {lo.min, std::max(lo.min, hi.max)};
}

VarFact Simplifier::range_fact(const Var& var, const Expr& min, const Expr& extent) {
  VarFact f{var, range_bound(min, extent), Expr(), Expr(), Expr()};
  const Variable* v = var.get();
  bool self = uses_var(min, [v](const Variable* x) { return x == v; }) || uses_var(extent, [v](const Variable* x) { return x == v; });
  if (no_overflow(min.dtype()) && min.dtype() == var.dtype() && !(min.as<IntImm>() && extent.as<IntImm>()) && !self) {
    f.sym_min = min;
    f.sym_max = simplify_add_sub(IRNodeKind::Sub, simplify_add_sub(IRNodeKind::Add, min, extent), make_const(min.dtype(), 1));
  }
  return f;
}

void Simplifier::learn(const Expr& cond, bool truth, ScopedFacts* out) {
  if (!cond.dtype().is_scalar()) return;
  if (const Not* n = cond.as<Not>()) return learn(n->a, !truth, out);
  if (const And* a = cond.as<And>()) {
    if (truth) learn(a->a, true, out), learn(a->b, true, out);
    return;
  }
  if (const Or* o = cond.as<Or>()) {
    if (!truth) learn(o->a, false, out), learn(o->b, false, out);
    return;
  }
  if (!truth) {
    Expr neg = simplify_not(cond);
    if (!neg.as<Not>()) learn(neg, true, out);
    return;
  }
  // Simplified comparisons are EQ, NE, LT or LE; only `var op const` and `const op var` teach anything.
  Expr a, b;
  if (const LT* op = cond.as<LT>()) a = op->a, b = op->b;
  else if (const LE* op = cond.as<LE>()) a = op->a, b = op->b;
  else if (const EQ* op = cond.as<EQ>()) a = op->a, b = op->b;
  else return;
  DataType t = a.dtype();
  if (!t.is_integer() || (t.is_uint() && t.bits() == 64)) return;
  const Variable* v = a.as<Variable>();
  const IntImm* c = b.as<IntImm>();
  bool var_left = v && c;
  if (!var_left) {
    v = b.as<Variable>();
    c = a.as<IntImm>();
  }
  if (!v || !c) return;
  auto it = facts_->find(v);
  VarFact fact = it != facts_->end() ? it->second : VarFact{Var(v), type_bound(t), Expr(), Expr(), Expr()};
  ConstIntBound& r = fact.bound;
  int64_t k = c->value;
  if (cond.as<EQ>()) {
    r = {std::max(r.min, k), std::min(r.max, k)};
  } else {
    int64_t strict = cond.as<LT>() ? 1 : 0;
    if (var_left) r.max = std::min(r.max, sat_add(k, -strict));
    else r.min = std::max(r.min, sat_add(k, strict));
  }
  out->push(facts_, std::move(fact));
}

Expr Simplifier::visit(const Variable* op) {
  auto it = facts_->find(op);
  if (it != facts_->end() && it->second.value.defined()) return it->second.value;
  return op;
}

namespace {
// cast(t, cast(u, x)) == x when u holds every value of t.
bool holds_all(DataType u, DataType t) {
  if (!(u.is_integer() && (t.is_integer() || t.is_bool()))) return false;
  if (t.is_bool()) return true;
  if (u.is_int() == t.is_int()) return u.bits() >= t.bits();
  return u.is_int() && u.bits() > t.bits();
}

std::optional<Expr> fold_cast(DataType t, const Expr& v) {
  bool float_ok = t.is_float() && !t.is_bfloat() && (t.bits() == 32 || t.bits() == 64);
  if (const IntImm* i = v.as<IntImm>()) {
    if (t.is_bool()) return IntImm::make(t, i->value != 0);
    if (t.is_integer()) return IntImm::make(t, i->value);
    bool u64 = v.dtype().is_uint() && v.dtype().bits() == 64;
    if (float_ok) return FloatImm::make(t, u64 ? static_cast<double>(static_cast<uint64_t>(i->value)) : static_cast<double>(i->value));
  } else if (const FloatImm* f = v.as<FloatImm>()) {
    if (float_ok) return FloatImm::make(t, f->value);
    if (t.is_bool()) return IntImm::make(t, f->value != 0);
    // Out-of-range float to int conversion is undefined: leave it to run time.
    double x = std::trunc(f->value);
    double lo = t.is_uint() ? 0.0 : -std::ldexp(1.0, std::min(t.bits(), 64) - 1);
    double hi = std::ldexp(1.0, t.is_uint() ? std::min(t.bits(), 63) : std::min(t.bits(), 64) - 1);
    if (t.is_integer() && std::isfinite(x) && x >= lo && x < hi) return IntImm::make(t, static_cast<int64_t>(x));
  }
  return std::nullopt;
}
}  // namespace

Expr Simplifier::simplify_cast(DataType t, const Expr& v) {
  if (v.dtype() == t) return v;
  if (auto folded = fold_cast(t, v)) return *folded;
  if (const Broadcast* b = v.as<Broadcast>()) return Broadcast::make(simplify_cast(t.element_of(), b->value), b->lanes);
  if (const Cast* inner = v.as<Cast>(); inner && inner->value.dtype() == t && holds_all(inner->dtype, t)) return inner->value;
  return Cast::make(t, v);
}

Expr Simplifier::visit(const Cast* op) { return simplify_cast(op->dtype, mutate(op->value)); }

Expr Simplifier::visit(const Call* op) {
  if (op->op == Intrinsic::IfThenElse) {
    Expr t, f;
    Expr c = simplify_branches(op->args[0], op->args[1], op->args[2], &t, &f, false);
    if (const IntImm* ci = c.as<IntImm>()) return ci->value ? t : f;
    if (expr_equal(t, f)) return t;
    if (c.same_as(op->args[0]) && t.same_as(op->args[1]) && f.same_as(op->args[2])) return op;
    return Call::make(t.dtype(), Intrinsic::IfThenElse, {c, t, f});
  }
  Expr e = IRMutator::visit(op);
  const Call* call = e.as<Call>();
  if (!call) return e;
  const IntImm* c0 = call->args[0].as<IntImm>();
  if (call->op == Intrinsic::Likely && c0) return call->args[0];
  if (call->op == Intrinsic::Abs && c0 && call->dtype.is_int()) return IntImm::make(call->dtype, c0->value < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(c0->value)) : c0->value);
  return e;
}

Expr Simplifier::visit(const Ramp* op) {
  Expr base = mutate(op->base), stride = mutate(op->stride);
  if (is_zero(stride)) return Broadcast::make(base, op->lanes);
  if (base.same_as(op->base) && stride.same_as(op->stride)) return op;
  return Ramp::make(base, stride, op->lanes);
}

Expr Simplifier::visit(const Broadcast* op) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? Expr(op) : Broadcast::make(v, op->lanes);
}

Expr Simplifier::simplify_select(const Expr& c, const Expr& t, const Expr& f) {
  const IntImm* ci = c.as<IntImm>();
  if (const Broadcast* b = c.as<Broadcast>()) ci = b->value.as<IntImm>();
  if (ci) return ci->value ? t : f;
  if (expr_equal(t, f)) return t;
  if (const Not* n = c.as<Not>()) return simplify_select(n->a, f, t);
  if (t.dtype().is_bool() && t.dtype() == c.dtype()) {
    if (is_one(t) && is_zero(f)) return c;
    if (is_zero(t) && is_one(f)) return simplify_not(c);
  }
  return Select::make(c, t, f);
}

// Each value of a select only matters where the condition picks it, so it is
// simplified knowing that. But a Select evaluates both values everywhere (a
// vector select loads every lane): a load there must stay in bounds where
// the condition is false too, so its indices are simplified without what
// the condition told. Dropping the clamp of A[max(i - 2, 0)] under `2 <= i`
// made lanes 0 and 1 load A[-2] and A[-1], which LLVM may assume never
// happens (kiln.GatherGrad's scan got wrong rows).
Expr Simplifier::simplify_branches(const Expr& cond, const Expr& t, const Expr& f, Expr* t_out, Expr* f_out, bool eager) {
  Expr c = mutate(cond);
  auto branch = [&](bool truth, const Expr& value) {
    ScopedFacts facts;
    learn(c, truth, &facts);
    if (!eager) return mutate(value);
    eager_facts_.push_back(&facts);
    struct Pop {  // also when mutate throws: the stack must not keep the dead scope
      std::vector<const ScopedFacts*>* stack;
      ~Pop() { stack->pop_back(); }
    } pop{&eager_facts_};
    return mutate(value);
  };
  *t_out = branch(true, t);
  *f_out = branch(false, f);
  return c;
}

Expr Simplifier::visit(const Select* op) {
  Expr t, f;
  Expr c = simplify_branches(op->condition, op->true_value, op->false_value, &t, &f, true);
  return simplify_select(c, t, f);
}

Expr Simplifier::visit(const Let* op) {
  Expr value = mutate(op->value);
  // Constants and variables are free to duplicate: substitute them.
  if (value.as<IntImm>() || value.as<FloatImm>() || value.as<Variable>()) {
    ScopedFact fact(facts_, op->var, bound(value), value);
    return mutate(op->body);
  }
  ScopedFact fact(facts_, op->var, bound(value));
  Expr body = mutate(op->body);
  const Variable* v = op->var.get();
  if (!uses_var(body, [v](const Variable* x) { return x == v; })) return body;
  if (value.same_as(op->value) && body.same_as(op->body)) return op;
  return Let::make(op->var, value, body);
}

Expr Simplifier::visit(const Reduce* op) {
  ScopedFacts axes;
  for (const IterVar& iv : op->axis) {
    Expr min = mutate(iv.dom().min), extent = mutate(iv.dom().extent);
    axes.push(facts_, range_fact(iv.var(), min, extent));
  }
  Expr source = mutate(op->source), cond = mutate(op->condition);
  if (source.same_as(op->source) && cond.same_as(op->condition)) return op;
  return Reduce::make(op->reduce_kind, source, op->axis, cond);
}

Expr Simplifier::without_eager_facts(const std::function<Expr()>& body) {
  // Undo the eager facts, innermost first, so each variable ends with the
  // fact it had outside the outermost eager select; selects inside the
  // indices start a stack of their own.
  ScopedFacts undo;
  for (auto s = eager_facts_.rbegin(); s != eager_facts_.rend(); ++s)
    for (auto f = (*s)->items().rbegin(); f != (*s)->items().rend(); ++f) undo.push_old(facts_, **f);
  struct Restore {  // also when body throws
    std::vector<const ScopedFacts*>* stack;
    std::vector<const ScopedFacts*> outer;
    ~Restore() { stack->swap(outer); }
  } restore{&eager_facts_, {}};
  restore.outer.swap(eager_facts_);
  return body();
}

Expr Simplifier::visit(const BufferLoad* op) {
  if (eager_facts_.empty()) return IRMutator::visit(op);
  return without_eager_facts([&] { return IRMutator::visit(op); });
}

Expr Simplifier::visit(const TensorLoad* op) {
  if (eager_facts_.empty()) return IRMutator::visit(op);
  return without_eager_facts([&] { return IRMutator::visit(op); });
}

}  // namespace kiln::arith::detail
