// loop_partition: splits constant loops so that likely() guards vanish from
// the main part.
//
// For a loop v in [m, m + e) and a guard `if (likely(c))` somewhere in its
// body, the range of v over which c provably holds is searched conjunct by
// conjunct (each one is expected to hold on a prefix or a suffix of the
// range), the intersection is verified with the whole condition, and the
// loop becomes up to three loops: before, main (guard replaced by its then
// branch) and after (guard kept, or replaced by its else branch when the
// condition is provably false there). Pieces are partitioned again for the
// other guards; inner loops are partitioned with the outer range known.
// Conjuncts that do not vary with the loop (a 2-D tile's guard on the other
// axis, `i < M && j < N`) stay behind as a smaller guard in the main piece,
// for the loop of their own axis to settle.
//
// Loops over a symbolic extent, and guards on a shape variable (dynamic
// shapes: io*6 + ii < n), are split at a symbolic point instead, read off the
// guard's linear form (io < floordiv(n, 6)); the main piece is simplified
// knowing it, so its clamped extents become constants. See partition_symbolic.
#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/structural.h"
#include "kiln/pass/passes.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

namespace kiln::pass {

namespace {

// A variable in scope: a loop variable over a range, or a let-bound one.
struct Fact {
  Var var;
  Range range;  // for loops
  Expr value;   // for lets
};

static void bind_fact(arith::Analyzer* an, const Fact& f) {
  if (f.value.defined()) an->bind(f.var, f.value);
  else an->bind(f.var, f.range);
}

static const Call* as_likely(const Expr& cond) {
  const Call* c = cond.as<Call>();
  return c && c->op == Intrinsic::Likely ? c : nullptr;
}

static void split_conjuncts(const Expr& e, std::vector<Expr>* out) {
  if (const And* a = e.as<And>()) {
    split_conjuncts(a->a, out);
    split_conjuncts(a->b, out);
  } else {
    out->push_back(e);
  }
}

// !c in the form an interval analysis handles best: an integer comparison
// flips (for floats NaN forbids it), anything else gets a Not.
static Expr negate(const Expr& c) {
  if (const Not* n = c.as<Not>()) return n->a;
  auto flip = [&](const auto* x, auto make) -> Expr { return x->a.dtype().is_float() ? Not::make(c) : make(x->a, x->b); };
  if (const LT* x = c.as<LT>()) return flip(x, GE::make);
  if (const LE* x = c.as<LE>()) return flip(x, GT::make);
  if (const GT* x = c.as<GT>()) return flip(x, LE::make);
  if (const GE* x = c.as<GE>()) return flip(x, LT::make);
  if (const EQ* x = c.as<EQ>()) return flip(x, NE::make);
  if (const NE* x = c.as<NE>()) return flip(x, EQ::make);
  return Not::make(c);
}

// One occurrence of a guard, with the loops and lets that lie between the
// loop being partitioned and it.
struct GuardSite {
  const IfThenElse* guard;
  std::vector<Fact> inner;
};

class GuardCollector : public IRVisitor {
 public:
  std::vector<GuardSite> sites;

 protected:
  using IRVisitor::visit;
  void visit(const For* op) override {
    inner_.push_back({op->loop_var, Range(op->min, op->extent), Expr()});
    visit_stmt(op->body);
    inner_.pop_back();
  }
  void visit(const LetStmt* op) override {
    inner_.push_back({op->var, Range(), op->value});
    visit_stmt(op->body);
    inner_.pop_back();
  }
  void visit(const IfThenElse* op) override {
    if (as_likely(op->condition)) sites.push_back({op, inner_});
    IRVisitor::visit(op);
  }

 private:
  std::vector<Fact> inner_;
};

// Replaces every occurrence of one IfThenElse node by a statement.
class GuardReplacer : public IRMutator {
 public:
  GuardReplacer(const IfThenElse* guard, Stmt with) : guard_(guard), with_(std::move(with)) {}

 protected:
  using IRMutator::visit;
  Stmt visit(const IfThenElse* op) override { return op == guard_ ? with_ : IRMutator::visit(op); }

 private:
  const IfThenElse* guard_;
  Stmt with_;
};

// Replaces a variable in loop bounds and guard conditions only: the control
// structure a tail's copy specialises. Indices keep it (n*n*h stays, rather
// than (io*8 + 3)*(io*8 + 3)*h, which LLVM took seconds to compile).
class ControlSubstituter : public IRMutator {
 public:
  ControlSubstituter(const Variable* var, Expr value) : var_(var), value_(std::move(value)) {}

 protected:
  using IRMutator::visit;
  Stmt visit(const For* op) override {
    Stmt body = mutate(op->body);
    return For::make(op->loop_var, sub(op->min), sub(op->extent), op->kind, body, op->thread_tag);
  }
  Stmt visit(const IfThenElse* op) override {
    Stmt then_case = mutate(op->then_case);
    Stmt else_case = op->else_case.defined() ? mutate(op->else_case) : Stmt();
    return IfThenElse::make(sub(op->condition), then_case, else_case);
  }

 private:
  Expr sub(const Expr& e) const {
    return substitute(e, [&](const Variable* u) { return u == var_ ? value_ : Expr(); });
  }
  const Variable* var_;
  Expr value_;
};

// Replaces a product of shape variables (structurally) by a variable in
// loop bounds and guard conditions: rows fused over [seq, batch] are bounded
// by seq*batch, which the tail's copies then specialise as one extent.
class ProductNamer : public IRMutator {
 public:
  ProductNamer(Expr product, Var name) : product_(std::move(product)), name_(std::move(name)) {}
  using IRMutator::mutate;
  Expr mutate(const Expr& e) override { return structural_equal(e, product_) ? Expr(name_) : IRMutator::mutate(e); }

 private:
  Expr product_;
  Var name_;
};

// The variables a statement binds (its loops' and lets').
static std::unordered_set<const Variable*> bound_inside(const Stmt& s) {
  std::unordered_set<const Variable*> out;
  post_order_visit(s, [](const Expr&) {}, [&](const Stmt& st) {
    if (const For* f = st.as<For>()) out.insert(f->loop_var.get());
    if (const LetStmt* l = st.as<LetStmt>()) out.insert(l->var.get());
  });
  return out;
}

// Replaces expression nodes (by identity) by others.
class NodeReplacer : public IRMutator {
 public:
  explicit NodeReplacer(std::unordered_map<const Object*, Expr> with) : with_(std::move(with)) {}
  using IRMutator::mutate;
  Expr mutate(const Expr& e) override {
    auto it = with_.find(e.get());
    return it != with_.end() ? it->second : IRMutator::mutate(e);
  }

 private:
  std::unordered_map<const Object*, Expr> with_;
};

class Partitioner : public IRMutator {
 protected:
  using IRMutator::visit;

  Stmt visit(const For* op) override {
    const int64_t* min = as_const_int(op->min);
    const int64_t* extent = as_const_int(op->extent);
    // Thread-bound loops are not loops the kernel can split.
    // A guard on a shape variable (not only on loops) is split where it ends
    // symbolically: the search over constant ranges would cut such a loop at
    // points that hold for no size in particular.
    if (op->kind != ForKind::ThreadBinding && op->loop_var.dtype().is_int() && guards_on_parameters(op)) {
      Stmt pieces = partition_symbolic(op);
      if (pieces.defined()) return mutate(pieces);
    }
    if (min && extent && *extent > 0 && op->kind != ForKind::ThreadBinding) {
      Stmt pieces = partition(op, *min, *extent);
      // Each piece is a For again: partition it for the remaining guards.
      if (pieces.defined()) return mutate(pieces);
    }
    if (op->kind != ForKind::ThreadBinding && op->loop_var.dtype().is_int() && !(min && extent)) {
      Stmt pieces = partition_symbolic(op);
      if (pieces.defined()) return mutate(pieces);
      pieces = partition_clamps(op);
      if (pieces.defined()) {
        ++clamp_depth_;
        Stmt out = mutate(pieces);
        --clamp_depth_;
        return out;
      }
    }
    outer_.push_back({op->loop_var, Range(op->min, op->extent), Expr()});
    Stmt body = mutate(op->body);
    outer_.pop_back();
    if (body.same_as(op->body)) return op;
    return For::make(op->loop_var, op->min, op->extent, op->kind, body, op->thread_tag);
  }

  Stmt visit(const LetStmt* op) override {
    outer_.push_back({op->var, Range(), op->value});
    Stmt body = mutate(op->body);
    outer_.pop_back();
    return body.same_as(op->body) ? Stmt(op) : LetStmt::make(op->var, op->value, body);
  }

 private:
  // Whether cond holds for every v in [lo, hi) at a guard site.
  bool provable(const For* loop, const GuardSite& site, const Expr& cond, int64_t lo, int64_t hi) {
    arith::Analyzer an;
    for (const Fact& f : outer_) bind_fact(&an, f);
    DataType t = loop->loop_var.dtype();
    an.bind(loop->loop_var, Range(IntImm::make(t, lo), IntImm::make(t, hi - lo)));
    for (const Fact& f : site.inner) bind_fact(&an, f);
    return an.can_prove(cond);
  }

  bool provable_at_all(const For* loop, const std::vector<GuardSite>& sites, const Expr& cond, int64_t lo, int64_t hi) {
    for (const GuardSite& s : sites) {
      if (!provable(loop, s, cond, lo, hi)) return false;
    }
    return true;
  }

  // A conjunction is false where one of its conjuncts provably is.
  bool provably_false(const For* loop, const std::vector<GuardSite>& sites, const Expr& cond, int64_t lo, int64_t hi) {
    std::vector<Expr> conjuncts;
    split_conjuncts(cond, &conjuncts);
    for (const Expr& c : conjuncts) {
      if (provable_at_all(loop, sites, negate(c), lo, hi)) return true;
    }
    return false;
  }

  // The largest k in [1, e] with pred(k), given pred(1); pred is expected to
  // be monotone (a smaller range is easier to prove), and the caller
  // verifies the answer anyway.
  template <typename Pred>
  static int64_t largest(int64_t e, Pred pred) {
    int64_t lo = 1, hi = e;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo + 1) / 2;
      if (pred(mid)) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  // The sub-range [lo, hi) of [m, m + e) on which the guard's condition
  // holds, found per conjunct; empty (lo >= hi) when none is found.
  std::pair<int64_t, int64_t> true_range(const For* loop, const GuardSite& site, const Expr& cond, int64_t m, int64_t e) {
    std::vector<Expr> conjuncts;
    split_conjuncts(cond, &conjuncts);
    int64_t lo = m, hi = m + e;
    for (const Expr& c : conjuncts) {
      if (provable(loop, site, c, m, m + 1)) {
        int64_t k = largest(e, [&](int64_t k) { return provable(loop, site, c, m, m + k); });
        hi = std::min(hi, m + k);
      } else if (provable(loop, site, c, m + e - 1, m + e)) {
        int64_t k = largest(e, [&](int64_t k) { return provable(loop, site, c, m + e - k, m + e); });
        lo = std::max(lo, m + e - k);
      } else {
        return {m, m};
      }
      if (lo >= hi) return {m, m};
    }
    return {lo, hi};
  }

  // A piece [lo, hi) of the loop where the guard is not known to hold: the
  // guard stays, unless its condition is provably false throughout.
  Stmt side_piece(const For* loop, const IfThenElse* guard, const std::vector<GuardSite>& sites, const Expr& cond, int64_t lo, int64_t hi) {
    if (lo >= hi) return Stmt();
    Stmt body = loop->body;
    if (provably_false(loop, sites, cond, lo, hi)) {
      body = GuardReplacer(guard, guard->else_case.defined() ? guard->else_case : make_nop()).mutate(body);
      if (is_nop(body)) return Stmt();
    }
    return make_piece(loop, lo, hi, body);
  }

  static Stmt make_piece(const For* loop, int64_t lo, int64_t hi, const Stmt& body) {
    DataType t = loop->min.dtype();
    return For::make(loop->loop_var, IntImm::make(t, lo), IntImm::make(t, hi - lo), loop->kind, body, loop->thread_tag);
  }

  // A guard's condition as {the conjuncts this loop may settle, the others}:
  // the others neither use the loop's variable nor hold over all of it
  // (true there, `a && b` is b). Each undefined when empty.
  std::pair<Expr, Expr> split_by_loop(const For* loop, const GuardSite& site, const Expr& cond, int64_t m, int64_t e) {
    std::vector<Expr> conjuncts;
    split_conjuncts(cond, &conjuncts);
    Expr varying, rest;
    for (const Expr& c : conjuncts) {
      bool uses = uses_var(c, [&](const Variable* v) { return v == loop->loop_var.get(); });
      Expr& into = uses || provable(loop, site, c, m, m + e) ? varying : rest;
      into = into.defined() ? (into && c) : c;
    }
    return {varying, rest};
  }

  // Splits the loop on the first guard that allows it; undefined if none.
  Stmt partition(const For* loop, int64_t m, int64_t e) {
    GuardCollector collector;
    collector.visit_stmt(loop->body);
    std::unordered_set<const IfThenElse*> tried;
    for (const GuardSite& first : collector.sites) {
      const IfThenElse* guard = first.guard;
      if (!tried.insert(guard).second) continue;
      // The same node may sit at several places; the proof must hold at each.
      std::vector<GuardSite> sites;
      for (const GuardSite& s : collector.sites) {
        if (s.guard == guard) sites.push_back(s);
      }
      Expr whole = as_likely(guard->condition)->args[0];
      auto [cond, rest] = split_by_loop(loop, first, whole, m, e);
      if (!cond.defined()) continue;
      auto [lo, hi] = true_range(loop, first, cond, m, e);
      if (lo >= hi || !provable_at_all(loop, sites, cond, lo, hi)) continue;
      Stmt kept = rest.defined() ? IfThenElse::make(likely(rest), guard->then_case, guard->else_case) : guard->then_case;
      Stmt main = make_piece(loop, lo, hi, GuardReplacer(guard, kept).mutate(loop->body));
      // The side pieces copy the body: their Allocates get buffers of their
      // own (see fresh_allocations).
      Stmt before = side_piece(loop, guard, sites, whole, m, lo);
      Stmt after = side_piece(loop, guard, sites, whole, hi, m + e);
      if (before.defined()) before = fresh_allocations(before);
      if (after.defined()) after = fresh_allocations(after);
      return Seq::make({before, main, after});
    }
    return Stmt();
  }

  // ---- symbolic split points (loops over a shape variable's tiles)

  // Whether a guard in the loop that uses its variable also reads a variable
  // no loop or let binds (a shape variable, a scalar parameter).
  bool guards_on_parameters(const For* loop) {
    GuardCollector collector;
    collector.visit_stmt(loop->body);
    for (const GuardSite& site : collector.sites) {
      const Expr& cond = as_likely(site.guard->condition)->args[0];
      bool uses_loop = uses_var(cond, [&](const Variable* v) { return v == loop->loop_var.get(); });
      bool free = uses_var(cond, [&](const Variable* v) {
        if (v == loop->loop_var.get()) return false;
        for (const Fact& f : outer_) if (f.var.get() == v) return false;
        for (const Fact& f : site.inner) if (f.var.get() == v) return false;
        return true;
      });
      if (uses_loop && free) return true;
    }
    return false;
  }

  // The guard's conjunct c as `d < 0` with d = a*v + rest, a a positive
  // constant (c holds on a prefix of v); false otherwise.
  static bool prefix_form(const Expr& c, const Variable* v, int64_t* a, Expr* rest) {
    Expr d;
    if (const LT* x = c.as<LT>()) d = x->a - x->b;
    else if (const LE* x = c.as<LE>()) d = x->a - x->b - 1;
    else if (const GT* x = c.as<GT>()) d = x->b - x->a;
    else if (const GE* x = c.as<GE>()) d = x->b - x->a - 1;
    else return false;
    if (!d.dtype().is_int() || !d.dtype().is_scalar()) return false;
    auto at = [&](int64_t k) { return arith::simplify(substitute(d, [&](const Variable* u) { return u == v ? IntImm::make(d.dtype(), k) : Expr(); })); };
    Expr d0 = at(0), d1 = at(1), d2 = at(2);
    Expr step1 = arith::simplify(d1 - d0), step2 = arith::simplify(d2 - d1);
    const int64_t* k1 = as_const_int(step1);
    const int64_t* k2 = as_const_int(step2);
    if (!k1 || !k2 || *k1 != *k2 || *k1 <= 0) return false;
    *a = *k1;
    *rest = d0;
    return true;
  }

  // The end of the prefix of the loop on which every conjunct of cond that
  // uses v holds at the site: floordiv(-max(rest) - 1, a) + 1, the least
  // over the conjuncts; undefined when a conjunct is of no such form.
  Expr prefix_end(const For* loop, const GuardSite& site, const Expr& cond) {
    std::vector<Expr> conjuncts;
    split_conjuncts(cond, &conjuncts);
    arith::Analyzer an;
    for (const Fact& f : outer_) bind_fact(&an, f);
    std::unordered_map<const Variable*, arith::IntervalSet> dom;
    for (const Fact& f : site.inner) {
      if (f.value.defined()) return Expr();  // a let between: keep it simple
      dom[f.var.get()] = arith::IntervalSet::from_range(f.range);
    }
    Expr end;
    for (const Expr& c : conjuncts) {
      if (!uses_var(c, [&](const Variable* u) { return u == loop->loop_var.get(); })) continue;
      int64_t a = 0;
      Expr rest;
      // In the form the prover will see (min(x, n - 1) + 1 may read min(x + 1, n)), so that its terms cancel.
      if (!prefix_form(an.simplify(c), loop->loop_var.get(), &a, &rest)) return Expr();
      arith::IntervalSet r = an.eval_interval(rest, dom);
      if (!r.max.defined()) return Expr();
      DataType t = rest.dtype();
      Expr e = an.simplify(floordiv(IntImm::make(t, -1) - r.max, IntImm::make(t, a)) + IntImm::make(t, 1));
      end = end.defined() ? min(end, e) : e;
    }
    return end;
  }

  // Whether cond holds at every site for v in [lo, hi) (symbolic ends).
  bool provable_symbolic(const For* loop, const std::vector<GuardSite>& sites, const Expr& cond, const Expr& lo, const Expr& hi) {
    for (const GuardSite& site : sites) {
      arith::Analyzer an;
      for (const Fact& f : outer_) bind_fact(&an, f);
      an.bind(loop->loop_var, Range(lo, an.simplify(hi - lo)));
      for (const Fact& f : site.inner) bind_fact(&an, f);
      if (!an.can_prove(cond)) return false;
    }
    return true;
  }

  // The last tile of a small tile (rows of a register tile, a*v + g < n
  // with a <= kMaxTailVersions): one copy of the body per remainder r of n
  // (n - v*a == r, n replaced by v*a + r there), so each copy's rows are
  // constants again: unrolled, guard-free, their accumulators in registers.
  // A dense of one row ran 3x slower with the rows a loop of symbolic extent.
  // Any other case keeps the body as it was (the last branch).
  static constexpr int64_t kMaxTailVersions = 8;
  Stmt tail_versions(const For* loop, const GuardSite& site, const Expr& cond, const Stmt& body) {
    int64_t a = 0;
    Expr rest;
    if (!prefix_form(cond, loop->loop_var.get(), &a, &rest) || a < 2 || a > kMaxTailVersions) return body;
    // A product of two shape variables (rows fused over [seq, batch]) counts as one, named.
    auto bound_here = [&](const Variable* v) {
      for (const Fact& f : outer_) if (f.var.get() == v) return true;
      for (const Fact& f : site.inner) if (f.var.get() == v) return true;
      return false;
    };
    Expr product;
    post_order_visit(rest, [&](const Expr& e) {
      const Mul* m = e.as<Mul>();
      const Variable* x = m ? m->a.as<Variable>() : nullptr;
      const Variable* y = m ? m->b.as<Variable>() : nullptr;
      if (!product.defined() && x && y && !bound_here(x) && !bound_here(y)) product = e;
    });
    Stmt named = body;
    if (product.defined()) {
      Var rows("rows", product.dtype());
      ProductNamer namer(product, rows);
      rest = namer.mutate(rest);
      named = namer.mutate(body);
    }
    // The one free variable of rest (a shape variable), with coefficient -1.
    const Variable* free = nullptr;
    int count = 0;
    post_order_visit(rest, [&](const Expr& e) {
      const Variable* v = e.as<Variable>();
      if (!v || v == free) return;
      for (const Fact& f : outer_) if (f.var.get() == v) return;
      for (const Fact& f : site.inner) if (f.var.get() == v) return;
      free = v;
      ++count;
    });
    if (count != 1) return body;
    DataType t = rest.dtype();
    if (free->dtype != t) return body;
    // Only where n bounds this axis alone: with guards of other axes on n
    // (q.kT's columns) the copies would multiply those axes' tails too (4 s
    // to compile instead of 0.2).
    GuardCollector others;
    others.visit_stmt(named);
    for (const GuardSite& g : others.sites) {
      std::vector<Expr> conjuncts;
      split_conjuncts(as_likely(g.guard->condition)->args[0], &conjuncts);
      for (const Expr& c : conjuncts)
        if (uses_var(c, [&](const Variable* u) { return u == free; }) && !uses_var(c, [&](const Variable* u) { return u == loop->loop_var.get(); })) return body;
    }
    Expr p = product.defined() ? product : Expr(Var(free));
    auto at = [&](int64_t k) { return arith::simplify(substitute(rest, [&](const Variable* u) { return u == free ? IntImm::make(t, k) : Expr(); })); };
    Expr step = arith::simplify(at(1) - at(0));
    if (!is_const_int(step, -1)) return body;
    Expr v = loop->loop_var;
    Stmt out = body;
    for (int64_t r = a - 1; r >= 1; --r) {
      Expr value = arith::simplify(v * IntImm::make(t, a) + IntImm::make(t, r));
      Stmt version = fresh_allocations(ControlSubstituter(free, value).mutate(named));
      out = IfThenElse::make(EQ::make(p - v * IntImm::make(t, a), IntImm::make(t, r)), version, out);
    }
    return out;
  }

  // A loop over the tiles of a symbolic extent (or one whose guard has a
  // symbolic bound, the rows of the last tile): split at the end of the
  // prefix where a guard provably holds, found from the guard's linear form
  // rather than by search. The main piece loses the guard and is simplified
  // knowing v < end (its clamped extents become constants again, so it
  // unrolls and vectorizes); the rest keeps the guard, and is not split on
  // this guard again.
  Stmt partition_symbolic(const For* loop) {
    GuardCollector collector;
    collector.visit_stmt(loop->body);
    for (const GuardSite& first : collector.sites) {
      const IfThenElse* guard = first.guard;
      if (!symbolic_done_.insert({loop->loop_var.get(), guard->condition.get()}).second) continue;
      std::vector<GuardSite> sites;
      for (const GuardSite& s : collector.sites)
        if (s.guard == guard) sites.push_back(s);
      Expr whole = as_likely(guard->condition)->args[0];
      std::vector<Expr> conjuncts;
      split_conjuncts(whole, &conjuncts);
      Expr cond, rest;
      for (const Expr& c : conjuncts) {
        bool uses = uses_var(c, [&](const Variable* u) { return u == loop->loop_var.get(); });
        Expr& into = uses ? cond : rest;
        into = into.defined() ? (into && c) : c;
      }
      if (!cond.defined()) continue;
      Expr end;
      for (const GuardSite& s : sites) {
        Expr e = prefix_end(loop, s, cond);
        if (!e.defined()) {
          end = Expr();
          break;
        }
        end = end.defined() ? min(end, e) : e;
      }
      if (!end.defined() || !provable_symbolic(loop, sites, cond, loop->min, end)) continue;
      arith::Analyzer an;
      for (const Fact& f : outer_) bind_fact(&an, f);
      Expr stop = loop->min + loop->extent;
      Expr split = an.simplify(max(loop->min, min(end, stop)));
      Stmt kept = rest.defined() ? IfThenElse::make(likely(rest), guard->then_case, guard->else_case) : guard->then_case;
      // The main piece, simplified with v in [min, end): a superset of its range, so every fact holds.
      an.bind(loop->loop_var, Range(loop->min, an.simplify(end - loop->min)));
      Stmt main_body = an.simplify(GuardReplacer(guard, kept).mutate(loop->body));
      Stmt main = For::make(loop->loop_var, loop->min, an.simplify(split - loop->min), loop->kind, main_body, loop->thread_tag);
      // The rest, [split, stop), lies in [end, stop): where the guard is provably false there, its else branch.
      Stmt rest_body = loop->body;
      bool never = true;
      for (const GuardSite& s : sites) {
        arith::Analyzer neg;
        for (const Fact& f : outer_) bind_fact(&neg, f);
        neg.bind(loop->loop_var, Range(end, arith::simplify(stop - end)));
        for (const Fact& f : s.inner) bind_fact(&neg, f);
        std::vector<Expr> cs;
        split_conjuncts(cond, &cs);
        bool one = false;
        for (const Expr& c : cs) one = one || neg.can_prove(negate(c));
        never = never && one;
      }
      if (never) rest_body = GuardReplacer(guard, guard->else_case.defined() ? guard->else_case : make_nop()).mutate(rest_body);
      if (is_nop(rest_body)) return main;
      rest_body = tail_versions(loop, first, cond, rest_body);
      Stmt after = For::make(loop->loop_var, split, arith::simplify(stop - split), loop->kind, rest_body, loop->thread_tag);
      return Seq::make({main, fresh_allocations(after)});
    }
    return Stmt();
  }

  // ---- clamped tiles (the last tile of a symbolic extent, bounded by min/max)

  // Where min(x, y) or max(x, y) in the body of loop v picks the same side on a
  // prefix of v: x - y = a*v + r with a a nonzero constant and r free of the
  // loops inside. Returns the prefix's end and sets *pick to that side.
  Expr clamp_prefix(const For* loop, const Expr& x, const Expr& y, bool is_min, const std::unordered_set<const Variable*>& inner, Expr* pick) {
    Expr d = arith::simplify(x - y);
    const Variable* v = loop->loop_var.get();
    if (!d.dtype().is_int() || !d.dtype().is_scalar() || !uses_var(d, [&](const Variable* u) { return u == v; })) return Expr();
    if (uses_var(d, [&](const Variable* u) { return inner.count(u) > 0; })) return Expr();
    DataType t = d.dtype();
    auto at = [&](int64_t k) { return arith::simplify(substitute(d, [&](const Variable* u) { return u == v ? IntImm::make(t, k) : Expr(); })); };
    Expr r = at(0);
    Expr step = arith::simplify(at(1) - r);
    const int64_t* a = as_const_int(step);
    if (!a || *a == 0) return Expr();
    // Linear for every v, not only at the points tried.
    if (!is_zero(arith::simplify(d - (Expr(loop->loop_var) * IntImm::make(t, *a) + r)))) return Expr();
    // a > 0: x <= y while a*v + r <= 0, v <= floordiv(-r, a); a < 0: y <= x while v <= floordiv(r, -a).
    Expr last = *a > 0 ? floordiv(IntImm::make(t, 0) - r, IntImm::make(t, *a)) : floordiv(r, IntImm::make(t, -*a));
    *pick = (*a > 0) == is_min ? x : y;
    return arith::simplify(last + IntImm::make(t, 1));
  }

  // Whether d (an integer expression) is exactly a*v + d(0) for the loop's v.
  static bool exactly_linear(const For* loop, const Expr& d, int64_t a) {
    const Variable* v = loop->loop_var.get();
    DataType t = d.dtype();
    Expr d0 = arith::simplify(substitute(d, [&](const Variable* u) { return u == v ? IntImm::make(t, 0) : Expr(); }));
    return is_zero(arith::simplify(d - (Expr(loop->loop_var) * IntImm::make(t, a) + d0)));
  }

  // The loop's body with each guard whose conjuncts on v are linear (the
  // split of a symbolic extent: v*8 + i < n) replaced by its then branch (and
  // the conjuncts not on v), for v below the end it adds to *end: where every
  // such conjunct holds, derived from its form (prefix_end), not proved.
  Stmt linear_guards_dropped(const For* loop, const std::unordered_set<const Variable*>& inner, Expr* end) {
    GuardCollector collector;
    collector.visit_stmt(loop->body);
    std::unordered_map<const IfThenElse*, Expr> ends;
    std::unordered_set<const IfThenElse*> failed;
    auto bad = [&](const Expr& e) { return uses_var(e, [&](const Variable* u) { return u == loop->loop_var.get() || inner.count(u) > 0; }); };
    for (const GuardSite& site : collector.sites) {
      const IfThenElse* g = site.guard;
      if (failed.count(g)) continue;
      std::vector<Expr> conjuncts;
      split_conjuncts(as_likely(g->condition)->args[0], &conjuncts);
      Expr cond;
      bool ok = true;
      for (const Expr& c : conjuncts) {
        if (!uses_var(c, [&](const Variable* u) { return u == loop->loop_var.get(); })) continue;
        int64_t a = 0;
        Expr rest;
        Expr sc = arith::simplify(c);
        ok = ok && prefix_form(sc, loop->loop_var.get(), &a, &rest);
        if (ok) {
          const Expr* lhs = nullptr;
          Expr d;
          if (const LT* x = sc.as<LT>()) d = x->a - x->b;
          else if (const LE* x = sc.as<LE>()) d = x->a - x->b;
          else if (const GT* x = sc.as<GT>()) d = x->b - x->a;
          else if (const GE* x = sc.as<GE>()) d = x->b - x->a;
          (void)lhs;
          ok = d.defined() && exactly_linear(loop, d, a);
        }
        cond = cond.defined() ? (cond && c) : c;
      }
      Expr e = ok && cond.defined() ? prefix_end(loop, site, cond) : Expr();
      if (!e.defined() || bad(e)) {
        failed.insert(g);
        ends.erase(g);
        continue;
      }
      ends[g] = ends.count(g) ? min(ends[g], e) : e;
    }
    if (ends.empty()) return loop->body;
    Stmt body = loop->body;
    for (const auto& [g, e] : ends) {
      std::vector<Expr> conjuncts;
      split_conjuncts(as_likely(g->condition)->args[0], &conjuncts);
      Expr rest;
      for (const Expr& c : conjuncts)
        if (!uses_var(c, [&](const Variable* u) { return u == loop->loop_var.get(); })) rest = rest.defined() ? (rest && c) : c;
      Stmt kept = rest.defined() ? IfThenElse::make(likely(rest), g->then_case, g->else_case) : g->then_case;
      body = GuardReplacer(g, kept).mutate(body);
      *end = end->defined() ? min(*end, e) : e;
    }
    return body;
  }

  // A loop over the tiles of a symbolic extent whose last tile is clamped
  // (bound inference sizes a stage computed at the tile by min(v*8 + 7, n - 1),
  // the copy out runs min(n - v*8, 8) rows): split where every such clamp
  // still picks the full tile's side, so the main piece's tiles have constant
  // extents again (unrolled, vectorized, their accumulators in registers) and
  // only the rest keeps the clamps. Each round of substitution may expose an
  // enclosing clamp; the main piece's end is the least of all.
  Stmt partition_clamps(const For* loop) {
    // One split per nest: each copies the loop's body, and splitting the
    // loops inside both pieces again (a conv over symbolic h and w) multiplied
    // the code LLVM compiles (a ResNet stage over h, w: 85 s against 34).
    if (clamp_depth_ > 0) return Stmt();
    if (!clamp_done_.insert(loop->loop_var.get()).second) return Stmt();
    std::unordered_set<const Variable*> inner = bound_inside(loop->body);
    Expr end;
    Stmt body = linear_guards_dropped(loop, inner, &end);
    for (int round = 0; round < 4; ++round) {
      std::unordered_map<const Object*, Expr> with;
      post_order_visit(body, [&](const Expr& e) {
        Expr pick, stop;
        if (const Min* m = e.as<Min>()) stop = clamp_prefix(loop, m->a, m->b, true, inner, &pick);
        else if (const Max* m = e.as<Max>()) stop = clamp_prefix(loop, m->a, m->b, false, inner, &pick);
        if (!stop.defined() || with.count(e.get())) return;
        with[e.get()] = pick;
        end = end.defined() ? min(end, stop) : stop;
      });
      if (with.empty()) break;
      arith::Analyzer an;
      for (const Fact& f : outer_) bind_fact(&an, f);
      body = an.simplify(NodeReplacer(std::move(with)).mutate(body));
    }
    if (!end.defined()) return Stmt();
    arith::Analyzer an;
    for (const Fact& f : outer_) bind_fact(&an, f);
    Expr stop = loop->min + loop->extent;
    Expr split = an.simplify(max(loop->min, min(end, stop)));
    Stmt main = For::make(loop->loop_var, loop->min, an.simplify(split - loop->min), loop->kind, body, loop->thread_tag);
    Stmt after = For::make(loop->loop_var, split, an.simplify(stop - split), loop->kind, loop->body, loop->thread_tag);
    return Seq::make({main, fresh_allocations(after)});
  }

  std::vector<Fact> outer_;
  std::unordered_set<const Variable*> clamp_done_;
  int clamp_depth_ = 0;  // inside the pieces of a clamp split
  // (loop variable, guard condition) pairs split already: the rest keeps the guard (its
  // statements rebuilt by fresh_allocations, the condition the same node).
  std::set<std::pair<const Variable*, const Object*>> symbolic_done_;
};

}  // namespace

PrimFunc loop_partition(const PrimFunc& f) { return f.with_body(Partitioner().mutate(f.body())); }

}  // namespace kiln::pass
