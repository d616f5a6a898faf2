/** \file
 * Structural equality and hashing of IR: two trees are equal when they have
 * the same shape, dtypes and constants. Variables bound inside the tree
 * (loop variables, Let/LetStmt variables, reduction axes, allocated buffers)
 * are compared by position of binding, not by identity; free variables and
 * buffers are compared by identity unless map_free_vars is set, in which case
 * they are matched in order of first occurrence (so f(x) and f(y) are equal).
 * The hash is consistent with equality under map_free_vars=true.
 */
#ifndef KILN_IR_STRUCTURAL_H
#define KILN_IR_STRUCTURAL_H

#include <cstdint>

#include "kiln/ir/function.h"

namespace kiln {

bool structural_equal(const Expr& a, const Expr& b, bool map_free_vars = false);
bool structural_equal(const Stmt& a, const Stmt& b, bool map_free_vars = false);
/** Functions: parameters are matched in order, names are ignored. */
bool structural_equal(const PrimFunc& a, const PrimFunc& b);

uint64_t structural_hash(const Expr& e);
uint64_t structural_hash(const Stmt& s);
uint64_t structural_hash(const PrimFunc& f);

}  // namespace kiln

#endif  // KILN_IR_STRUCTURAL_H
