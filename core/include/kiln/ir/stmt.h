/** \file
 * Statements of the kiln IR: loops, stores, allocation, control flow.
 * Like expressions, each node is an immutable struct with a checking `make`.
 * Seq never contains another Seq directly (make flattens) and never has
 * fewer than two statements (make collapses).
 */
#ifndef KILN_IR_STMT_H
#define KILN_IR_STMT_H

#include <string>
#include <vector>

#include "kiln/ir/buffer.h"
#include "kiln/ir/expr.h"

namespace kiln {

struct BaseStmtNode : public IRNode {
  explicit BaseStmtNode(IRNodeKind k) : IRNode(k) {}
};

template <typename T>
struct StmtNode : public BaseStmtNode {
  StmtNode() : BaseStmtNode(T::kKind) {}
};

class Stmt : public Ref<BaseStmtNode> {
 public:
  Stmt() = default;
  Stmt(const BaseStmtNode* n) : Ref<BaseStmtNode>(n) {}
  template <typename U>
  Stmt(const Ref<U>& r) : Ref<BaseStmtNode>(r) {}
  template <typename T>
  const T* as() const {
    const BaseStmtNode* n = get();
    return n && n->kind == T::kKind ? static_cast<const T*>(n) : nullptr;
  }
};

enum class ForKind : uint8_t { Serial, Parallel, Vectorized, Unrolled, ThreadBinding };
const char* for_kind_name(ForKind k);

/** for (loop_var = min; loop_var < min + extent; ++loop_var) body */
struct For : public StmtNode<For> {
  KILN_DECLARE_NODE(For);
  For(Var v, Expr m, Expr e, ForKind k, Stmt b, std::string tag)
      : loop_var(std::move(v)), min(std::move(m)), extent(std::move(e)), kind(k), body(std::move(b)), thread_tag(std::move(tag)) {}
  static Stmt make(Var loop_var, Expr min, Expr extent, ForKind kind, Stmt body, std::string thread_tag = "");
  const Var loop_var;
  const Expr min, extent;
  const ForKind kind;
  const Stmt body;
  /** For ThreadBinding: "blockIdx.x", "threadIdx.x", ... */
  const std::string thread_tag;
};

/** buffer[indices...] = value. A Ramp index with a vector value makes a vector store. */
struct BufferStore : public StmtNode<BufferStore> {
  KILN_DECLARE_NODE(BufferStore);
  BufferStore(Buffer b, Expr v, std::vector<Expr> i, Expr p = Expr())
      : buffer(std::move(b)), value(std::move(v)), indices(std::move(i)), predicate(std::move(p)) {}
  /** A predicate (a bool vector of the value's lanes) writes only the lanes where it holds. */
  static Stmt make(Buffer buffer, Expr value, std::vector<Expr> indices, Expr predicate = Expr());
  const Buffer buffer;
  const Expr value;
  const std::vector<Expr> indices;
  const Expr predicate;  // undefined: every lane
};

/** Storage for `buffer` (of its shape, in its scope) live within body. */
struct Allocate : public StmtNode<Allocate> {
  KILN_DECLARE_NODE(Allocate);
  Allocate(Buffer b, Stmt s) : buffer(std::move(b)), body(std::move(s)) {}
  static Stmt make(Buffer buffer, Stmt body);
  const Buffer buffer;
  const Stmt body;
};

struct Seq : public StmtNode<Seq> {
  KILN_DECLARE_NODE(Seq);
  explicit Seq(std::vector<Stmt> s) : seq(std::move(s)) {}
  /** Flattens nested Seqs, drops undefined statements; one statement is returned as is. */
  static Stmt make(std::vector<Stmt> seq);
  const std::vector<Stmt> seq;
};

struct IfThenElse : public StmtNode<IfThenElse> {
  KILN_DECLARE_NODE(IfThenElse);
  IfThenElse(Expr c, Stmt t, Stmt e) : condition(std::move(c)), then_case(std::move(t)), else_case(std::move(e)) {}
  /** else_case may be undefined. */
  static Stmt make(Expr condition, Stmt then_case, Stmt else_case = Stmt());
  const Expr condition;
  const Stmt then_case, else_case;
};

struct LetStmt : public StmtNode<LetStmt> {
  KILN_DECLARE_NODE(LetStmt);
  LetStmt(Var v, Expr x, Stmt b) : var(std::move(v)), value(std::move(x)), body(std::move(b)) {}
  static Stmt make(Var var, Expr value, Stmt body);
  const Var var;
  const Expr value;
  const Stmt body;
};

/** Evaluates an expression for its effect (or as a no-op placeholder: Evaluate(0)). */
struct Evaluate : public StmtNode<Evaluate> {
  KILN_DECLARE_NODE(Evaluate);
  explicit Evaluate(Expr v) : value(std::move(v)) {}
  static Stmt make(Expr value);
  const Expr value;
};

/** An annotation on body: pragmas ("pragma_auto_unroll_max_step"), storage hints, ... */
struct AttrStmt : public StmtNode<AttrStmt> {
  KILN_DECLARE_NODE(AttrStmt);
  AttrStmt(std::string k, Expr v, Stmt b) : key(std::move(k)), value(std::move(v)), body(std::move(b)) {}
  static Stmt make(std::string key, Expr value, Stmt body);
  const std::string key;
  const Expr value;
  const Stmt body;
};

/** Fails with `message` at run time when condition is false, else runs body. */
struct AssertStmt : public StmtNode<AssertStmt> {
  KILN_DECLARE_NODE(AssertStmt);
  AssertStmt(Expr c, std::string m, Stmt b) : condition(std::move(c)), message(std::move(m)), body(std::move(b)) {}
  static Stmt make(Expr condition, std::string message, Stmt body);
  const Expr condition;
  const std::string message;
  const Stmt body;
};

/** The no-op statement Evaluate(0). */
Stmt make_nop();
bool is_nop(const Stmt& s);

}  // namespace kiln

#endif  // KILN_IR_STMT_H
