/** \file
 * The loop-level passes, one free function each (each lives in its own file
 * core/src/pass/<name>.cpp). Lowering runs them as a plain list of calls; see
 * core/src/te/lower.cpp for the order. Every pass takes a PrimFunc and returns a
 * PrimFunc, the very same one when nothing changed.
 */
#ifndef KILN_PASS_PASSES_H
#define KILN_PASS_PASSES_H

#include "kiln/ir/function.h"

namespace kiln::pass {

/**
 * Rewrites every multi-dimensional buffer access into a one-dimensional one:
 * buffer[i, j] becomes buffer'[i*stride0 + j*stride1] where buffer' is a 1-D
 * buffer of num_elements (honouring explicit strides, e.g. from
 * storage_align) that shares the original's `data` variable. Allocates are
 * rewritten to their flat buffers; parameters keep their logical buffers (the
 * function's signature, which callers and Module::call check) while the body
 * accesses their flat views. Assumes no vector indices yet.
 *
 * A strided buffer's flat size is one past its largest reachable offset,
 * 1 + sum((shape[i] - 1) * stride[i]). Shapes and indices become int32 (index
 * arithmetic is int32 from here on); unit strides and zero indices are left
 * out of the sum, so A[i, j] of a [n, 64] buffer reads A[i*64 + j]. Buffers
 * already compact, 1-D and int32 are kept as they are (the same node).
 */
PrimFunc storage_flatten(const PrimFunc& f);

/**
 * Arithmetic simplification of every expression, with loop ranges known: a
 * thin wrapper over arith::simplify(Stmt) (kiln/arith/simplify_stmt.h), which
 * documents what folds.
 */
PrimFunc simplify(const PrimFunc& f);

/**
 * Removes statements that do nothing: loops with a no-op body or zero
 * extent, empty branches, Evaluate of constants inside Seq, Allocates whose
 * buffer is never used.
 *
 * Also: an IfThenElse with a constant condition becomes the branch taken,
 * one with an empty then branch becomes `if (!c) else_case`, LetStmt and
 * AttrStmt around a no-op go, and `b[i] = b[i]` (same buffer, syntactically
 * the same indices) is dropped. Expressions have no side effects in this IR,
 * so dropping a condition or a loop bound is safe. A body that ends up empty
 * is Evaluate(0).
 */
PrimFunc remove_no_op(const PrimFunc& f);

/**
 * Splits a loop whose body is guarded by likely(cond) (the guards of splits
 * that do not divide, and of padding) into a main part where the guard is
 * provably true, with the guard removed, and the remaining part(s) with the
 * guard kept. Only loops of constant bounds are partitioned.
 *
 * Guards are IfThenElse statements whose condition is a likely() call,
 * anywhere in the loop's body. Each conjunct of the condition is expected to
 * hold on a prefix or a suffix of the loop's range; the range where all hold
 * is found by binary search with arith::Analyzer (enclosing loops and lets,
 * and the loops between the partitioned loop and the guard, bound to their
 * ranges and values), then verified with can_prove over the whole main
 * range, so an unprovable guard leaves the loop unchanged. A remaining part
 * where the condition is provably false gets the else branch instead of the
 * guard (and disappears if that is empty). Pieces keep the loop's kind and
 * its loop variable (consecutive loops bind the same Var), and are
 * partitioned again for other guards; inner loops are partitioned with each
 * piece's range known. Thread-bound loops are never split.
 */
PrimFunc loop_partition(const PrimFunc& f);

/**
 * A serial loop marked pragma_fold_into_parallel (a schedule's loop over a
 * symbolic extent, kept outside its parallel loop for bound inference) whose
 * body is one parallel loop of an extent that does not depend on it becomes
 * one parallel loop over both: one thread-pool launch instead of one per
 * iteration. The marker is removed either way.
 */
PrimFunc fold_into_parallel(const PrimFunc& f);

/**
 * Replicates the body of ForKind::Unrolled loops of constant extent, and of
 * inner serial loops whose total extent is at most the value of an enclosing
 * AttrStmt "pragma_auto_unroll_max_step". Non-constant unrolled loops stay
 * serial loops.
 *
 * Each copy has the loop variable replaced by its value and is simplified
 * (arith::simplify) at once. Loops nested in an unrolled loop are unrolled
 * only if marked (or under the pragma) themselves. Under the pragma, a
 * serial loop of constant extent is unrolled when the product of the extents
 * along its deepest nest (itself included) is at most N and every loop in
 * that nest is serial or unrolled with a constant extent; the AttrStmt is
 * consumed. Unrolling more than 65536 iterations raises kiln::Error.
 */
PrimFunc unroll_loops(const PrimFunc& f);

/**
 * Rewrites ForKind::Vectorized loops of constant extent into vector code:
 * the loop variable becomes Ramp(min, 1, lanes), scalars meeting vectors are
 * broadcast, loads and stores take Ramp indices. A body that cannot be
 * vectorized (an inner loop, a condition that differs by lane around a
 * statement) is left as a serial loop, so the result is always correct.
 *
 * Affine index arithmetic stays in Ramp form with a simplified base
 * (A[ramp(i*64 + j*8, 1, 8)]); expressions that do not depend on the loop
 * variable stay scalar. Let/LetStmt values that become vectors rebind a
 * vector variable (a Ramp or Broadcast value is substituted instead). Other
 * reasons to stay serial: a store whose index does not depend on the loop
 * variable (a reduction across lanes), a store whose lanes may share an
 * address while the body reads that buffer, an if_then_else, IfThenElse,
 * AssertStmt or AttrStmt whose condition or value depends on the variable,
 * an Allocate in the body, or a body that already has vectors. An extent of
 * 1 substitutes min for the variable; a non-constant extent, or one above 64
 * lanes, makes the loop serial, except a symbolic extent bounded by a
 * constant (a dynamic shape's last tile, min(n - jo*32, 32)): that runs as one
 * vector of the bound's lanes whose loads and stores are predicated by
 * lane < extent (BufferLoad/BufferStore::predicate; masked loads and stores
 * in LLVM), or as power-of-two chunks where it cannot (KILN_MASKED_TAILS=0).
 */
PrimFunc vectorize_loops(const PrimFunc& f);

/**
 * Lets allocations whose lifetimes do not overlap share storage: sibling
 * Allocates in one sequence are narrowed to the statements that use them,
 * and a later buffer of the same scope and dtype reuses the storage of one
 * that is dead by then (the shared buffer takes the larger size).
 *
 * "Sibling" means: the Allocates wrapping a Seq and those wrapping its
 * elements (recursively), with their Seqs spliced into one run of
 * statements. A buffer is live from the first statement of the run that
 * names it to the last; storage passes to a later buffer only when the
 * earlier one's last use is strictly before the later one's first use, and
 * only between compact 1-D buffers of constant size (run storage_flatten
 * first). The merged buffer keeps the data variable of the first. Unused
 * Allocates disappear. Allocates never move across loops or conditions.
 */
PrimFunc storage_reuse(const PrimFunc& f);

}  // namespace kiln::pass

#endif  // KILN_PASS_PASSES_H
