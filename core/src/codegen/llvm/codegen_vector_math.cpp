// Math intrinsics. float32 exp, log, tanh, erf, sigmoid, sin, cos and pow are
// polynomials emitted inline, so a vector stays a vector (LLVM would
// otherwise call libm once per lane) and scalar and vector code agree bit for
// bit. float64 calls libm per lane; 16-bit floats compute in float32.
//
// Accuracy (float32, measured against double-precision libm):
//   exp     rel 1e-7 (Cephes expf polynomial, 2^k scaled in two steps so the
//           result overflows to inf and underflows gradually through denormals)
//   log     rel 1e-7 (Cephes logf: exponent extraction + degree-9 polynomial)
//   tanh    rel 2e-7 (odd polynomial below 0.625, else 1 - 2/(exp(2|x|) + 1))
//   sigmoid rel 2e-7 (e = exp(-|x|): 1/(1+e) or e/(1+e), no overflow; 0 below -87.5)
//   erf     abs 2e-7 (our own fits: x*P(x^2) below 1.5, P(|x| - 2.7) up to 3.92, then 1)
//   sin/cos abs 1e-7 (argument reduced by pi/2 in double, Cephes polynomials)
//   pow     rel 2e-7 (log in double, then the exp above)
#include <llvm/IR/Intrinsics.h>

#include <cmath>

#include "codegen_llvm.h"
#include "kiln/support/error.h"

namespace kiln::codegen {

// The type `like` has, with its element replaced by `elem` (lanes kept).
static llvm::Type* with_element(llvm::Type* like, llvm::Type* elem) {
  if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(like)) return llvm::FixedVectorType::get(elem, vt->getNumElements());
  return elem;
}

static llvm::Constant* fconst(llvm::Value* like, double v) { return llvm::ConstantFP::get(like->getType(), v); }

llvm::Value* CodeGenLLVM::call_intrinsic(llvm::Intrinsic::ID id, const std::vector<llvm::Value*>& args) {
  return builder_->CreateIntrinsic(id, {args[0]->getType()}, args);
}

llvm::Value* CodeGenLLVM::horner(llvm::Value* x, const std::vector<double>& c) {
  llvm::Value* p = fconst(x, c[0]);
  for (size_t i = 1; i < c.size(); ++i) p = call_intrinsic(llvm::Intrinsic::fmuladd, {p, x, fconst(x, c[i])});
  return p;
}

llvm::Value* CodeGenLLVM::call_libm_per_lane(const char* name, const std::vector<llvm::Value*>& args) {
  llvm::Type* d = builder_->getDoubleTy();
  std::vector<llvm::Type*> params(args.size(), d);
  llvm::FunctionCallee fn = module_->getOrInsertFunction(name, llvm::FunctionType::get(d, params, false));
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(args[0]->getType());
  if (!vt) return builder_->CreateCall(fn, args);
  llvm::Value* out = llvm::PoisonValue::get(vt);
  for (unsigned i = 0; i < vt->getNumElements(); ++i) {
    std::vector<llvm::Value*> lane;
    for (llvm::Value* a : args) lane.push_back(builder_->CreateExtractElement(a, i));
    out = builder_->CreateInsertElement(out, builder_->CreateCall(fn, lane), i);
  }
  return out;
}

// Functions that are one LLVM intrinsic at every width; nullptr for the rest.
static llvm::Intrinsic::ID simple_intrinsic(Intrinsic fn) {
  switch (fn) {
    case Intrinsic::Sqrt: return llvm::Intrinsic::sqrt;
    case Intrinsic::Fabs:
    case Intrinsic::Abs: return llvm::Intrinsic::fabs;
    case Intrinsic::Floor: return llvm::Intrinsic::floor;
    case Intrinsic::Ceil: return llvm::Intrinsic::ceil;
    case Intrinsic::Trunc: return llvm::Intrinsic::trunc;
    // Half to even, as numpy and the interpreter round.
    case Intrinsic::Round: return llvm::Intrinsic::roundeven;
    default: return llvm::Intrinsic::not_intrinsic;
  }
}

llvm::Value* CodeGenLLVM::emit_math(const Call* op) {
  DataType t = op->dtype;
  std::vector<llvm::Value*> args;
  for (const Expr& a : op->args) args.push_back(codegen(a));
  if (op->op == Intrinsic::Abs && !t.is_float()) {
    if (!t.is_int()) return args[0];
    return builder_->CreateIntrinsic(llvm::Intrinsic::abs, {args[0]->getType()}, {args[0], builder_->getFalse()});
  }
  KILN_USER_CHECK(t.is_float()) << intrinsic_name(op->op) << " of " << t.str() << ": math functions take float arguments (cast first)";
  if (t.bits() == 16) {
    DataType f = DataType::Float(32, t.lanes());
    for (llvm::Value*& a : args) a = cast_value(a, t, f);
    return cast_value(emit_math_f32(op->op, args), f, t);
  }
  if (llvm::Intrinsic::ID id = simple_intrinsic(op->op); id != llvm::Intrinsic::not_intrinsic) return call_intrinsic(id, args);
  if (op->op == Intrinsic::Rsqrt) return builder_->CreateFDiv(fconst(args[0], 1.0), call_intrinsic(llvm::Intrinsic::sqrt, args));
  return t.bits() == 32 ? emit_math_f32(op->op, args) : emit_math_f64(op->op, args);
}

llvm::Value* CodeGenLLVM::emit_math_f64(Intrinsic fn, const std::vector<llvm::Value*>& args) {
  switch (fn) {
    case Intrinsic::Exp: return call_intrinsic(llvm::Intrinsic::exp, args);
    case Intrinsic::Log: return call_intrinsic(llvm::Intrinsic::log, args);
    case Intrinsic::Sin: return call_intrinsic(llvm::Intrinsic::sin, args);
    case Intrinsic::Cos: return call_intrinsic(llvm::Intrinsic::cos, args);
    case Intrinsic::Pow: return call_intrinsic(llvm::Intrinsic::pow, args);
    case Intrinsic::Tanh: return call_libm_per_lane("tanh", args);
    case Intrinsic::Erf: return call_libm_per_lane("erf", args);
    case Intrinsic::Sigmoid: {
      llvm::Value* e = call_intrinsic(llvm::Intrinsic::exp, {builder_->CreateFNeg(args[0])});
      return builder_->CreateFDiv(fconst(e, 1.0), builder_->CreateFAdd(fconst(e, 1.0), e));
    }
    default: break;
  }
  KILN_UNREACHABLE() << "no float64 lowering of " << intrinsic_name(fn);
  return nullptr;
}

llvm::Value* CodeGenLLVM::emit_math_f32(Intrinsic fn, const std::vector<llvm::Value*>& args) {
  if (llvm::Intrinsic::ID id = simple_intrinsic(fn); id != llvm::Intrinsic::not_intrinsic) return call_intrinsic(id, args);
  // The polynomials rely on exact NaN/inf handling and evaluation order:
  // only contraction into FMA is allowed inside them, even with -fast-math.
  llvm::IRBuilderBase::FastMathFlagGuard guard(*builder_);
  llvm::FastMathFlags fmf;
  fmf.setAllowContract(true);
  builder_->setFastMathFlags(fmf);
  llvm::Value* x = args[0];
  switch (fn) {
    case Intrinsic::Exp: return emit_exp_f32(x);
    case Intrinsic::Log: return emit_log_f32(x);
    case Intrinsic::Tanh: return emit_tanh_f32(x);
    case Intrinsic::Sigmoid: return emit_sigmoid_f32(x);
    case Intrinsic::Erf: return emit_erf_f32(x);
    case Intrinsic::Sin: return emit_sincos_f32(x, false);
    case Intrinsic::Cos: return emit_sincos_f32(x, true);
    case Intrinsic::Pow: return emit_pow_f32(x, args[1]);
    case Intrinsic::Rsqrt: return builder_->CreateFDiv(fconst(x, 1.0), call_intrinsic(llvm::Intrinsic::sqrt, {x}));
    default: break;
  }
  KILN_UNREACHABLE() << "no float32 lowering of " << intrinsic_name(fn);
  return nullptr;
}

// exp(r) * 2^k for |r| <= ln2/2: the Cephes expf polynomial, then 2^k applied
// as two factors 2^(k/2) so that k in [-252, 254] neither wraps nor saturates.
llvm::Value* CodeGenLLVM::emit_exp_reduced(llvm::Value* r, llvm::Value* k) {
  llvm::Value* p = horner(r, {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1});
  llvm::Value* y = call_intrinsic(llvm::Intrinsic::fmuladd, {p, builder_->CreateFMul(r, r), r});
  y = builder_->CreateFAdd(y, fconst(y, 1.0));
  llvm::Value* k1 = builder_->CreateAShr(k, 1);
  llvm::Value* k2 = builder_->CreateSub(k, k1);
  llvm::Type* ity = k->getType();
  auto pow2 = [&](llvm::Value* e) { return builder_->CreateBitCast(builder_->CreateShl(builder_->CreateAdd(e, llvm::ConstantInt::get(ity, 127)), 23), y->getType()); };
  return builder_->CreateFMul(builder_->CreateFMul(y, pow2(k1)), pow2(k2));
}

// select(x < lo, lo, x) then the same for hi: NaN passes through unchanged.
static llvm::Value* clamp(llvm::IRBuilder<>* b, llvm::Value* x, double lo, double hi) {
  x = b->CreateSelect(b->CreateFCmpOLT(x, fconst(x, lo)), fconst(x, lo), x);
  return b->CreateSelect(b->CreateFCmpOGT(x, fconst(x, hi)), fconst(x, hi), x);
}

// Nearest integer of z (halves away from zero) as i32: exact enough for range
// reduction and needs no SSE4.1 rounding instruction.
static llvm::Value* round_to_i32(llvm::IRBuilder<>* b, llvm::Value* z) {
  llvm::Value* half = b->CreateIntrinsic(llvm::Intrinsic::copysign, {z->getType()}, {fconst(z, 0.5), z});
  return b->CreateFPToSI(b->CreateFAdd(z, half), with_element(z->getType(), b->getInt32Ty()));
}

llvm::Value* CodeGenLLVM::emit_exp_f32(llvm::Value* x) {
  // Beyond these bounds the result is inf or 0 anyway; clamping keeps k in range.
  llvm::Value* xc = clamp(builder_.get(), x, -104.0, 89.0);
  llvm::Value* k = round_to_i32(builder_.get(), builder_->CreateFMul(xc, fconst(x, 1.44269504088896341)));
  llvm::Value* kf = builder_->CreateSIToFP(k, x->getType());
  // r = x - k*ln2 with ln2 split in two (Cody-Waite), the first part exact in k*C1.
  llvm::Value* r = call_intrinsic(llvm::Intrinsic::fmuladd, {kf, fconst(x, -0.693359375), xc});
  r = call_intrinsic(llvm::Intrinsic::fmuladd, {kf, fconst(x, 2.12194440e-4), r});
  llvm::Value* y = emit_exp_reduced(r, k);
  return builder_->CreateSelect(builder_->CreateFCmpUNO(x, x), x, y);
}

llvm::Value* CodeGenLLVM::emit_log_f32(llvm::Value* x) {
  llvm::Type* ity = with_element(x->getType(), builder_->getInt32Ty());
  auto ic = [&](int64_t v) { return llvm::ConstantInt::get(ity, static_cast<uint64_t>(v), true); };
  // Denormals: scale into the normal range first and correct the exponent.
  llvm::Value* denormal = builder_->CreateFCmpOLT(x, fconst(x, 1.17549435e-38));
  llvm::Value* xs = builder_->CreateSelect(denormal, builder_->CreateFMul(x, fconst(x, 8388608.0)), x);
  llvm::Value* bits = builder_->CreateBitCast(xs, ity);
  llvm::Value* e = builder_->CreateSub(builder_->CreateLShr(bits, 23), ic(126));
  e = builder_->CreateSub(e, builder_->CreateSelect(denormal, ic(23), ic(0)));
  // m in [0.5, 1); then m - 1 on [sqrt(1/2) - 1, sqrt(2) - 1) for the polynomial.
  llvm::Value* m = builder_->CreateBitCast(builder_->CreateOr(builder_->CreateAnd(bits, ic(0x007fffff)), ic(0x3f000000)), x->getType());
  llvm::Value* small = builder_->CreateFCmpOLT(m, fconst(x, 0.707106781186547524));
  e = builder_->CreateSub(e, builder_->CreateZExt(small, ity));
  m = builder_->CreateFSub(builder_->CreateSelect(small, builder_->CreateFAdd(m, m), m), fconst(x, 1.0));
  llvm::Value* z = builder_->CreateFMul(m, m);
  llvm::Value* p = horner(m, {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1, 1.4249322787E-1, -1.6668057665E-1,
                              2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1});
  llvm::Value* y = builder_->CreateFMul(builder_->CreateFMul(p, m), z);
  llvm::Value* ef = builder_->CreateSIToFP(e, x->getType());
  y = call_intrinsic(llvm::Intrinsic::fmuladd, {ef, fconst(x, -2.12194440e-4), y});
  y = call_intrinsic(llvm::Intrinsic::fmuladd, {z, fconst(x, -0.5), y});
  llvm::Value* res = call_intrinsic(llvm::Intrinsic::fmuladd, {ef, fconst(x, 0.693359375), builder_->CreateFAdd(m, y)});
  // Special values: log(+inf) = inf, log(0) = -inf, log(x < 0) = log(NaN) = NaN.
  res = builder_->CreateSelect(builder_->CreateFCmpOEQ(x, fconst(x, INFINITY)), x, res);
  res = builder_->CreateSelect(builder_->CreateFCmpOEQ(x, fconst(x, 0.0)), fconst(x, -INFINITY), res);
  return builder_->CreateSelect(builder_->CreateFCmpULT(x, fconst(x, 0.0)), fconst(x, NAN), res);
}

llvm::Value* CodeGenLLVM::emit_tanh_f32(llvm::Value* x) {
  llvm::Value* ax = call_intrinsic(llvm::Intrinsic::fabs, {x});
  // Near zero 1 - 2/(e+1) would cancel: use the odd polynomial there.
  llvm::Value* z = builder_->CreateFMul(x, x);
  llvm::Value* p = horner(z, {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2, 1.33314422036E-1, -3.33332819422E-1});
  llvm::Value* small = call_intrinsic(llvm::Intrinsic::fmuladd, {builder_->CreateFMul(p, z), x, x});
  // tanh(9.1) rounds to 1 in float32; the bound keeps exp finite.
  llvm::Value* a = builder_->CreateSelect(builder_->CreateFCmpOGT(ax, fconst(x, 9.1)), fconst(x, 9.1), ax);
  llvm::Value* e = emit_exp_f32(builder_->CreateFAdd(a, a));
  llvm::Value* big = builder_->CreateFSub(fconst(x, 1.0), builder_->CreateFDiv(fconst(x, 2.0), builder_->CreateFAdd(e, fconst(x, 1.0))));
  big = call_intrinsic(llvm::Intrinsic::copysign, {big, x});
  // NaN fails the comparison and takes the polynomial, which keeps it NaN.
  return builder_->CreateSelect(builder_->CreateFCmpUGE(ax, fconst(x, 0.625)), builder_->CreateSelect(builder_->CreateFCmpUNO(x, x), x, big), small);
}

// exp(a) for a <= 0 (or NaN), the sigmoid's: fewer instructions than
// emit_exp_f32, where a swish epilogue (EfficientNet's convolutions) spent
// most of its time; x * sigmoid(x) over 1.2M floats took 0.40 ms beyond a
// ReLU's pass instead of 0.56, EfficientNet-B0 0.97-0.98x (1 core). No upper clamp; k rounded by the 1.5 * 2^23 shift
// (nearest, and its float and integer forms at once); one 2^k factor, which
// stays normal down to k = -126, and 0 below -87.5 (exp(-87.5) = 1.0e-38,
// an absolute error under the bound emit_exp_f32 keeps there). A NaN flows
// through every step.
llvm::Value* CodeGenLLVM::emit_exp_nonpositive_f32(llvm::Value* a) {
  llvm::Type* ity = with_element(a->getType(), builder_->getInt32Ty());
  llvm::Value* ac = builder_->CreateSelect(builder_->CreateFCmpOLT(a, fconst(a, -88.0)), fconst(a, -88.0), a);
  const double shift = 12582912.0;  // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
  llvm::Value* t = call_intrinsic(llvm::Intrinsic::fmuladd, {ac, fconst(a, 1.44269504088896341), fconst(a, shift)});
  llvm::Value* kf = builder_->CreateFSub(t, fconst(a, shift));
  llvm::Value* k = builder_->CreateSub(builder_->CreateBitCast(t, ity), llvm::ConstantInt::get(ity, 0x4B400000));
  llvm::Value* r = call_intrinsic(llvm::Intrinsic::fmuladd, {kf, fconst(a, -0.693359375), ac});
  r = call_intrinsic(llvm::Intrinsic::fmuladd, {kf, fconst(a, 2.12194440e-4), r});
  llvm::Value* p = horner(r, {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1});
  llvm::Value* y = call_intrinsic(llvm::Intrinsic::fmuladd, {p, builder_->CreateFMul(r, r), r});
  y = builder_->CreateFAdd(y, fconst(y, 1.0));
  llvm::Value* pow2 = builder_->CreateBitCast(builder_->CreateShl(builder_->CreateAdd(k, llvm::ConstantInt::get(ity, 127)), 23), a->getType());
  y = builder_->CreateFMul(y, pow2);
  return builder_->CreateSelect(builder_->CreateFCmpOLT(a, fconst(a, -87.5)), fconst(a, 0.0), y);
}

llvm::Value* CodeGenLLVM::emit_sigmoid_f32(llvm::Value* x) {
  // e = exp(-|x|) never overflows; 1/(1+e) for x >= 0 and e/(1+e) below.
  llvm::Value* e = emit_exp_nonpositive_f32(builder_->CreateFNeg(call_intrinsic(llvm::Intrinsic::fabs, {x})));
  llvm::Value* r = builder_->CreateFDiv(fconst(x, 1.0), builder_->CreateFAdd(e, fconst(x, 1.0)));
  return builder_->CreateSelect(builder_->CreateFCmpOGE(x, fconst(x, 0.0)), r, builder_->CreateFMul(e, r));
}

llvm::Value* CodeGenLLVM::emit_erf_f32(llvm::Value* x) {
  // Coefficients fitted (weighted least squares, Lawson iterations) for this file.
  llvm::Value* ax = call_intrinsic(llvm::Intrinsic::fabs, {x});
  llvm::Value* z = builder_->CreateFMul(x, x);
  llvm::Value* p = horner(z, {-5.665517165e-06, 9.205202514e-05, -8.046221919e-04, 5.172843114e-03, -2.683718316e-02, 1.128297001e-01,
                              -3.761254847e-01, 1.128379107e+00});
  llvm::Value* small = builder_->CreateFMul(x, p);
  llvm::Value* t = builder_->CreateFSub(ax, fconst(x, 2.7));
  llvm::Value* q = horner(t, {4.252526196e-05, -1.282614685e-04, -1.245709063e-05, 7.000300102e-04, -1.918962109e-03, 3.275495255e-03,
                              -4.001495428e-03, 3.487653099e-03, -2.080142964e-03, 7.697767578e-04, 9.998657107e-01});
  // erf(3.92) rounds to 1 in float32.
  q = builder_->CreateSelect(builder_->CreateFCmpOGT(ax, fconst(x, 3.92)), fconst(x, 1.0), q);
  llvm::Value* mid = call_intrinsic(llvm::Intrinsic::copysign, {q, x});
  return builder_->CreateSelect(builder_->CreateFCmpOLT(ax, fconst(x, 1.5)), small, builder_->CreateSelect(builder_->CreateFCmpUNO(x, x), x, mid));
}

llvm::Value* CodeGenLLVM::emit_sincos_f32(llvm::Value* x, bool cosine) {
  llvm::Type* dty = with_element(x->getType(), builder_->getDoubleTy());
  llvm::Type* ity = with_element(x->getType(), builder_->getInt32Ty());
  // Reduce by pi/2 in double: x is exact there and pi/2 in two parts (fdlibm's
  // pio2_1, pio2_1t) keeps r accurate for |x| up to about 1e9.
  llvm::Value* xd = builder_->CreateFPExt(x, dty);
  llvm::Value* q = clamp(builder_.get(), builder_->CreateFMul(xd, fconst(xd, 0.63661977236758134308)), -1e9, 1e9);
  llvm::Value* k = round_to_i32(builder_.get(), q);
  llvm::Value* kd = builder_->CreateSIToFP(k, dty);
  llvm::Value* rd = call_intrinsic(llvm::Intrinsic::fmuladd, {kd, fconst(xd, -1.57079632673412561417e+00), xd});
  rd = call_intrinsic(llvm::Intrinsic::fmuladd, {kd, fconst(xd, -6.07710050650619224932e-11), rd});
  llvm::Value* r = builder_->CreateFPTrunc(rd, x->getType());
  llvm::Value* z = builder_->CreateFMul(r, r);
  llvm::Value* sp = horner(z, {-1.9515295891E-4, 8.3321608736E-3, -1.6666654611E-1});
  llvm::Value* s = call_intrinsic(llvm::Intrinsic::fmuladd, {builder_->CreateFMul(sp, z), r, r});
  llvm::Value* cp = horner(z, {2.443315711809948E-005, -1.388731625493765E-003, 4.166664568298827E-002});
  llvm::Value* c = call_intrinsic(llvm::Intrinsic::fmuladd, {cp, builder_->CreateFMul(z, z), call_intrinsic(llvm::Intrinsic::fmuladd, {z, fconst(x, -0.5), fconst(x, 1.0)})});
  // Quadrant k (+1 for cosine): 0 sin, 1 cos, 2 -sin, 3 -cos.
  llvm::Value* quad = cosine ? builder_->CreateAdd(k, llvm::ConstantInt::get(ity, 1)) : k;
  llvm::Value* odd = builder_->CreateICmpNE(builder_->CreateAnd(quad, llvm::ConstantInt::get(ity, 1)), llvm::ConstantInt::get(ity, 0));
  llvm::Value* neg = builder_->CreateICmpNE(builder_->CreateAnd(quad, llvm::ConstantInt::get(ity, 2)), llvm::ConstantInt::get(ity, 0));
  llvm::Value* res = builder_->CreateSelect(odd, c, s);
  res = builder_->CreateSelect(neg, builder_->CreateFNeg(res), res);
  // inf and NaN give NaN.
  llvm::Value* bad = builder_->CreateFCmpUEQ(call_intrinsic(llvm::Intrinsic::fabs, {x}), fconst(x, INFINITY));
  return builder_->CreateSelect(bad, fconst(x, NAN), res);
}

// log of a positive double: frexp by bit manipulation, then the atanh series
// 2s(1 + s^2/3 + s^4/5 + ...) with s = (m-1)/(m+1), |s| < 0.172, to ~1e-16.
llvm::Value* CodeGenLLVM::emit_log_f64_positive(llvm::Value* xd) {
  llvm::Type* ity = with_element(xd->getType(), builder_->getInt64Ty());
  auto ic = [&](uint64_t v) { return llvm::ConstantInt::get(ity, v); };
  llvm::Value* bits = builder_->CreateBitCast(xd, ity);
  llvm::Value* e = builder_->CreateSub(builder_->CreateLShr(bits, 52), ic(1022));
  llvm::Value* m = builder_->CreateBitCast(builder_->CreateOr(builder_->CreateAnd(bits, ic(0x000fffffffffffffULL)), ic(0x3fe0000000000000ULL)), xd->getType());
  llvm::Value* small = builder_->CreateFCmpOLT(m, fconst(xd, 0.70710678118654752440));
  m = builder_->CreateSelect(small, builder_->CreateFAdd(m, m), m);
  e = builder_->CreateSub(e, builder_->CreateZExt(small, ity));
  llvm::Value* s = builder_->CreateFDiv(builder_->CreateFSub(m, fconst(xd, 1.0)), builder_->CreateFAdd(m, fconst(xd, 1.0)));
  llvm::Value* s2 = builder_->CreateFMul(s, s);
  llvm::Value* series = horner(s2, {2.0 / 19, 2.0 / 17, 2.0 / 15, 2.0 / 13, 2.0 / 11, 2.0 / 9, 2.0 / 7, 2.0 / 5, 2.0 / 3, 2.0});
  llvm::Value* res = call_intrinsic(llvm::Intrinsic::fmuladd, {builder_->CreateSIToFP(e, xd->getType()), fconst(xd, 0.69314718055994530942), builder_->CreateFMul(s, series)});
  res = builder_->CreateSelect(builder_->CreateFCmpOEQ(xd, fconst(xd, 0.0)), fconst(xd, -INFINITY), res);
  return builder_->CreateSelect(builder_->CreateFCmpOEQ(xd, fconst(xd, INFINITY)), xd, res);
}

llvm::Value* CodeGenLLVM::emit_pow_f32(llvm::Value* x, llvm::Value* y) {
  llvm::Type* dty = with_element(x->getType(), builder_->getDoubleTy());
  llvm::Type* ity = with_element(x->getType(), builder_->getInt32Ty());
  // |x|^y = exp(y * log|x|) with the product in double: float32 would lose
  // |y log x| * 2^-24 of relative accuracy.
  llvm::Value* lx = emit_log_f64_positive(builder_->CreateFPExt(call_intrinsic(llvm::Intrinsic::fabs, {x}), dty));
  llvm::Value* t = builder_->CreateFMul(builder_->CreateFPExt(y, dty), lx);
  llvm::Value* tc = clamp(builder_.get(), t, -104.0, 89.0);
  llvm::Value* k = round_to_i32(builder_.get(), builder_->CreateFMul(tc, fconst(tc, 1.44269504088896340736)));
  llvm::Value* rd = call_intrinsic(llvm::Intrinsic::fmuladd, {builder_->CreateSIToFP(k, dty), fconst(tc, -0.69314718055994530942), tc});
  llvm::Value* res = emit_exp_reduced(builder_->CreateFPTrunc(rd, x->getType()), k);
  res = builder_->CreateSelect(builder_->CreateFCmpUNO(t, t), fconst(x, NAN), res);
  // A negative base needs an integral exponent; odd exponents keep the sign.
  llvm::Value* integral = builder_->CreateFCmpOEQ(call_intrinsic(llvm::Intrinsic::trunc, {y}), y);
  llvm::Value* y_small = builder_->CreateFCmpOLT(call_intrinsic(llvm::Intrinsic::fabs, {y}), fconst(y, 16777216.0));
  llvm::Value* yi = builder_->CreateFPToSI(builder_->CreateSelect(y_small, y, fconst(y, 0.0)), ity);
  llvm::Value* odd = builder_->CreateICmpNE(builder_->CreateAnd(yi, llvm::ConstantInt::get(ity, 1)), llvm::ConstantInt::get(ity, 0));
  llvm::Value* neg = builder_->CreateSelect(integral, builder_->CreateSelect(odd, builder_->CreateFNeg(res), res), fconst(x, NAN));
  res = builder_->CreateSelect(builder_->CreateFCmpOLT(x, fconst(x, 0.0)), neg, res);
  // pow(1, y) = pow(x, 0) = 1, even for NaN.
  llvm::Value* one = builder_->CreateOr(builder_->CreateFCmpOEQ(x, fconst(x, 1.0)), builder_->CreateFCmpOEQ(y, fconst(y, 0.0)));
  return builder_->CreateSelect(one, fconst(x, 1.0), res);
}

}  // namespace kiln::codegen
