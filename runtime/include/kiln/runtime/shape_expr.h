/** \file
 * ShapeExpr: a buffer dimension (or stride) as a kernel declares it, in the
 * kernel metadata: a constant, one of the kernel's scalar parameters (a shape
 * variable such as `n`), or integer arithmetic on them (`n + 1`, `2 * n`).
 *
 * The runtime binds shape variables from the arrays of each call and
 * evaluates the other dimensions to check them (see arg_binder.h); it needs
 * no compiler for that, so the expressions are this small closed set rather
 * than IR. Arithmetic is on int64 with the IR's meaning: Div/Mod truncate,
 * FloorDiv/FloorMod round toward negative infinity.
 */
#ifndef KILN_RUNTIME_SHAPE_EXPR_H
#define KILN_RUNTIME_SHAPE_EXPR_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct ShapeExpr {
  enum class Op : uint8_t { Const, Param, Add, Sub, Mul, Div, Mod, FloorDiv, FloorMod, Min, Max };

  Op op = Op::Const;
  /** Const: the value. Param: the index of the scalar parameter in the kernel's parameter list. */
  int64_t value = 0;
  /** The two operands of an arithmetic op; empty for Const and Param. */
  std::vector<ShapeExpr> operands;

  static ShapeExpr constant(int64_t v) { return {Op::Const, v, {}}; }
  static ShapeExpr param(int64_t index) { return {Op::Param, index, {}}; }
  static ShapeExpr binary(Op op, ShapeExpr a, ShapeExpr b);

  bool is_const() const { return op == Op::Const; }
  bool is_param() const { return op == Op::Param; }

  /**
   * The value, given each parameter's value by index (values[0, count));
   * nullopt when a division by zero or an int64 overflow makes it meaningless.
   */
  std::optional<int64_t> eval(const int64_t* values, size_t count) const;

  /** Calls f(index) for every parameter the expression reads. */
  template <typename F>
  void for_each_param(F&& f) const {
    if (op == Op::Param) f(value);
    for (const ShapeExpr& e : operands) e.for_each_param(f);
  }

  /** Readable form, parameters by name: "n + 1", "(n + 3) // 4". */
  std::string str(const std::vector<std::string>& param_names) const;

  /** "add", "floordiv", ...: the op's name in the metadata JSON; parse_op reverses it (nullopt if unknown). */
  static const char* op_name(Op op);
  static std::optional<Op> parse_op(const std::string& name);

  bool operator==(const ShapeExpr& o) const = default;
};

}  // namespace kiln

#endif  // KILN_RUNTIME_SHAPE_EXPR_H
