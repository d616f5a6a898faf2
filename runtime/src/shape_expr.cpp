#include "kiln/runtime/shape_expr.h"

#include <algorithm>

#include "kiln/support/error.h"

namespace kiln {

namespace {

struct OpInfo {
  ShapeExpr::Op op;
  const char* name;    // in the metadata JSON
  const char* symbol;  // in messages
};

constexpr OpInfo kOps[] = {
    {ShapeExpr::Op::Add, "add", "+"},           {ShapeExpr::Op::Sub, "sub", "-"},
    {ShapeExpr::Op::Mul, "mul", "*"},           {ShapeExpr::Op::Div, "div", "/"},
    {ShapeExpr::Op::Mod, "mod", "%"},           {ShapeExpr::Op::FloorDiv, "floordiv", "//"},
    {ShapeExpr::Op::FloorMod, "floormod", nullptr}, {ShapeExpr::Op::Min, "min", nullptr},
    {ShapeExpr::Op::Max, "max", nullptr},
};

const OpInfo* find_op(ShapeExpr::Op op) {
  for (const OpInfo& o : kOps)
    if (o.op == op) return &o;
  return nullptr;
}

std::optional<int64_t> apply(ShapeExpr::Op op, int64_t a, int64_t b) {
  using Op = ShapeExpr::Op;
  int64_t r = 0;
  switch (op) {
    case Op::Add: return __builtin_add_overflow(a, b, &r) ? std::nullopt : std::optional(r);
    case Op::Sub: return __builtin_sub_overflow(a, b, &r) ? std::nullopt : std::optional(r);
    case Op::Mul: return __builtin_mul_overflow(a, b, &r) ? std::nullopt : std::optional(r);
    case Op::Min: return std::min(a, b);
    case Op::Max: return std::max(a, b);
    default: break;
  }
  // Division: by zero, or INT64_MIN / -1, has no value.
  if (b == 0 || (a == INT64_MIN && b == -1)) return std::nullopt;
  int64_t q = a / b, m = a % b;
  bool floor_adjust = m != 0 && ((m < 0) != (b < 0));
  switch (op) {
    case Op::Div: return q;
    case Op::Mod: return m;
    case Op::FloorDiv: return floor_adjust ? q - 1 : q;
    case Op::FloorMod: return floor_adjust ? m + b : m;
    default: return std::nullopt;
  }
}

}  // namespace

ShapeExpr ShapeExpr::binary(Op op, ShapeExpr a, ShapeExpr b) {
  KILN_CHECK(find_op(op)) << "ShapeExpr::binary: op " << int(op) << " is not a binary op";
  ShapeExpr e{op, 0, {}};
  e.operands.push_back(std::move(a));
  e.operands.push_back(std::move(b));
  return e;
}

std::optional<int64_t> ShapeExpr::eval(const int64_t* values, size_t count) const {
  if (op == Op::Const) return value;
  if (op == Op::Param) {
    KILN_CHECK(value >= 0 && static_cast<size_t>(value) < count) << "ShapeExpr: parameter index out of range";
    return values[value];
  }
  KILN_CHECK(operands.size() == 2) << "ShapeExpr: " << op_name(op) << " needs two operands";
  std::optional<int64_t> a = operands[0].eval(values, count), b = operands[1].eval(values, count);
  if (!a || !b) return std::nullopt;
  return apply(op, *a, *b);
}

std::string ShapeExpr::str(const std::vector<std::string>& names) const {
  if (op == Op::Const) return std::to_string(value);
  if (op == Op::Param) {
    return value >= 0 && static_cast<size_t>(value) < names.size() ? names[value] : "$" + std::to_string(value);
  }
  const OpInfo* o = find_op(op);
  auto operand = [&](const ShapeExpr& e) {
    std::string s = e.str(names);
    return e.operands.empty() || !find_op(e.op)->symbol ? s : "(" + s + ")";
  };
  if (!o || operands.size() != 2) return "?";
  if (!o->symbol) return std::string(o->name) + "(" + operands[0].str(names) + ", " + operands[1].str(names) + ")";
  return operand(operands[0]) + " " + o->symbol + " " + operand(operands[1]);
}

const char* ShapeExpr::op_name(Op op) {
  if (op == Op::Const) return "const";
  if (op == Op::Param) return "param";
  const OpInfo* o = find_op(op);
  return o ? o->name : "?";
}

std::optional<ShapeExpr::Op> ShapeExpr::parse_op(const std::string& name) {
  for (const OpInfo& o : kOps)
    if (name == o.name) return o.op;
  return std::nullopt;
}

}  // namespace kiln
