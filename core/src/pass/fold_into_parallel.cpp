// fold_into_parallel: a serial loop marked pragma_fold_into_parallel whose
// body is one parallel loop becomes part of that parallel loop.
//
// The schedule rules keep loops over a symbolic extent (a batch of images)
// outside the fused parallel loop, serial: fused before bound inference, the
// attached accumulator's bounds would be divisions by the shape variable
// (search_space_apply.cpp, fuse_parallel). Each of their iterations then
// launches the thread pool once, and joins it: on a loaded machine a join
// waits for a thread that lost its core (a 7x7x512 conv over a batch of 4:
// 3x the static compile's time at 2 threads, the same at 1). Folded after
// lowering, the loops run as one launch over their product; the indices are
// the fused one divided and taken modulo the inner extent, which must not
// depend on the outer loop.
#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/pass/passes.h"

namespace kiln::pass {

namespace {

constexpr const char* kFoldKey = "pragma_fold_into_parallel";

class Folder : public IRMutator {
 protected:
  using IRMutator::visit;

  Stmt visit(const AttrStmt* op) override {
    Stmt body = mutate(op->body);
    if (op->key != kFoldKey) return body.same_as(op->body) ? Stmt(op) : AttrStmt::make(op->key, op->value, body);
    // The marker goes: folded or not, nothing downstream reads it.
    std::vector<const AttrStmt*> around;  // attributes on the serial loop (an unroll pragma): they stay around it
    Stmt o = body;
    while (const AttrStmt* a = o.as<AttrStmt>()) {
      around.push_back(a);
      o = a->body;
    }
    const For* outer = o.as<For>();
    if (!outer || outer->kind != ForKind::Serial || !is_zero(outer->min)) return body;
    // The parallel loop, under attributes only (an unroll pragma).
    std::vector<const AttrStmt*> attrs;
    Stmt s = outer->body;
    while (const AttrStmt* a = s.as<AttrStmt>()) {
      attrs.push_back(a);
      s = a->body;
    }
    const For* inner = s.as<For>();
    if (!inner || inner->kind != ForKind::Parallel || !is_zero(inner->min)) return body;
    const Variable* v = outer->loop_var.get();
    auto uses_outer = [&](const Expr& e) { return uses_var(e, [&](const Variable* u) { return u == v; }); };
    if (uses_outer(inner->extent)) return body;
    for (const AttrStmt* a : attrs)
      if (uses_outer(a->value)) return body;
    Var fused(outer->loop_var->name + "." + inner->loop_var->name + ".folded", inner->loop_var.dtype());
    Expr m = inner->extent;
    Stmt folded_body = substitute(inner->body, [&](const Variable* u) -> Expr {
      if (u == v) return floordiv(Expr(fused), m);
      if (u == inner->loop_var.get()) return floormod(Expr(fused), m);
      return Expr();
    });
    Stmt out = For::make(fused, 0, arith::simplify(outer->extent * m), ForKind::Parallel, folded_body, inner->thread_tag);
    for (auto it = attrs.rbegin(); it != attrs.rend(); ++it) out = AttrStmt::make((*it)->key, (*it)->value, out);
    for (auto it = around.rbegin(); it != around.rend(); ++it) out = AttrStmt::make((*it)->key, (*it)->value, out);
    return out;
  }
};

}  // namespace

PrimFunc fold_into_parallel(const PrimFunc& f) { return f.with_body(Folder().mutate(f.body())); }

}  // namespace kiln::pass
