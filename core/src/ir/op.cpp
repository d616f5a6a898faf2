#include "kiln/ir/op.h"
#include <algorithm>

#include "kiln/support/error.h"

namespace kiln {

static bool is_imm(const Expr& e) { return e.as<IntImm>() || e.as<FloatImm>(); }

Expr cast(DataType t, Expr e) {
  if (e.dtype() == t) return e;
  if (t.is_vector() && e.dtype().is_scalar()) {
    // Cast the scalar first, then broadcast: cheaper and keeps immediates immediate.
    return Broadcast::make(cast(t.element_of(), std::move(e)), t.lanes());
  }
  if (const IntImm* i = e.as<IntImm>(); i && t.is_scalar()) return make_const(t, static_cast<double>(i->value));
  if (const FloatImm* f = e.as<FloatImm>(); f && t.is_scalar()) return make_const(t, f->value);
  KILN_USER_CHECK(t.lanes() == e.dtype().lanes()) << "cannot cast " << e.dtype().str() << " to " << t.str() << ": lane counts differ";
  return Cast::make(t, std::move(e));
}

// The type both operands take (rules in op.h), before lanes are matched.
static DataType promoted_type(const Expr& a, const Expr& b) {
  DataType ta = a.dtype().element_of(), tb = b.dtype().element_of();
  if (ta == tb) return ta;
  bool ia = is_imm(a), ib = is_imm(b);
  if (ia != ib) {
    const Expr& imm = ia ? a : b;
    DataType other = ia ? tb : ta;
    // A float immediate next to an integer expression makes the expression float32.
    if (imm.as<FloatImm>() && !other.is_float()) return DataType::Float(32);
    return other;
  }
  if (ta.is_float() != tb.is_float()) return ta.is_float() ? ta : tb;
  if (ta.is_bool()) return tb;
  if (tb.is_bool()) return ta;
  if (ta.bits() != tb.bits()) return ta.bits() > tb.bits() ? ta : tb;
  return ta.is_int() ? ta : tb;
}

void binary_promote(Expr* a, Expr* b) {
  KILN_USER_CHECK(a->defined() && b->defined()) << "operation on an undefined expression";
  int la = a->dtype().lanes(), lb = b->dtype().lanes();
  KILN_USER_CHECK(la == lb || la == 1 || lb == 1) << "cannot combine vectors of " << la << " and " << lb << " lanes (" << a->dtype().str() << ", " << b->dtype().str() << ")";
  DataType t = promoted_type(*a, *b);
  int lanes = std::max(la, lb);
  *a = cast(t.with_lanes(lanes), *a);
  *b = cast(t.with_lanes(lanes), *b);
}

template <typename T>
static Expr arith(Expr a, Expr b) {
  binary_promote(&a, &b);
  KILN_USER_CHECK(!a.dtype().is_bool()) << ir_node_kind_name(T::kKind) << " of bool values; cast them to an integer type first";
  return T::make(std::move(a), std::move(b));
}

template <typename T>
static Expr compare(Expr a, Expr b) {
  binary_promote(&a, &b);
  return T::make(std::move(a), std::move(b));
}

template <typename T>
static Expr int_only(Expr a, Expr b, const char* what) {
  binary_promote(&a, &b);
  KILN_USER_CHECK(a.dtype().is_integer()) << what << " needs integer operands, got " << a.dtype().str() << "; use / for float division";
  return T::make(std::move(a), std::move(b));
}

Expr operator+(Expr a, Expr b) { return arith<Add>(std::move(a), std::move(b)); }
Expr operator-(Expr a, Expr b) { return arith<Sub>(std::move(a), std::move(b)); }
Expr operator*(Expr a, Expr b) { return arith<Mul>(std::move(a), std::move(b)); }
Expr operator/(Expr a, Expr b) { return arith<Div>(std::move(a), std::move(b)); }
Expr operator%(Expr a, Expr b) { return int_only<Mod>(std::move(a), std::move(b), "%"); }
Expr operator-(Expr a) {
  if (const IntImm* i = a.as<IntImm>()) return IntImm::make(a.dtype(), -i->value);
  if (const FloatImm* f = a.as<FloatImm>()) return FloatImm::make(a.dtype(), -f->value);
  Expr zero = make_zero(a.dtype());
  return Sub::make(zero, std::move(a));
}
Expr operator==(Expr a, Expr b) { return compare<EQ>(std::move(a), std::move(b)); }
Expr operator!=(Expr a, Expr b) { return compare<NE>(std::move(a), std::move(b)); }
Expr operator<(Expr a, Expr b) { return compare<LT>(std::move(a), std::move(b)); }
Expr operator<=(Expr a, Expr b) { return compare<LE>(std::move(a), std::move(b)); }
Expr operator>(Expr a, Expr b) { return compare<GT>(std::move(a), std::move(b)); }
Expr operator>=(Expr a, Expr b) { return compare<GE>(std::move(a), std::move(b)); }

static Expr as_bool(Expr e, const char* what) {
  KILN_USER_CHECK(e.defined()) << what << " of an undefined expression";
  if (e.dtype().is_bool()) return e;
  return NE::make(e, make_zero(e.dtype()));
}
Expr operator&&(Expr a, Expr b) {
  a = as_bool(std::move(a), "&&");
  b = as_bool(std::move(b), "&&");
  binary_promote(&a, &b);
  return And::make(std::move(a), std::move(b));
}
Expr operator||(Expr a, Expr b) {
  a = as_bool(std::move(a), "||");
  b = as_bool(std::move(b), "||");
  binary_promote(&a, &b);
  return Or::make(std::move(a), std::move(b));
}
Expr operator!(Expr a) { return Not::make(as_bool(std::move(a), "!")); }

Expr floordiv(Expr a, Expr b) { return int_only<FloorDiv>(std::move(a), std::move(b), "floordiv (//)"); }
Expr floormod(Expr a, Expr b) { return int_only<FloorMod>(std::move(a), std::move(b), "floormod (%)"); }
Expr truncdiv(Expr a, Expr b) { return int_only<Div>(std::move(a), std::move(b), "truncdiv"); }
Expr truncmod(Expr a, Expr b) { return int_only<Mod>(std::move(a), std::move(b), "truncmod"); }
Expr min(Expr a, Expr b) { return compare<Min>(std::move(a), std::move(b)); }
Expr max(Expr a, Expr b) { return compare<Max>(std::move(a), std::move(b)); }

Expr select(Expr cond, Expr t, Expr f) {
  cond = as_bool(std::move(cond), "select");
  binary_promote(&t, &f);
  if (cond.dtype().lanes() != t.dtype().lanes() && cond.dtype().lanes() == 1) {
    // A scalar condition selects whole vectors.
  } else {
    KILN_USER_CHECK(cond.dtype().lanes() == t.dtype().lanes()) << "select condition has " << cond.dtype().lanes() << " lanes, values have " << t.dtype().lanes();
  }
  return Select::make(std::move(cond), std::move(t), std::move(f));
}

Expr if_then_else(Expr cond, Expr t, Expr f) {
  cond = as_bool(std::move(cond), "if_then_else");
  KILN_USER_CHECK(cond.dtype().is_scalar()) << "if_then_else needs a scalar condition";
  binary_promote(&t, &f);
  DataType ty = t.dtype();
  return Call::make(ty, Intrinsic::IfThenElse, {std::move(cond), std::move(t), std::move(f)});
}

Expr likely(Expr cond) {
  cond = as_bool(std::move(cond), "likely");
  DataType ty = cond.dtype();
  return Call::make(ty, Intrinsic::Likely, {std::move(cond)});
}

Expr pack_bf16x2(Expr lo, Expr hi) {
  int lanes = std::max(lo.dtype().lanes(), hi.dtype().lanes());
  DataType f = DataType::Float(32, lanes);
  if (lo.dtype() != f) lo = cast(f, lo);
  if (hi.dtype() != f) hi = cast(f, hi);
  return Call::make(DataType::UInt(32, lanes), Intrinsic::PackBF16x2, {std::move(lo), std::move(hi)});
}

Expr dot_bf16x2(Expr a, Expr b) {
  KILN_USER_CHECK(a.dtype().is_uint() && a.dtype().bits() == 32 && a.dtype() == b.dtype())
      << "dot_bf16x2 takes two uint32 values of packed bfloat16 pairs (made by pack_bf16x2), got " << a.dtype().str() << " and " << b.dtype().str();
  DataType t = DataType::Float(32, a.dtype().lanes());
  return Call::make(t, Intrinsic::DotBF16x2, {std::move(a), std::move(b)});
}

Expr dot_i8x4(Expr a, Expr b) {
  auto word = [](DataType d) { return (d.is_int() || d.is_uint()) && d.bits() == 32; };
  KILN_USER_CHECK(word(a.dtype()) && word(b.dtype()))
      << "dot_i8x4 takes two int32 (signed bytes) or uint32 (unsigned bytes) words of four packed bytes, got " << a.dtype().str() << " and " << b.dtype().str();
  int lanes = std::max(a.dtype().lanes(), b.dtype().lanes());
  if (a.dtype().lanes() != lanes) a = Broadcast::make(a, lanes);
  if (b.dtype().lanes() != lanes) b = Broadcast::make(b, lanes);
  return Call::make(DataType::Int(32, lanes), Intrinsic::DotI8x4, {std::move(a), std::move(b)});
}

Expr call_math(Intrinsic op, std::vector<Expr> args) {
  KILN_USER_CHECK(!args.empty()) << intrinsic_name(op) << " without arguments";
  if (args.size() == 2) binary_promote(&args[0], &args[1]);
  DataType t = args[0].dtype();
  bool int_ok = op == Intrinsic::Abs;
  if (!t.is_float() && !int_ok) {
    t = DataType::Float(32, t.lanes());
    for (Expr& a : args) a = cast(t, a);
  }
  return Call::make(t, op, std::move(args));
}

Expr exp(Expr x) { return call_math(Intrinsic::Exp, {std::move(x)}); }
Expr log(Expr x) { return call_math(Intrinsic::Log, {std::move(x)}); }
Expr sqrt(Expr x) { return call_math(Intrinsic::Sqrt, {std::move(x)}); }
Expr rsqrt(Expr x) { return call_math(Intrinsic::Rsqrt, {std::move(x)}); }
Expr tanh(Expr x) { return call_math(Intrinsic::Tanh, {std::move(x)}); }
Expr erf(Expr x) { return call_math(Intrinsic::Erf, {std::move(x)}); }
Expr sigmoid(Expr x) { return call_math(Intrinsic::Sigmoid, {std::move(x)}); }
Expr fabs(Expr x) { return call_math(Intrinsic::Fabs, {std::move(x)}); }
Expr abs(Expr x) { return call_math(Intrinsic::Abs, {std::move(x)}); }
Expr floor(Expr x) { return call_math(Intrinsic::Floor, {std::move(x)}); }
Expr ceil(Expr x) { return call_math(Intrinsic::Ceil, {std::move(x)}); }
Expr round(Expr x) { return call_math(Intrinsic::Round, {std::move(x)}); }
Expr trunc(Expr x) { return call_math(Intrinsic::Trunc, {std::move(x)}); }
Expr sin(Expr x) { return call_math(Intrinsic::Sin, {std::move(x)}); }
Expr cos(Expr x) { return call_math(Intrinsic::Cos, {std::move(x)}); }
Expr pow(Expr x, Expr y) { return call_math(Intrinsic::Pow, {std::move(x), std::move(y)}); }

}  // namespace kiln
