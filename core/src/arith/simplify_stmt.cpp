// The statement simplifier: the expression simplifier plus the scoping and
// control-flow rules of statements (see simplify_stmt.h).

#include "kiln/arith/simplify_stmt.h"

#include "simplify_internal.h"

namespace kiln::arith {

namespace {
using detail::ScopedFact;
using detail::ScopedFacts;

bool substitutable(const Expr& v) { return v.as<IntImm>() || v.as<FloatImm>() || v.as<Variable>(); }

class StmtSimplifier : public detail::Simplifier {
 public:
  using Simplifier::Simplifier;
  using Simplifier::mutate;

 protected:
  using Simplifier::visit;

  Stmt visit(const For* op) override {
    Expr min = mutate(op->min), extent = mutate(op->extent);
    ConstIntBound e = int_bound(extent);
    if (e.max <= 0) return make_nop();
    // A thread-bound loop of extent 1 still says how the kernel launches: keep it.
    if (e.is_const() && e.min == 1 && op->kind != ForKind::ThreadBinding) {
      ScopedFact fact(facts_, op->loop_var, bound(min), min);
      return mutate(op->body);
    }
    ScopedFact fact(facts_, range_fact(op->loop_var, min, extent));
    Stmt body = mutate(op->body);
    if (is_nop(body)) return make_nop();
    if (min.same_as(op->min) && extent.same_as(op->extent) && body.same_as(op->body)) return op;
    return For::make(op->loop_var, min, extent, op->kind, body, op->thread_tag);
  }

  Stmt visit(const IfThenElse* op) override {
    Expr cond = mutate(op->condition);
    if (const IntImm* c = cond.as<IntImm>()) {
      if (c->value) return mutate(op->then_case);
      return op->else_case.defined() ? mutate(op->else_case) : make_nop();
    }
    Stmt then_case, else_case;
    {
      ScopedFacts learned;
      learn(cond, true, &learned);
      then_case = mutate(op->then_case);
    }
    {
      ScopedFacts learned;
      learn(cond, false, &learned);
      else_case = mutate(op->else_case);
    }
    if (else_case.defined() && is_nop(else_case)) else_case = Stmt();
    if (is_nop(then_case)) {
      if (!else_case.defined()) return make_nop();
      return IfThenElse::make(simplify_not(cond), else_case);
    }
    if (cond.same_as(op->condition) && then_case.same_as(op->then_case) && else_case.same_as(op->else_case)) return op;
    return IfThenElse::make(cond, then_case, else_case);
  }

  Stmt visit(const LetStmt* op) override {
    Expr value = mutate(op->value);
    if (substitutable(value)) {
      ScopedFact fact(facts_, op->var, bound(value), value);
      return mutate(op->body);
    }
    ScopedFact fact(facts_, op->var, bound(value));
    Stmt body = mutate(op->body);
    const Variable* v = op->var.get();
    if (!uses_var(body, [v](const Variable* x) { return x == v; })) return body;
    if (value.same_as(op->value) && body.same_as(op->body)) return op;
    return LetStmt::make(op->var, value, body);
  }

  Stmt visit(const AssertStmt* op) override {
    Expr cond = mutate(op->condition);
    if (is_one(cond)) return mutate(op->body);
    Stmt body = mutate(op->body);
    if (cond.same_as(op->condition) && body.same_as(op->body)) return op;
    return AssertStmt::make(cond, op->message, body);
  }

  Stmt visit(const Seq* op) override {
    std::vector<Stmt> seq;
    bool changed = false;
    for (const Stmt& s : op->seq) {
      Stmt r = mutate(s);
      changed |= !r.same_as(s);
      if (is_nop(r)) {
        changed = true;
        continue;
      }
      seq.push_back(r);
    }
    if (!changed) return op;
    return Seq::make(std::move(seq));
  }

  Stmt visit(const Allocate* op) override {
    Stmt body = mutate(op->body);
    if (is_nop(body)) return make_nop();
    return body.same_as(op->body) ? Stmt(op) : Allocate::make(op->buffer, body);
  }

  Stmt visit(const AttrStmt* op) override {
    Expr value = mutate(op->value);
    Stmt body = mutate(op->body);
    if (is_nop(body)) return make_nop();
    if (value.same_as(op->value) && body.same_as(op->body)) return op;
    return AttrStmt::make(op->key, value, body);
  }
};
}  // namespace

Stmt Analyzer::simplify(const Stmt& s) {
  if (!s.defined()) return s;
  return StmtSimplifier(&impl_->facts).mutate(s);
}

Stmt simplify(const Stmt& s) {
  Analyzer analyzer;
  return analyzer.simplify(s);
}

}  // namespace kiln::arith
