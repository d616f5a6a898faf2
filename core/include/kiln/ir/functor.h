/** \file
 * IRVisitor walks expressions and statements; IRMutator rebuilds them.
 * Override `visit(const T*)` for the nodes you care about; the defaults
 * recurse into children. The mutator's defaults return the very same node
 * when no child changed, so an untouched tree costs no allocation and
 * `same_as` tells a pass whether anything happened.
 */
#ifndef KILN_IR_FUNCTOR_H
#define KILN_IR_FUNCTOR_H

#include <functional>

#include "kiln/ir/function.h"
#include "kiln/ir/stmt.h"

namespace kiln {

class IRVisitor {
 public:
  virtual ~IRVisitor() = default;
  virtual void visit_expr(const Expr& e);
  virtual void visit_stmt(const Stmt& s);

 protected:
#define KILN_X(T) virtual void visit(const T* op);
  KILN_FOR_EACH_EXPR_NODE(KILN_X)
  KILN_FOR_EACH_STMT_NODE(KILN_X)
#undef KILN_X
};

class IRMutator {
 public:
  virtual ~IRMutator() = default;
  virtual Expr mutate(const Expr& e);
  virtual Stmt mutate(const Stmt& s);

 protected:
#define KILN_X(T) virtual Expr visit(const T* op);
  KILN_FOR_EACH_EXPR_NODE(KILN_X)
#undef KILN_X
#define KILN_X(T) virtual Stmt visit(const T* op);
  KILN_FOR_EACH_STMT_NODE(KILN_X)
#undef KILN_X
  /** Mutates each element; returns true when any changed. */
  bool mutate_exprs(const std::vector<Expr>& in, std::vector<Expr>* out);
};

/** Calls f on every expression node (pre-order) under e / s. */
void post_order_visit(const Expr& e, const std::function<void(const Expr&)>& f);
void post_order_visit(const Stmt& s, const std::function<void(const Expr&)>& on_expr, const std::function<void(const Stmt&)>& on_stmt = nullptr);

/** Replaces variables by expressions (by identity of the Variable node). */
Expr substitute(const Expr& e, const std::function<Expr(const Variable*)>& f);
Stmt substitute(const Stmt& s, const std::function<Expr(const Variable*)>& f);

/**
 * s with every Allocate in it given a fresh buffer (a new data variable; the
 * same name, type, shape and scope) and the accesses inside renamed to it.
 * Passes that copy a statement (unrolling, loop partitioning) rename the
 * copies, so that each Allocate of a function keeps a data variable of its
 * own: later passes and the code generators key storage by that variable.
 */
Stmt fresh_allocations(const Stmt& s);

/** True when e reads any variable for which pred holds. */
bool uses_var(const Expr& e, const std::function<bool(const Variable*)>& pred);
bool uses_var(const Stmt& s, const std::function<bool(const Variable*)>& pred);

}  // namespace kiln

#endif  // KILN_IR_FUNCTOR_H
