// remove_no_op: drops statements that have no effect.
#include "kiln/ir/functor.h"
#include "kiln/pass/passes.h"

namespace kiln::pass {

namespace {

// True when s reads or writes the buffer whose storage is `data`, or names
// `data` itself (an attribute may refer to a buffer by its data variable).
static bool uses_buffer(const Stmt& s, const Variable* data) {
  bool used = false;
  post_order_visit(
      s,
      [&](const Expr& e) {
        if (used) return;
        if (const BufferLoad* l = e.as<BufferLoad>()) used = l->buffer->data.get() == data;
        else if (const Variable* v = e.as<Variable>()) used = v == data;
      },
      [&](const Stmt& st) {
        if (const BufferStore* w = st.as<BufferStore>()) used = used || w->buffer->data.get() == data;
      });
  return used;
}

class NoOpRemover : public IRMutator {
 protected:
  using IRMutator::visit;

  Stmt visit(const For* op) override {
    const int64_t* extent = as_const_int(op->extent);
    if (extent && *extent <= 0) return make_nop();
    Stmt s = IRMutator::visit(op);
    const For* f = s.as<For>();
    return f && is_nop(f->body) ? make_nop() : s;
  }

  Stmt visit(const Seq* op) override {
    std::vector<Stmt> seq;
    bool changed = false;
    for (const Stmt& s : op->seq) {
      Stmt m = mutate(s);
      changed |= !m.same_as(s);
      if (is_nop(m)) {
        changed = true;
        continue;
      }
      seq.push_back(m);
    }
    if (!changed) return op;
    return seq.empty() ? make_nop() : Seq::make(std::move(seq));
  }

  Stmt visit(const IfThenElse* op) override {
    // Conditions have no side effects in this IR, so a branch that does
    // nothing either way can go, condition and all.
    if (const int64_t* c = as_const_int(op->condition)) {
      const Stmt& taken = *c ? op->then_case : op->else_case;
      return taken.defined() ? mutate(taken) : make_nop();
    }
    Stmt then_case = mutate(op->then_case);
    Stmt else_case = mutate(op->else_case);
    bool then_nop = is_nop(then_case), else_nop = is_nop(else_case);
    if (then_nop && else_nop) return make_nop();
    if (then_nop) return IfThenElse::make(Not::make(op->condition), else_case);
    if (else_nop) else_case = Stmt();
    if (then_case.same_as(op->then_case) && else_case.same_as(op->else_case)) return op;
    return IfThenElse::make(op->condition, then_case, else_case);
  }

  Stmt visit(const LetStmt* op) override { return drop_if_empty(IRMutator::visit(op)); }
  Stmt visit(const AttrStmt* op) override { return drop_if_empty(IRMutator::visit(op)); }

  Stmt visit(const Allocate* op) override {
    Stmt body = mutate(op->body);
    if (is_nop(body) || !uses_buffer(body, op->buffer->data.get())) return body;
    return body.same_as(op->body) ? Stmt(op) : Allocate::make(op->buffer, body);
  }

  Stmt visit(const BufferStore* op) override {
    // buffer[i] = buffer[i] stores what is already there.
    const BufferLoad* l = op->value.as<BufferLoad>();
    if (l && l->buffer.get() == op->buffer.get() && same_indices(l->indices, op->indices)) return make_nop();
    return IRMutator::visit(op);
  }

 private:
  // A statement whose only child is its body is a no-op when the body is.
  static Stmt drop_if_empty(const Stmt& s) {
    const Stmt* body = nullptr;
    if (const LetStmt* l = s.as<LetStmt>()) body = &l->body;
    else if (const AttrStmt* a = s.as<AttrStmt>()) body = &a->body;
    return body && is_nop(*body) ? make_nop() : s;
  }

  // Syntactic identity is enough here: a missed case only keeps a store.
  static bool same_indices(const std::vector<Expr>& a, const std::vector<Expr>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].same_as(b[i])) continue;
      const Variable* va = a[i].as<Variable>();
      const int64_t *ca = as_const_int(a[i]), *cb = as_const_int(b[i]);
      if (va && va == b[i].as<Variable>()) continue;
      if (ca && cb && *ca == *cb && a[i].dtype() == b[i].dtype()) continue;
      return false;
    }
    return true;
  }
};

}  // namespace

PrimFunc remove_no_op(const PrimFunc& f) {
  Stmt body = NoOpRemover().mutate(f.body());
  return f.with_body(body.defined() ? body : make_nop());
}

}  // namespace kiln::pass
