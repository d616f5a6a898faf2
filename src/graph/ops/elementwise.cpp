// Elementwise and broadcast operators: arithmetic, activations, math functions.
#include "op_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

const bool registered = [] {
  register_binary("Add", [](Expr a, Expr b) { return a + b; }, "a + b, broadcast");
  register_binary("Sub", [](Expr a, Expr b) { return a - b; }, "a - b, broadcast");
  register_binary("Mul", [](Expr a, Expr b) { return a * b; }, "a * b, broadcast");
  register_binary("Div", [](Expr a, Expr b) { return a / b; }, "a / b, broadcast");
  register_unary("Relu", [](Expr x) { return max(x, make_zero(x.dtype())); }, "max(x, 0)");
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
