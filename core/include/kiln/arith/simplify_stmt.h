/** \file
 * The statement simplifier: the "simplify" pass of lowering.
 */
#ifndef KILN_ARITH_SIMPLIFY_STMT_H
#define KILN_ARITH_SIMPLIFY_STMT_H

#include "kiln/ir/stmt.h"

namespace kiln::arith {

/**
 * Simplifies every expression of s (see Analyzer::simplify) while walking
 * it: a For binds its loop variable to [min, min + extent) for its body, so
 * index arithmetic folds against loop ranges; a loop whose extent is
 * provably <= 0 becomes a no-op, and one of extent 1 (not thread-bound) is
 * replaced by its body with the loop variable substituted by min. Let and
 * LetStmt values are simplified, and constants and variables substituted.
 * IfThenElse with a provable condition keeps only the branch taken, an
 * AssertStmt that provably holds disappears, and no-ops are dropped from
 * sequences (a loop, allocation or attribute around a no-op is a no-op).
 * Assumes signed 32/64-bit index arithmetic does not overflow.
 */
Stmt simplify(const Stmt& s);

}  // namespace kiln::arith

#endif  // KILN_ARITH_SIMPLIFY_STMT_H
