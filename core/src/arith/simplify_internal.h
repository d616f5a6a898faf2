/** \file
 * Private to core/src/arith: the pieces the analyzer, the simplifier and the
 * statement simplifier share.
 *
 * Overflow model. Signed integers of 32 bits or more are index arithmetic:
 * like Halide and TVM we assume they never overflow, which licenses moving
 * terms across comparisons and splitting divisions. Every other integer type
 * (unsigned, int8, int16) wraps, so for those only ring identities (+, -, *
 * modulo 2^bits) and bound-based rules whose bounds account for wrapping are
 * applied. Floats get constant folding and the x + 0, x * 1, x / 1 identities.
 */
#ifndef KILN_ARITH_SIMPLIFY_INTERNAL_H
#define KILN_ARITH_SIMPLIFY_INTERNAL_H

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/support/error.h"

namespace kiln::arith::detail {

// ---------------------------------------------------------------- facts

/** What is known about one variable. The Var keeps the node alive, so its address cannot be reused by another variable while bound. */
struct VarFact {
  Var var;
  ConstIntBound bound;
  /** When defined, the variable equals this (already simplified) expression. */
  Expr value;
  /**
   * A symbolic range [sym_min, sym_max] (both defined or neither), kept for
   * loops whose bounds are not constants: i in [0, n) then proves i < n.
   */
  Expr sym_min, sym_max;
};

/** The facts an Analyzer has been told, keyed by variable node. */
using Facts = std::unordered_map<const Variable*, VarFact>;

/** Sets a fact for the lifetime of the object, then restores the previous one (scopes: Let, For, Reduce). */
class ScopedFact {
 public:
  ScopedFact(Facts* facts, const Var& var, ConstIntBound bound, Expr value = Expr());
  ScopedFact(Facts* facts, VarFact fact);
  /** Sets var's fact to `fact`, or erases it when there is none. */
  ScopedFact(Facts* facts, const Variable* key, const std::optional<VarFact>& fact);
  ~ScopedFact();
  ScopedFact(const ScopedFact&) = delete;
  const Variable* key() const { return key_; }
  /** The fact this one replaced (none: the variable had no fact). */
  const std::optional<VarFact>& old() const { return old_; }
  ScopedFact& operator=(const ScopedFact&) = delete;

 private:
  Facts* facts_;
  const Variable* key_;
  std::optional<VarFact> old_;
};

/** A stack of scoped facts, restored in reverse order (so two facts on one variable unwind correctly). */
class ScopedFacts {
 public:
  ScopedFacts() = default;
  ScopedFacts(const ScopedFacts&) = delete;
  ScopedFacts& operator=(const ScopedFacts&) = delete;
  ~ScopedFacts() {
    while (!items_.empty()) items_.pop_back();
  }
  void push(Facts* facts, VarFact fact) { items_.push_back(std::make_unique<ScopedFact>(facts, std::move(fact))); }
  void push_old(Facts* facts, const ScopedFact& f) { items_.push_back(std::make_unique<ScopedFact>(facts, f.key(), f.old())); }
  const std::vector<std::unique_ptr<ScopedFact>>& items() const { return items_; }

 private:
  std::vector<std::unique_ptr<ScopedFact>> items_;
};

// ---------------------------------------------------------------- bounds

/** True for types whose arithmetic is assumed never to overflow (signed, >= 32 bits). */
inline bool no_overflow(DataType t) { return t.is_int() && t.bits() >= 32; }

/** Saturating arithmetic on bound ends; kNegInf/kPosInf absorb. */
int64_t sat_add(int64_t a, int64_t b);
int64_t sat_neg(int64_t a);
int64_t sat_mul(int64_t a, int64_t b);
ConstIntBound bound_add(ConstIntBound a, ConstIntBound b);
ConstIntBound bound_scale(ConstIntBound a, int64_t k);
ConstIntBound bound_union(ConstIntBound a, ConstIntBound b);
/** floor(a / b) and a mod b with the floor convention, b != 0. */
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);

/** What any value of t may be: exact for narrow types, unbounded for 32/64-bit ones. */
ConstIntBound type_bound(DataType t);
/** Constant bounds of e under the facts (see analyzer.h). */
ConstIntBound const_int_bound(const Expr& e, const Facts& facts);

// ---------------------------------------------------------------- expression order

/** A total order on expressions (structure, then names; free variables of one name by address). 0 means structurally equal. */
int expr_compare(const Expr& a, const Expr& b);
inline bool expr_equal(const Expr& a, const Expr& b) { return expr_compare(a, b) == 0; }

// ---------------------------------------------------------------- linear forms

/** coeff * atom, where the atom is a variable or a non-affine subexpression. */
struct Term {
  Expr atom;
  int64_t coeff;
};

/**
 * sum(coeff * atom) + constant for a scalar integer expression. Coefficients
 * and the constant are kept wrapped to the type's width in two's complement
 * (signed representation even for unsigned types, so x - 1 keeps coefficient
 * -1 instead of 2^32 - 1).
 */
struct LinearForm {
  DataType dtype;
  std::vector<Term> terms;
  int64_t constant = 0;
  bool is_const() const { return terms.empty(); }
};

/** Wraps v to t's width, sign-extended. */
int64_t wrap_int(DataType t, int64_t v);
/** Flattens +, - and * by constants of e into a normalized form. */
LinearForm linear_form(const Expr& e);
/** f += scale * e, without normalizing. */
void linear_accumulate(LinearForm* f, const Expr& e, int64_t scale);
/** Merges equal atoms, folds floordiv(x, c)*c + floormod(x, c) into x, drops zero terms, orders by atom. */
void linear_normalize(LinearForm* f);
/** a - b, normalized. */
LinearForm linear_sub(const LinearForm& a, const LinearForm& b);
/** The canonical expression: terms by decreasing |coeff| then atom order, positive terms first, constant last. */
Expr linear_to_expr(const LinearForm& f);
/** Bounds of f given bounds of its atoms. */
ConstIntBound linear_bound(const LinearForm& f, const std::function<ConstIntBound(const Expr&)>& atom_bound);

// ---------------------------------------------------------------- constants

/** Folds a binary integer operation of immediates of type t; nullopt when undefined (division by zero). */
std::optional<int64_t> fold_int(IRNodeKind kind, DataType t, int64_t a, int64_t b);
/** Folds a comparison of integer immediates of type t (unsigned compare for uint64). */
bool fold_int_cmp(IRNodeKind kind, DataType t, int64_t a, int64_t b);
/** Folds a float comparison. */
bool fold_float_cmp(IRNodeKind kind, double a, double b);
/** Makes an integer immediate of type t, or a Broadcast of one when t is a vector. */
Expr make_int(DataType t, int64_t v);

// ---------------------------------------------------------------- the simplifier

/**
 * The expression simplifier. Children are simplified first, so every rule
 * sees canonical operands; each rule builds a canonical result (which is
 * what makes simplification idempotent). Facts are read for bounds and
 * substituted values, and scoped facts are pushed for Let and Reduce.
 * Statement simplification (simplify_stmt.cpp) extends this class.
 */
class Simplifier : public IRMutator {
 public:
  explicit Simplifier(Facts* facts) : facts_(facts) {}
  using IRMutator::mutate;
  /** Returns e itself when the result is structurally equal to it. */
  Expr mutate(const Expr& e) override;

  ConstIntBound bound(const Expr& e) const { return const_int_bound(e, *facts_); }
  /** Like bound, but for no-overflow types also through the symbolic ranges of variables. */
  ConstIntBound int_bound(const Expr& e) const;
  /** Bound of a linear form (no-overflow type) from atom bounds and symbolic variable ranges. */
  ConstIntBound linear_bound_sym(const LinearForm& f) const;
  /** Bound of the exact difference a - b (no-overflow types), through linear forms so shared terms cancel. */
  ConstIntBound diff_bound(const Expr& a, const Expr& b) const;
  /** True when cond simplifies to the constant true. */
  bool prove(const Expr& cond);
  Facts* facts() const { return facts_; }
  /** The constant bound of a variable over [min, min + extent), for binding loops. */
  ConstIntBound range_bound(const Expr& min, const Expr& extent);
  /** The fact for var in [min, min + extent) (simplified operands): constant and symbolic bounds. */
  VarFact range_fact(const Var& var, const Expr& min, const Expr& extent);
  /**
   * Pushes onto `out` what holds where the (simplified, scalar) cond is
   * `truth`: comparisons of a variable with a constant narrow its bound,
   * through &&, || and !. Used for the branches of selects and ifs.
   */
  void learn(const Expr& cond, bool truth, ScopedFacts* out);

  // Rules on simplified operands (also used by the interval evaluator).
  Expr simplify_add_sub(IRNodeKind kind, const Expr& a, const Expr& b);
  Expr simplify_mul(const Expr& a, const Expr& b);
  Expr simplify_div(IRNodeKind kind, const Expr& a, const Expr& b);
  Expr simplify_min_max(IRNodeKind kind, const Expr& a, const Expr& b);
  Expr simplify_cmp(IRNodeKind kind, const Expr& a, const Expr& b);
  Expr simplify_and_or(IRNodeKind kind, const Expr& a, const Expr& b);
  Expr simplify_not(const Expr& a);
  Expr simplify_select(const Expr& c, const Expr& t, const Expr& f);
  Expr simplify_cast(DataType t, const Expr& v);

 protected:
  using IRMutator::visit;
  Expr visit(const Variable* op) override;
  Expr visit(const Add* op) override;
  Expr visit(const Sub* op) override;
  Expr visit(const Mul* op) override;
  Expr visit(const Div* op) override;
  Expr visit(const Mod* op) override;
  Expr visit(const FloorDiv* op) override;
  Expr visit(const FloorMod* op) override;
  Expr visit(const Min* op) override;
  Expr visit(const Max* op) override;
  Expr visit(const EQ* op) override;
  Expr visit(const NE* op) override;
  Expr visit(const LT* op) override;
  Expr visit(const LE* op) override;
  Expr visit(const GT* op) override;
  Expr visit(const GE* op) override;
  Expr visit(const And* op) override;
  Expr visit(const Or* op) override;
  Expr visit(const Not* op) override;
  Expr visit(const Select* op) override;
  Expr visit(const Cast* op) override;
  Expr visit(const Call* op) override;
  Expr visit(const Ramp* op) override;
  Expr visit(const Broadcast* op) override;
  Expr visit(const Let* op) override;
  Expr visit(const Reduce* op) override;
  Expr visit(const BufferLoad* op) override;
  Expr visit(const TensorLoad* op) override;

  /**
   * Simplifies cond, then t knowing cond and f knowing !cond; returns the
   * simplified cond. `eager`: both values are evaluated (Select, not
   * if_then_else), so the indices of their loads do not learn the condition.
   */
  Expr simplify_branches(const Expr& cond, const Expr& t, const Expr& f, Expr* t_out, Expr* f_out, bool eager);

  Facts* facts_;

 private:
  /** The facts learned from the conditions of the enclosing eager selects, outermost first. */
  std::vector<const ScopedFacts*> eager_facts_;
  /** Runs body (a load's simplification) without the eager selects' facts (see simplify_branches). */
  Expr without_eager_facts(const std::function<Expr()>& body);
  // Division helpers (simplify_div.cpp).
  Expr div_by_const(IRNodeKind kind, const Expr& a, int64_t c);
  Expr mod_by_const(IRNodeKind kind, const Expr& a, int64_t c);
  Expr div_mod_vector(IRNodeKind kind, const Expr& a, const Expr& b);
  // Comparison helpers (simplify_cmp.cpp).
  std::optional<bool> decide_cmp(IRNodeKind kind, const Expr& a, const Expr& b);
  Expr normalize_cmp(IRNodeKind kind, const Expr& a, const Expr& b);
};

/** Makes a binary node of the given kind (arith, min/max, comparison, logic). */
Expr make_binary(IRNodeKind kind, const Expr& a, const Expr& b);

/** Evaluates the interval of e over dom (int_set.cpp). */
IntervalSet eval_interval(Simplifier* s, const Expr& e, const std::unordered_map<const Variable*, IntervalSet>& dom);

}  // namespace kiln::arith::detail

namespace kiln::arith {
/** The analyzer's state: its facts and the simplifier that reads them. */
struct Analyzer::Impl {
  detail::Facts facts;
  detail::Simplifier simplifier{&facts};
};
}  // namespace kiln::arith

#endif  // KILN_ARITH_SIMPLIFY_INTERNAL_H
