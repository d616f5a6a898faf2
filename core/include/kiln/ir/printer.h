/** \file
 * The printer: loop nests a person can read, e.g.
 *
 *   func matmul(A: float32[64, 64], B: float32[64, 64], C: float32[64, 64]) {
 *     parallel (i.outer, 0, 8) {
 *       for (j, 0, 64) {
 *         C[i*64 + j] = 0f
 *       }
 *     }
 *   }
 *
 * Expressions are infix with the fewest parentheses precedence allows
 * (`||` < `&&` < comparisons < `+ -` < `* / %`; products print tight, `i*64`;
 * `&&` inside `||` keeps its parentheses). Immediates: int32 `3`, other
 * integers `(int64)3`, float32 `1.5f`, float64 `1.5` / `2.0`, other floats
 * `(float16)1.0`, non-finite float32 `(float32)-inf`, bool `true`/`false`.
 * Div/Mod print `a / b`, `a % b`; the rest in call form: `floordiv(a, b)`,
 * `min(a, b)`, `select(c, a, b)`, casts `float32(x)`, `exp(x)`. Buffer loads
 * `A[i, j]`, tensor loads `A(i, j)`, `ramp(base, stride, lanes)`, broadcast
 * `x8(v)`, `(let x = v in body)`, `sum(src, axis=[k], where=c)`.
 *
 * Statements, two spaces per level, one per line (to_string of a Stmt ends
 * with a newline): `for (i, 0, 64) {` (or `parallel`, `vectorized`,
 * `unrolled`, `thread_binding[blockIdx.x]`), `A[i, j] = v`,
 * `allocate T.local[float32 * 4 * 8] {`, `if (c) {` / `} else if (d) {` /
 * `} else {`, `attr key = v {`; `let x = v` and `assert(c, "msg")` are
 * followed by their body at the same depth; Evaluate prints its expression.
 * Variables print by name, so two distinct variables of one name look alike.
 *
 * Tests compare against this text where a golden form is clearer than an
 * assertion, so the format is stable: change it only with the goldens.
 */
#ifndef KILN_IR_PRINTER_H
#define KILN_IR_PRINTER_H

#include <iosfwd>
#include <string>

#include "kiln/ir/function.h"

namespace kiln {

std::string to_string(const Expr& e);
std::string to_string(const Stmt& s);
std::string to_string(const PrimFunc& f);
std::ostream& operator<<(std::ostream& os, const Expr& e);
std::ostream& operator<<(std::ostream& os, const Stmt& s);
std::ostream& operator<<(std::ostream& os, const PrimFunc& f);

}  // namespace kiln

#endif  // KILN_IR_PRINTER_H
