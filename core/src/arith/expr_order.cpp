// A total order on expressions. The simplifier sorts the terms of sums and
// the operands of commutative operations with it, so its choices decide what
// canonical forms look like: compound atoms sort before plain variables
// (i*n + j, not j + i*n) and variables sort by name (i + j).

#include <cstring>

#include "kiln/ir/variable_serial.h"
#include "simplify_internal.h"

namespace kiln::arith::detail {

namespace {
int cmp_int(int64_t a, int64_t b) { return a < b ? -1 : a > b ? 1 : 0; }

int cmp_dtype(DataType a, DataType b) {
  if (int c = cmp_int(static_cast<int>(a.code()), static_cast<int>(b.code()))) return c;
  if (int c = cmp_int(a.bits(), b.bits())) return c;
  return cmp_int(a.lanes(), b.lanes());
}

int cmp_ptr(const void* a, const void* b) { return a < b ? -1 : a > b ? 1 : 0; }

// Variables last, constants before them; otherwise the order of the node list.
int rank(IRNodeKind k) {
  if (k == IRNodeKind::Variable) return 1000;
  return static_cast<int>(k);
}

int cmp_exprs(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  if (int c = cmp_int(static_cast<int64_t>(a.size()), static_cast<int64_t>(b.size()))) return c;
  for (size_t i = 0; i < a.size(); ++i) {
    if (int c = expr_compare(a[i], b[i])) return c;
  }
  return 0;
}

int cmp_var(const Variable* a, const Variable* b) {
  if (a == b) return 0;
  if (int c = a->name.compare(b->name)) return c < 0 ? -1 : 1;
  if (int c = cmp_dtype(a->dtype, b->dtype)) return c;
  // Not the address: same-named loop variables (split twice) must sort alike in every lowering.
  if (int c = cmp_int(static_cast<int64_t>(variable_serial(a)), static_cast<int64_t>(variable_serial(b)))) return c;
  return cmp_ptr(a, b);
}

template <typename T>
int cmp_binary(const Expr& a, const Expr& b) {
  const T* x = a.as<T>();
  const T* y = b.as<T>();
  if (int c = expr_compare(x->a, y->a)) return c;
  return expr_compare(x->b, y->b);
}

int cmp_same_kind(const Expr& a, const Expr& b) {
  switch (a->kind) {
    case IRNodeKind::IntImm: return cmp_int(a.as<IntImm>()->value, b.as<IntImm>()->value);
    case IRNodeKind::FloatImm: {
      double x = a.as<FloatImm>()->value, y = b.as<FloatImm>()->value;
      // Compare bit patterns so NaN and -0.0 order deterministically.
      int64_t bx, by;
      std::memcpy(&bx, &x, sizeof bx);
      std::memcpy(&by, &y, sizeof by);
      return cmp_int(bx, by);
    }
    case IRNodeKind::StringImm: {
      int c = a.as<StringImm>()->value.compare(b.as<StringImm>()->value);
      return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    case IRNodeKind::Variable: return cmp_var(a.as<Variable>(), b.as<Variable>());
#define KILN_X(T) \
  case IRNodeKind::T: return cmp_binary<T>(a, b);
      KILN_X(Add) KILN_X(Sub) KILN_X(Mul) KILN_X(Div) KILN_X(Mod) KILN_X(FloorDiv) KILN_X(FloorMod) KILN_X(Min) KILN_X(Max)
      KILN_X(EQ) KILN_X(NE) KILN_X(LT) KILN_X(LE) KILN_X(GT) KILN_X(GE) KILN_X(And) KILN_X(Or)
#undef KILN_X
    case IRNodeKind::Not: return expr_compare(a.as<Not>()->a, b.as<Not>()->a);
    case IRNodeKind::Select: {
      const Select* x = a.as<Select>();
      const Select* y = b.as<Select>();
      if (int c = expr_compare(x->condition, y->condition)) return c;
      if (int c = expr_compare(x->true_value, y->true_value)) return c;
      return expr_compare(x->false_value, y->false_value);
    }
    case IRNodeKind::Cast: return expr_compare(a.as<Cast>()->value, b.as<Cast>()->value);
    case IRNodeKind::Call: {
      const Call* x = a.as<Call>();
      const Call* y = b.as<Call>();
      if (int c = cmp_int(static_cast<int>(x->op), static_cast<int>(y->op))) return c;
      return cmp_exprs(x->args, y->args);
    }
    case IRNodeKind::BufferLoad: {
      const BufferLoad* x = a.as<BufferLoad>();
      const BufferLoad* y = b.as<BufferLoad>();
      if (x->buffer.get() != y->buffer.get()) {
        if (int c = x->buffer->name.compare(y->buffer->name)) return c < 0 ? -1 : 1;
        return cmp_ptr(x->buffer.get(), y->buffer.get());
      }
      return cmp_exprs(x->indices, y->indices);
    }
    case IRNodeKind::TensorLoad: {
      const TensorLoad* x = a.as<TensorLoad>();
      const TensorLoad* y = b.as<TensorLoad>();
      if (x->producer.get() != y->producer.get()) {
        if (int c = x->producer->producer_name().compare(y->producer->producer_name())) return c < 0 ? -1 : 1;
        return cmp_ptr(x->producer.get(), y->producer.get());
      }
      return cmp_exprs(x->indices, y->indices);
    }
    case IRNodeKind::Ramp: {
      const Ramp* x = a.as<Ramp>();
      const Ramp* y = b.as<Ramp>();
      if (int c = expr_compare(x->base, y->base)) return c;
      return expr_compare(x->stride, y->stride);
    }
    case IRNodeKind::Broadcast: return expr_compare(a.as<Broadcast>()->value, b.as<Broadcast>()->value);
    case IRNodeKind::Let: {
      // Bound variables compare by identity: conservative (two equal Lets
      // over different variables only fail to merge).
      const Let* x = a.as<Let>();
      const Let* y = b.as<Let>();
      if (int c = cmp_var(x->var.get(), y->var.get())) return c;
      if (int c = expr_compare(x->value, y->value)) return c;
      return expr_compare(x->body, y->body);
    }
    case IRNodeKind::Reduce: return cmp_ptr(a.get(), b.get());
#define KILN_X(T) case IRNodeKind::T:
      KILN_FOR_EACH_STMT_NODE(KILN_X)
#undef KILN_X
      break;
  }
  KILN_UNREACHABLE() << "statement node compared as an expression";
  return 0;
}
}  // namespace

int expr_compare(const Expr& a, const Expr& b) {
  if (a.same_as(b)) return 0;
  if (!a.defined() || !b.defined()) return a.defined() ? 1 : -1;
  if (int c = cmp_int(rank(a->kind), rank(b->kind))) return c;
  if (int c = cmp_dtype(a.dtype(), b.dtype())) return c;
  return cmp_same_kind(a, b);
}

}  // namespace kiln::arith::detail
