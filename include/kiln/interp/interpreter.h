/** \file
 * A reference interpreter of lowered IR: simple, slow and obviously right.
 * It is the oracle for lowering tests and a cross-check for every backend.
 *
 * Calling convention (shared with compiled kernels): args[i] is, for a
 * buffer parameter, the pointer to its first element; for a scalar
 * parameter, a pointer to a value of the parameter's dtype. Loads and stores
 * are bounds-checked against the buffers' shapes; an out-of-bounds access or
 * a failed AssertStmt raises kiln::Error naming the buffer and index.
 */
#ifndef KILN_INTERP_INTERPRETER_H
#define KILN_INTERP_INTERPRETER_H

#include <vector>

#include "kiln/ir/function.h"

namespace kiln {

void interpret(const PrimFunc& f, const std::vector<void*>& args);

}  // namespace kiln

#endif  // KILN_INTERP_INTERPRETER_H
