// Add, Sub, Mul: scalar integers go through the canonical linear form;
// floats only fold constants and drop x + 0, x - 0, x * 1; vectors combine
// Ramp and Broadcast lane-wise.

#include "simplify_internal.h"

namespace kiln::arith::detail {

namespace {
// Folding in double then rounding is exact for float32 and float64 +, -, *, /;
// half types would need their own rounding, so they are left alone.
bool foldable_float(DataType t) { return t.is_float() && !t.is_bfloat() && (t.bits() == 32 || t.bits() == 64); }

bool is_float_const(const Expr& e, double v) {
  const FloatImm* f = e.as<FloatImm>();
  return f && f->value == v;
}

Expr make_ramp(const Expr& base, const Expr& stride, int lanes) {
  if (is_zero(stride)) return Broadcast::make(base, lanes);
  return Ramp::make(base, stride, lanes);
}
}  // namespace

Expr Simplifier::simplify_add_sub(IRNodeKind kind, const Expr& a, const Expr& b) {
  DataType t = a.dtype();
  bool add = kind == IRNodeKind::Add;
  if (t.is_integer() && t.is_scalar()) {
    LinearForm f;
    f.dtype = t;
    linear_accumulate(&f, a, 1);
    linear_accumulate(&f, b, add ? 1 : -1);
    linear_normalize(&f);
    return linear_to_expr(f);
  }
  if (t.is_float() && t.is_scalar()) {
    const FloatImm* x = a.as<FloatImm>();
    const FloatImm* y = b.as<FloatImm>();
    if (x && y && foldable_float(t)) return FloatImm::make(t, add ? x->value + y->value : x->value - y->value);
    if (is_float_const(b, 0)) return a;
    if (add && is_float_const(a, 0)) return b;
    return make_binary(kind, a, b);
  }
  if (t.is_vector()) {
    const Broadcast* ba = a.as<Broadcast>();
    const Broadcast* bb = b.as<Broadcast>();
    const Ramp* ra = a.as<Ramp>();
    const Ramp* rb = b.as<Ramp>();
    int lanes = t.lanes();
    if (ba && bb) return Broadcast::make(simplify_add_sub(kind, ba->value, bb->value), lanes);
    if (ra && bb) return make_ramp(simplify_add_sub(kind, ra->base, bb->value), ra->stride, lanes);
    if (ba && rb) {
      Expr stride = add ? rb->stride : simplify_add_sub(IRNodeKind::Sub, make_zero(rb->stride.dtype()), rb->stride);
      return make_ramp(simplify_add_sub(kind, ba->value, rb->base), stride, lanes);
    }
    if (ra && rb) return make_ramp(simplify_add_sub(kind, ra->base, rb->base), simplify_add_sub(kind, ra->stride, rb->stride), lanes);
    if (bb && (is_zero(bb->value) || is_float_const(bb->value, 0))) return a;
    if (add && ba && (is_zero(ba->value) || is_float_const(ba->value, 0))) return b;
  }
  return make_binary(kind, a, b);
}

Expr Simplifier::simplify_mul(const Expr& a, const Expr& b) {
  DataType t = a.dtype();
  if (t.is_integer() && t.is_scalar()) {
    if (a.as<IntImm>() || b.as<IntImm>()) {
      LinearForm f;
      f.dtype = t;
      linear_accumulate(&f, Mul::make(a, b), 1);
      linear_normalize(&f);
      return linear_to_expr(f);
    }
    // A product of two scaled atoms: pull the scales out, (x*2)*(y*3) -> (x*y)*6,
    // and order the operands so x*y and y*x are one atom.
    LinearForm la = linear_form(a), lb = linear_form(b);
    Expr x = a, y = b;
    int64_t k = 1;
    if (la.terms.size() == 1 && la.constant == 0 && lb.terms.size() == 1 && lb.constant == 0) {
      x = la.terms[0].atom;
      y = lb.terms[0].atom;
      k = wrap_int(t, static_cast<int64_t>(static_cast<uint64_t>(la.terms[0].coeff) * static_cast<uint64_t>(lb.terms[0].coeff)));
    }
    if (expr_compare(y, x) < 0) std::swap(x, y);
    LinearForm f;
    f.dtype = t;
    f.terms.push_back({Mul::make(x, y), k});
    linear_normalize(&f);  // k may have wrapped to 0
    return linear_to_expr(f);
  }
  if (t.is_float() && t.is_scalar()) {
    const FloatImm* x = a.as<FloatImm>();
    const FloatImm* y = b.as<FloatImm>();
    if (x && y && foldable_float(t)) return FloatImm::make(t, x->value * y->value);
    if (is_float_const(b, 1)) return a;
    if (is_float_const(a, 1)) return b;
    return Mul::make(a, b);
  }
  if (t.is_vector()) {
    const Broadcast* ba = a.as<Broadcast>();
    const Broadcast* bb = b.as<Broadcast>();
    const Ramp* ra = a.as<Ramp>();
    const Ramp* rb = b.as<Ramp>();
    if (ba && bb) return Broadcast::make(simplify_mul(ba->value, bb->value), t.lanes());
    if (ra && bb) return make_ramp(simplify_mul(ra->base, bb->value), simplify_mul(ra->stride, bb->value), t.lanes());
    if (ba && rb) return make_ramp(simplify_mul(ba->value, rb->base), simplify_mul(ba->value, rb->stride), t.lanes());
    if (bb && (is_one(bb->value) || is_float_const(bb->value, 1))) return a;
    if (ba && (is_one(ba->value) || is_float_const(ba->value, 1))) return b;
    if (t.is_integer() && ((bb && is_zero(bb->value)) || (ba && is_zero(ba->value)))) return make_zero(t);
  }
  return Mul::make(a, b);
}

Expr Simplifier::visit(const Add* op) { return simplify_add_sub(IRNodeKind::Add, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const Sub* op) { return simplify_add_sub(IRNodeKind::Sub, mutate(op->a), mutate(op->b)); }
Expr Simplifier::visit(const Mul* op) { return simplify_mul(mutate(op->a), mutate(op->b)); }

}  // namespace kiln::arith::detail
