#include "kiln/ir/functor.h"

#include "kiln/support/error.h"

namespace kiln {

// ---------------------------------------------------------------- visitor

void IRVisitor::visit_expr(const Expr& e) {
  if (!e.defined()) return;
  switch (e->kind) {
#define KILN_X(T) \
  case IRNodeKind::T: return visit(static_cast<const T*>(e.get()));
    KILN_FOR_EACH_EXPR_NODE(KILN_X)
#undef KILN_X
    default: KILN_UNREACHABLE() << "statement node in an expression";
  }
}

void IRVisitor::visit_stmt(const Stmt& s) {
  if (!s.defined()) return;
  switch (s->kind) {
#define KILN_X(T) \
  case IRNodeKind::T: return visit(static_cast<const T*>(s.get()));
    KILN_FOR_EACH_STMT_NODE(KILN_X)
#undef KILN_X
    default: KILN_UNREACHABLE() << "expression node in a statement";
  }
}

void IRVisitor::visit(const IntImm*) {}
void IRVisitor::visit(const FloatImm*) {}
void IRVisitor::visit(const StringImm*) {}
void IRVisitor::visit(const Variable*) {}
#define KILN_X(T)                        \
  void IRVisitor::visit(const T* op) { \
    visit_expr(op->a);                   \
    visit_expr(op->b);                   \
  }
KILN_X(Add) KILN_X(Sub) KILN_X(Mul) KILN_X(Div) KILN_X(Mod) KILN_X(FloorDiv) KILN_X(FloorMod) KILN_X(Min) KILN_X(Max)
KILN_X(EQ) KILN_X(NE) KILN_X(LT) KILN_X(LE) KILN_X(GT) KILN_X(GE) KILN_X(And) KILN_X(Or)
#undef KILN_X
void IRVisitor::visit(const Not* op) { visit_expr(op->a); }
void IRVisitor::visit(const Select* op) {
  visit_expr(op->condition);
  visit_expr(op->true_value);
  visit_expr(op->false_value);
}
void IRVisitor::visit(const Cast* op) { visit_expr(op->value); }
void IRVisitor::visit(const Call* op) {
  for (const Expr& a : op->args) visit_expr(a);
}
void IRVisitor::visit(const BufferLoad* op) {
  for (const Expr& i : op->indices) visit_expr(i);
  if (op->predicate.defined()) visit_expr(op->predicate);
}
void IRVisitor::visit(const TensorLoad* op) {
  for (const Expr& i : op->indices) visit_expr(i);
}
void IRVisitor::visit(const Ramp* op) {
  visit_expr(op->base);
  visit_expr(op->stride);
}
void IRVisitor::visit(const Broadcast* op) { visit_expr(op->value); }
void IRVisitor::visit(const Let* op) {
  visit_expr(op->value);
  visit_expr(op->body);
}
void IRVisitor::visit(const Reduce* op) {
  visit_expr(op->source);
  visit_expr(op->condition);
}

void IRVisitor::visit(const For* op) {
  visit_expr(op->min);
  visit_expr(op->extent);
  visit_stmt(op->body);
}
void IRVisitor::visit(const BufferStore* op) {
  visit_expr(op->value);
  for (const Expr& i : op->indices) visit_expr(i);
  if (op->predicate.defined()) visit_expr(op->predicate);
}
void IRVisitor::visit(const Allocate* op) {
  for (const Expr& e : op->buffer->shape) visit_expr(e);
  visit_stmt(op->body);
}
void IRVisitor::visit(const Seq* op) {
  for (const Stmt& s : op->seq) visit_stmt(s);
}
void IRVisitor::visit(const IfThenElse* op) {
  visit_expr(op->condition);
  visit_stmt(op->then_case);
  visit_stmt(op->else_case);
}
void IRVisitor::visit(const LetStmt* op) {
  visit_expr(op->value);
  visit_stmt(op->body);
}
void IRVisitor::visit(const Evaluate* op) { visit_expr(op->value); }
void IRVisitor::visit(const AttrStmt* op) {
  visit_expr(op->value);
  visit_stmt(op->body);
}
void IRVisitor::visit(const AssertStmt* op) {
  visit_expr(op->condition);
  visit_stmt(op->body);
}

// ---------------------------------------------------------------- mutator

Expr IRMutator::mutate(const Expr& e) {
  if (!e.defined()) return e;
  switch (e->kind) {
#define KILN_X(T) \
  case IRNodeKind::T: return visit(static_cast<const T*>(e.get()));
    KILN_FOR_EACH_EXPR_NODE(KILN_X)
#undef KILN_X
    default: KILN_UNREACHABLE() << "statement node in an expression";
  }
  return Expr();
}

Stmt IRMutator::mutate(const Stmt& s) {
  if (!s.defined()) return s;
  switch (s->kind) {
#define KILN_X(T) \
  case IRNodeKind::T: return visit(static_cast<const T*>(s.get()));
    KILN_FOR_EACH_STMT_NODE(KILN_X)
#undef KILN_X
    default: KILN_UNREACHABLE() << "expression node in a statement";
  }
  return Stmt();
}

bool IRMutator::mutate_exprs(const std::vector<Expr>& in, std::vector<Expr>* out) {
  bool changed = false;
  out->clear();
  out->reserve(in.size());
  for (const Expr& e : in) {
    out->push_back(mutate(e));
    changed |= !out->back().same_as(e);
  }
  return changed;
}

Expr IRMutator::visit(const IntImm* op) { return op; }
Expr IRMutator::visit(const FloatImm* op) { return op; }
Expr IRMutator::visit(const StringImm* op) { return op; }
Expr IRMutator::visit(const Variable* op) { return op; }
#define KILN_X(T)                               \
  Expr IRMutator::visit(const T* op) {          \
    Expr a = mutate(op->a), b = mutate(op->b);  \
    if (a.same_as(op->a) && b.same_as(op->b)) { \
      return op;                                \
    }                                           \
    return T::make(std::move(a), std::move(b)); \
  }
KILN_X(Add) KILN_X(Sub) KILN_X(Mul) KILN_X(Div) KILN_X(Mod) KILN_X(FloorDiv) KILN_X(FloorMod) KILN_X(Min) KILN_X(Max)
KILN_X(EQ) KILN_X(NE) KILN_X(LT) KILN_X(LE) KILN_X(GT) KILN_X(GE) KILN_X(And) KILN_X(Or)
#undef KILN_X
Expr IRMutator::visit(const Not* op) {
  Expr a = mutate(op->a);
  return a.same_as(op->a) ? Expr(op) : Not::make(a);
}
Expr IRMutator::visit(const Select* op) {
  Expr c = mutate(op->condition), t = mutate(op->true_value), f = mutate(op->false_value);
  if (c.same_as(op->condition) && t.same_as(op->true_value) && f.same_as(op->false_value)) return op;
  return Select::make(c, t, f);
}
Expr IRMutator::visit(const Cast* op) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? Expr(op) : Cast::make(op->dtype.with_lanes(v.dtype().lanes()), v);
}
Expr IRMutator::visit(const Call* op) {
  std::vector<Expr> args;
  if (!mutate_exprs(op->args, &args)) return op;
  int lanes = 1;
  for (size_t i = op->op == Intrinsic::IfThenElse ? 1 : 0; i < args.size(); ++i) lanes = std::max(lanes, args[i].dtype().lanes());
  return Call::make(op->dtype.with_lanes(lanes), op->op, std::move(args));
}
Expr IRMutator::visit(const BufferLoad* op) {
  std::vector<Expr> idx;
  bool changed = mutate_exprs(op->indices, &idx);
  Expr p = op->predicate.defined() ? mutate(op->predicate) : Expr();
  if (!changed && p.same_as(op->predicate)) return op;
  return BufferLoad::make(Buffer(op->buffer), std::move(idx), p);
}
Expr IRMutator::visit(const TensorLoad* op) {
  std::vector<Expr> idx;
  if (!mutate_exprs(op->indices, &idx)) return op;
  return TensorLoad::make(op->producer, std::move(idx));
}
Expr IRMutator::visit(const Ramp* op) {
  Expr b = mutate(op->base), s = mutate(op->stride);
  if (b.same_as(op->base) && s.same_as(op->stride)) return op;
  return Ramp::make(b, s, op->lanes);
}
Expr IRMutator::visit(const Broadcast* op) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? Expr(op) : Broadcast::make(v, op->lanes);
}
Expr IRMutator::visit(const Let* op) {
  Expr v = mutate(op->value), b = mutate(op->body);
  if (v.same_as(op->value) && b.same_as(op->body)) return op;
  return Let::make(op->var, v, b);
}
Expr IRMutator::visit(const Reduce* op) {
  Expr s = mutate(op->source), c = mutate(op->condition);
  if (s.same_as(op->source) && c.same_as(op->condition)) return op;
  return Reduce::make(op->reduce_kind, s, op->axis, c);
}

Stmt IRMutator::visit(const For* op) {
  Expr m = mutate(op->min), e = mutate(op->extent);
  Stmt b = mutate(op->body);
  if (m.same_as(op->min) && e.same_as(op->extent) && b.same_as(op->body)) return op;
  return For::make(op->loop_var, m, e, op->kind, b, op->thread_tag);
}
Stmt IRMutator::visit(const BufferStore* op) {
  Expr v = mutate(op->value);
  std::vector<Expr> idx;
  bool changed = mutate_exprs(op->indices, &idx);
  Expr p = op->predicate.defined() ? mutate(op->predicate) : Expr();
  if (!changed && v.same_as(op->value) && p.same_as(op->predicate)) return op;
  return BufferStore::make(op->buffer, v, std::move(idx), p);
}
Stmt IRMutator::visit(const Allocate* op) {
  Stmt b = mutate(op->body);
  return b.same_as(op->body) ? Stmt(op) : Allocate::make(op->buffer, b);
}
Stmt IRMutator::visit(const Seq* op) {
  std::vector<Stmt> seq;
  bool changed = false;
  for (const Stmt& s : op->seq) {
    seq.push_back(mutate(s));
    changed |= !seq.back().same_as(s);
  }
  return changed ? Seq::make(std::move(seq)) : Stmt(op);
}
Stmt IRMutator::visit(const IfThenElse* op) {
  Expr c = mutate(op->condition);
  Stmt t = mutate(op->then_case), e = mutate(op->else_case);
  if (c.same_as(op->condition) && t.same_as(op->then_case) && e.same_as(op->else_case)) return op;
  return IfThenElse::make(c, t, e);
}
Stmt IRMutator::visit(const LetStmt* op) {
  Expr v = mutate(op->value);
  Stmt b = mutate(op->body);
  if (v.same_as(op->value) && b.same_as(op->body)) return op;
  return LetStmt::make(op->var, v, b);
}
Stmt IRMutator::visit(const Evaluate* op) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? Stmt(op) : Evaluate::make(v);
}
Stmt IRMutator::visit(const AttrStmt* op) {
  Expr v = mutate(op->value);
  Stmt b = mutate(op->body);
  if (v.same_as(op->value) && b.same_as(op->body)) return op;
  return AttrStmt::make(op->key, v, b);
}
Stmt IRMutator::visit(const AssertStmt* op) {
  Expr c = mutate(op->condition);
  Stmt b = mutate(op->body);
  if (c.same_as(op->condition) && b.same_as(op->body)) return op;
  return AssertStmt::make(c, op->message, b);
}

// ---------------------------------------------------------------- helpers

namespace {
class CallbackVisitor : public IRVisitor {
 public:
  CallbackVisitor(const std::function<void(const Expr&)>& e, const std::function<void(const Stmt&)>& s) : on_expr_(e), on_stmt_(s) {}
  void visit_expr(const Expr& e) override {
    if (!e.defined()) return;
    IRVisitor::visit_expr(e);
    if (on_expr_) on_expr_(e);
  }
  void visit_stmt(const Stmt& s) override {
    if (!s.defined()) return;
    IRVisitor::visit_stmt(s);
    if (on_stmt_) on_stmt_(s);
  }

 private:
  const std::function<void(const Expr&)>& on_expr_;
  const std::function<void(const Stmt&)>& on_stmt_;
};

class Substituter : public IRMutator {
 public:
  explicit Substituter(const std::function<Expr(const Variable*)>& f) : f_(f) {}

 protected:
  using IRMutator::visit;
  Expr visit(const Variable* op) override {
    Expr r = f_(op);
    return r.defined() ? r : Expr(op);
  }

 private:
  const std::function<Expr(const Variable*)>& f_;
};
}  // namespace

void post_order_visit(const Expr& e, const std::function<void(const Expr&)>& f) {
  std::function<void(const Stmt&)> none;
  CallbackVisitor(f, none).visit_expr(e);
}

void post_order_visit(const Stmt& s, const std::function<void(const Expr&)>& on_expr, const std::function<void(const Stmt&)>& on_stmt) {
  CallbackVisitor(on_expr, on_stmt).visit_stmt(s);
}

Expr substitute(const Expr& e, const std::function<Expr(const Variable*)>& f) { return Substituter(f).mutate(e); }
Stmt substitute(const Stmt& s, const std::function<Expr(const Variable*)>& f) { return Substituter(f).mutate(s); }

bool uses_var(const Expr& e, const std::function<bool(const Variable*)>& pred) {
  bool found = false;
  post_order_visit(e, [&](const Expr& x) {
    if (const Variable* v = x.as<Variable>()) found = found || pred(v);
  });
  return found;
}

bool uses_var(const Stmt& s, const std::function<bool(const Variable*)>& pred) {
  bool found = false;
  post_order_visit(s, [&](const Expr& x) {
    if (const Variable* v = x.as<Variable>()) found = found || pred(v);
  });
  return found;
}

}  // namespace kiln
