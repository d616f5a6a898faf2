/** \file
 * A reference interpreter of lowered IR: simple, slow and obviously right.
 * It is the oracle for lowering tests and a cross-check for every backend.
 *
 * Calling convention (shared with compiled kernels): args[i] is, for a
 * buffer parameter, the pointer to its first element; for a scalar
 * parameter, a pointer to a value of the parameter's dtype. Loads and stores
 * are bounds-checked against the buffers' shapes; an out-of-bounds access or
 * a failed AssertStmt raises kiln::Error naming the buffer and index.
 *
 * Semantics, where the IR leaves room (backends should agree with these):
 *  - integers wrap to their width; integer Div/Mod/FloorDiv/FloorMod by zero
 *    raises kiln::Error; float division by zero is IEEE;
 *  - float32 (and float16/bfloat16) results are rounded to the type after
 *    every operation; math intrinsics use the float versions (expf, ...);
 *    sigmoid is 1/(1+exp(-x)); round is half to even (numpy's rule);
 *  - float -> int truncates toward zero (NaN gives 0, out-of-range
 *    saturates to int64 and then keeps the low bits);
 *  - every For kind runs serially in order; AttrStmt is ignored;
 *    sync_threads() is a no-op (kiln/interp/gpu_simulator.h runs GPU kernels
 *    with their barriers and checks them for races);
 *  - Allocate'd memory starts poisoned (quiet NaNs for floats, 0xA5 bytes
 *    otherwise), so reads before writes show up in results;
 *  - buffers are found through their `data` variable, so the 1-D buffers
 *    of storage flattening reach their original's storage; every index is
 *    checked against its dimension and the flat offset against the storage;
 *  - if_then_else evaluates only the branch taken; with a vector condition
 *    each branch is evaluated with only its lanes' loads performed;
 *  - a predicated load or store (a masked tail) touches, and bounds-checks,
 *    only the lanes its predicate holds in; the other lanes load 0;
 *  - TensorLoad and Reduce (unlowered IR) raise kiln::Error.
 * Errors are prefixed with "in function '<name>': ".
 */
#ifndef KILN_INTERP_INTERPRETER_H
#define KILN_INTERP_INTERPRETER_H

#include <vector>

#include "kiln/ir/function.h"
#include "kiln/runtime/module.h"

namespace kiln {

/** Runs f on args (see the calling convention above); throws kiln::Error on any fault. */
void interpret(const PrimFunc& f, const std::vector<void*>& args);

/**
 * Runs f on arrays and scalars, checked, bound and packed exactly as
 * Module::call does for a compiled kernel (kiln/runtime/arg_binder.h):
 * shape variables come from the arrays or are checked against them, and
 * trailing shape scalars may be left out. Throws kiln::Error.
 */
void interpret_args(const PrimFunc& f, const std::vector<Arg>& args);

}  // namespace kiln

#endif  // KILN_INTERP_INTERPRETER_H
