// CUDA C expressions: types, literals, arithmetic, math intrinsics, loads.
#include <cmath>
#include <cstdio>

#include "codegen_cuda.h"
#include "kiln/support/error.h"

namespace kiln::codegen::cuda_detail {

std::string CodeGenCUDA::ctype(DataType t) {
  KILN_USER_CHECK(t.is_scalar()) << "cuda codegen of '" << name_ << "': vector type " << t.str() << "; GPU kernels are lowered without vectorize_loops";
  if (t.is_bfloat()) {
    uses_bf16_ = true;
    return "__nv_bfloat16";
  }
  if (t.is_float()) {
    if (t.bits() == 16) uses_fp16_ = true;
    return t.bits() == 16 ? "__half" : t.bits() == 32 ? "float" : "double";
  }
  if (t.is_bool()) return "bool";
  if (t.is_int() || t.is_uint()) {
    std::string u = t.is_uint() ? "unsigned " : "";
    switch (t.bits()) {
      case 8: return t.is_uint() ? "unsigned char" : "signed char";
      case 16: return u + "short";
      case 32: return u + "int";
      case 64: return u + "long long";
      default: break;
    }
  }
  KILN_USER_ERROR() << "cuda codegen of '" << name_ << "': no CUDA type for " << t.str();
  return "";
}

// Float literals keep every bit (%.17g / %.9g); inf and NaN come from their bit patterns.
std::string CodeGenCUDA::literal(const Expr& e) {
  DataType t = e.dtype();
  if (const IntImm* i = e.as<IntImm>()) {
    if (t.is_bool()) return i->value ? "true" : "false";
    if (t.bits() == 64) return std::to_string(i->value) + (t.is_uint() ? "ULL" : "LL");
    if (t.bits() == 32) return i->value == INT32_MIN ? "(-2147483647 - 1)" : std::to_string(i->value) + (t.is_uint() ? "u" : "");
    return "((" + ctype(t) + ")" + std::to_string(i->value) + ")";
  }
  double v = e.as<FloatImm>()->value;
  std::string f;
  if (std::isnan(v)) f = "__int_as_float(0x7fc00000)";
  else if (std::isinf(v)) f = v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  else {
    char buf[40];
    std::snprintf(buf, sizeof buf, t.bits() == 64 ? "%.17g" : "%.9g", v);
    f = buf;
    if (f.find_first_of(".e") == std::string::npos) f += ".0";
    if (t.bits() != 64) f += "f";
  }
  if (t.bits() == 64) return std::isfinite(v) ? f : "(double)" + f;
  if (t.bits() == 32) return f;
  return "((" + ctype(t) + ")" + f + ")";
}

std::string CodeGenCUDA::binary(const char* op, const Expr& a, const Expr& b) { return "(" + expr(a) + " " + op + " " + expr(b) + ")"; }

std::string CodeGenCUDA::min_max(bool is_min, const Expr& a, const Expr& b) {
  DataType t = a.dtype();
  // NaN propagates (fminf/fmaxf and __hmin/__hmax drop it), as on the CPU.
  if (t.is_float() && t.bits() == 16) return std::string(is_min ? "__hmin_nan(" : "__hmax_nan(") + expr(a) + ", " + expr(b) + ")";
  if (t.is_float()) return std::string(is_min ? "kiln_min_nan(" : "kiln_max_nan(") + expr(a) + ", " + expr(b) + ")";
  return std::string(is_min ? "min(" : "max(") + expr(a) + ", " + expr(b) + ")";
}

std::string CodeGenCUDA::access(const BufferNode* b, const Expr& index) {
  KILN_USER_CHECK(index.dtype().is_scalar()) << "cuda codegen of '" << name_ << "': vector access of '" << b->name << "'; GPU kernels are lowered without vectorize_loops";
  Expr i = index;
  if (auto plan = compact_.find(b->data.get()); plan != compact_.end()) {
    Expr thread_part;
    KILN_CHECK(pass::split_thread_part(index, thread_vars_, &thread_part, &i)) << "cuda codegen: local buffer '" << b->name << "' was planned for compaction but an index does not split";
    i = plan->second.rewrite(i);
  }
  return var_name(b->data.get()) + "[" + expr(i) + "]";
}

// Math in float for float32 (the f-suffixed functions, or the fast
// intrinsics), double for float64, and through float for half and bfloat16.
std::string CodeGenCUDA::call(const Call* op) {
  if (op->op == Intrinsic::IfThenElse) return "(" + expr(op->args[0]) + " ? " + expr(op->args[1]) + " : " + expr(op->args[2]) + ")";
  if (op->op == Intrinsic::Likely) return expr(op->args[0]);
  if (op->op == Intrinsic::ThreadAllreduce) {
    auto it = allreduce_values_.find(op);
    KILN_CHECK(it != allreduce_values_.end()) << "cuda codegen of '" << name_ << "': thread_allreduce outside a block-level store";
    return it->second;
  }
  KILN_USER_CHECK(op->op != Intrinsic::SyncThreads) << "cuda codegen of '" << name_ << "': sync_threads inside an expression";
  if (op->op == Intrinsic::PackBF16x2) {
    uses_bf16_ = true;
    return "((unsigned int)__bfloat16_as_ushort(__float2bfloat16_rn(" + expr(op->args[0]) + ")) | ((unsigned int)__bfloat16_as_ushort(__float2bfloat16_rn(" +
           expr(op->args[1]) + ")) << 16))";
  }
  if (op->op == Intrinsic::DotBF16x2) {
    // The halves as floats, lo*lo exact, then one rounding: the interpreter's order.
    std::string a = expr(op->args[0]), b = expr(op->args[1]);
    return "fmaf(__uint_as_float((" + a + ") & 0xFFFF0000u), __uint_as_float((" + b + ") & 0xFFFF0000u), __uint_as_float((" + a +
           ") << 16) * __uint_as_float((" + b + ") << 16))";
  }
  if (op->op == Intrinsic::DotI8x4) {
    // Byte by byte (dp4a takes no mixed signedness): the interpreter's sum.
    std::string a = expr(op->args[0]), b = expr(op->args[1]), r = "(";
    auto byte = [](const std::string& w, int j, bool is_signed) {
      std::string shifted = "((unsigned int)(" + w + ") >> " + std::to_string(8 * j) + ")";
      return is_signed ? "(int)(signed char)" + shifted : "(int)(" + shifted + " & 255u)";
    };
    for (int j = 0; j < 4; ++j) r += (j ? " + " : "") + byte(a, j, op->args[0].dtype().is_int()) + " * " + byte(b, j, op->args[1].dtype().is_int());
    return r + ")";
  }
  DataType t = op->dtype;
  if (op->op == Intrinsic::Abs && !t.is_float()) return (t.bits() == 64 ? "llabs(" : "abs(") + expr(op->args[0]) + ")";
  bool dbl = t.bits() == 64, narrow = t.bits() == 16;
  std::string x = narrow ? "(float)" + expr(op->args[0]) : expr(op->args[0]);
  std::string y = op->args.size() > 1 ? (narrow ? "(float)" + expr(op->args[1]) : expr(op->args[1])) : "";
  bool fast = target_.fast_math && !dbl;
  auto fn = [&](const char* name, const char* fast_name = nullptr) { return std::string(fast && fast_name ? fast_name : name) + (dbl ? "" : "f"); };
  std::string r;
  switch (op->op) {
    case Intrinsic::Exp: r = fn("exp", "__exp") + "(" + x + ")"; break;
    case Intrinsic::Log: r = fn("log", "__log") + "(" + x + ")"; break;
    case Intrinsic::Sqrt: r = fn("sqrt") + "(" + x + ")"; break;
    case Intrinsic::Rsqrt: r = fn("rsqrt") + "(" + x + ")"; break;
    case Intrinsic::Tanh: r = fn("tanh") + "(" + x + ")"; break;
    case Intrinsic::Erf: r = fn("erf") + "(" + x + ")"; break;
    case Intrinsic::Pow: r = fn("pow", "__pow") + "(" + x + ", " + y + ")"; break;
    case Intrinsic::Fabs:
    case Intrinsic::Abs: r = fn("fabs") + "(" + x + ")"; break;
    case Intrinsic::Floor: r = fn("floor") + "(" + x + ")"; break;
    case Intrinsic::Ceil: r = fn("ceil") + "(" + x + ")"; break;
    case Intrinsic::Round: r = fn("rint") + "(" + x + ")"; break;  // half to even, like numpy
    case Intrinsic::Trunc: r = fn("trunc") + "(" + x + ")"; break;
    case Intrinsic::Sin: r = fn("sin", "__sin") + "(" + x + ")"; break;
    case Intrinsic::Cos: r = fn("cos", "__cos") + "(" + x + ")"; break;
    case Intrinsic::Sigmoid: r = dbl ? "(1.0 / (1.0 + exp(-" + x + ")))" : "(1.0f / (1.0f + " + fn("exp", "__exp") + "(-" + x + ")))"; break;
    default: KILN_USER_ERROR() << "cuda codegen of '" << name_ << "': no CUDA code for intrinsic " << intrinsic_name(op->op);
  }
  return narrow ? "((" + ctype(t) + ")" + r + ")" : r;
}

std::string CodeGenCUDA::expr(const Expr& e) {
  KILN_USER_CHECK(e.dtype().is_scalar() || e.as<StringImm>()) << "cuda codegen of '" << name_ << "': vector expression of type " << e.dtype().str()
                                                              << "; GPU kernels are lowered without vectorize_loops";
  const BaseExprNode* n = e.get();
  switch (n->kind) {
    case IRNodeKind::IntImm:
    case IRNodeKind::FloatImm: return literal(e);
    case IRNodeKind::Variable: return var_name(static_cast<const Variable*>(n));
    case IRNodeKind::Add: return binary("+", e.as<Add>()->a, e.as<Add>()->b);
    case IRNodeKind::Sub: return binary("-", e.as<Sub>()->a, e.as<Sub>()->b);
    case IRNodeKind::Mul: return binary("*", e.as<Mul>()->a, e.as<Mul>()->b);
    case IRNodeKind::Div: return binary("/", e.as<Div>()->a, e.as<Div>()->b);
    case IRNodeKind::Mod: {
      const Mod* op = e.as<Mod>();
      if (op->dtype.is_float()) return std::string(op->dtype.bits() == 64 ? "fmod(" : "fmodf(") + expr(op->a) + ", " + expr(op->b) + ")";
      return binary("%", op->a, op->b);
    }
    case IRNodeKind::FloorDiv: {
      const FloorDiv* op = e.as<FloorDiv>();
      if (op->dtype.is_float()) return std::string(op->dtype.bits() == 64 ? "floor(" : "floorf(") + binary("/", op->a, op->b) + ")";
      return "kiln_floordiv<" + ctype(op->dtype) + ">(" + expr(op->a) + ", " + expr(op->b) + ")";
    }
    case IRNodeKind::FloorMod: {
      const FloorMod* op = e.as<FloorMod>();
      KILN_USER_CHECK(!op->dtype.is_float()) << "cuda codegen of '" << name_ << "': floor modulo of floats";
      return "kiln_floormod<" + ctype(op->dtype) + ">(" + expr(op->a) + ", " + expr(op->b) + ")";
    }
    case IRNodeKind::Min: return min_max(true, e.as<Min>()->a, e.as<Min>()->b);
    case IRNodeKind::Max: return min_max(false, e.as<Max>()->a, e.as<Max>()->b);
    case IRNodeKind::EQ: return binary("==", e.as<EQ>()->a, e.as<EQ>()->b);
    case IRNodeKind::NE: return binary("!=", e.as<NE>()->a, e.as<NE>()->b);
    case IRNodeKind::LT: return binary("<", e.as<LT>()->a, e.as<LT>()->b);
    case IRNodeKind::LE: return binary("<=", e.as<LE>()->a, e.as<LE>()->b);
    case IRNodeKind::GT: return binary(">", e.as<GT>()->a, e.as<GT>()->b);
    case IRNodeKind::GE: return binary(">=", e.as<GE>()->a, e.as<GE>()->b);
    case IRNodeKind::And: return binary("&&", e.as<And>()->a, e.as<And>()->b);
    case IRNodeKind::Or: return binary("||", e.as<Or>()->a, e.as<Or>()->b);
    case IRNodeKind::Not: return "(!" + expr(e.as<Not>()->a) + ")";
    case IRNodeKind::Select: {
      const Select* op = e.as<Select>();
      return "(" + expr(op->condition) + " ? " + expr(op->true_value) + " : " + expr(op->false_value) + ")";
    }
    case IRNodeKind::Cast: {
      const Cast* op = e.as<Cast>();
      // half/bfloat16 convert through float: their constructors from integers are not all defined.
      DataType from = op->value.dtype();
      bool via_float = (op->dtype.bits() == 16 && op->dtype.is_float()) != (from.bits() == 16 && from.is_float());
      std::string v = via_float ? "(float)" + expr(op->value) : expr(op->value);
      return "((" + ctype(op->dtype) + ")" + v + ")";
    }
    case IRNodeKind::Call: return call(e.as<Call>());
    case IRNodeKind::BufferLoad: {
      const BufferLoad* op = e.as<BufferLoad>();
      KILN_USER_CHECK(op->indices.size() == 1) << "cuda codegen of '" << name_ << "': a load of '" << op->buffer->name << "' is not flat; run storage_flatten";
      return access(op->buffer.get(), op->indices[0]);
    }
    case IRNodeKind::Let: {
      const Let* op = e.as<Let>();
      // A lambda gives the let a scope inside an expression.
      std::string v = ident(op->var.name(), op->var.get());
      return "([&]() { const " + ctype(op->var.dtype()) + " " + v + " = " + expr(op->value) + "; return " + expr(op->body) + "; }())";
    }
    default: break;
  }
  KILN_USER_ERROR() << "cuda codegen of '" << name_ << "': cannot express " << ir_node_kind_name(n->kind) << " in CUDA C (is the function lowered?)";
  return "";
}

}  // namespace kiln::codegen::cuda_detail
