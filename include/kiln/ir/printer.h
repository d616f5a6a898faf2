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
