/** \file
 * Building expressions the way users write them: C++ operators with dtype
 * promotion, and named helpers (min, max, floordiv, exp, select, ...).
 *
 * Promotion rules for a binary operation on a and b:
 *  1. The same dtype: no change.
 *  2. An immediate adapts to the other side (x + 1 keeps x's dtype; a float
 *     immediate next to an integer expression makes the expression float32).
 *  3. Integer with float: the integer is cast to the float type.
 *  4. Two floats or two integers: the wider type wins; int with uint of the
 *     same width gives int.
 *  5. A scalar with a vector is broadcast to the vector's lanes; two vectors
 *     of different lanes are an error.
 * Make functions of the nodes (Add::make, ...) never promote: they check.
 */
#ifndef KILN_IR_OP_H
#define KILN_IR_OP_H

#include "kiln/ir/expr.h"

namespace kiln {

/** Brings a and b to one dtype by the rules above; throws kiln::Error if they cannot be. */
void binary_promote(Expr* a, Expr* b);
/** Casts e to t (no-op when already t); broadcasts scalars to t's lanes. */
Expr cast(DataType t, Expr e);

Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
/** Integer: truncating division (C). Float: true division. */
Expr operator/(Expr a, Expr b);
/** Integer: truncating remainder (C). */
Expr operator%(Expr a, Expr b);
Expr operator-(Expr a);
Expr operator==(Expr a, Expr b);
Expr operator!=(Expr a, Expr b);
Expr operator<(Expr a, Expr b);
Expr operator<=(Expr a, Expr b);
Expr operator>(Expr a, Expr b);
Expr operator>=(Expr a, Expr b);
Expr operator&&(Expr a, Expr b);
Expr operator||(Expr a, Expr b);
Expr operator!(Expr a);

Expr floordiv(Expr a, Expr b);
Expr floormod(Expr a, Expr b);
Expr truncdiv(Expr a, Expr b);
Expr truncmod(Expr a, Expr b);
Expr min(Expr a, Expr b);
Expr max(Expr a, Expr b);
Expr select(Expr cond, Expr t, Expr f);
/** Evaluates only the branch taken: safe when the other would read out of bounds. */
Expr if_then_else(Expr cond, Expr t, Expr f);
Expr likely(Expr cond);

/** Math functions; integer arguments are cast to float32 first. */
Expr exp(Expr x);
Expr log(Expr x);
Expr sqrt(Expr x);
Expr rsqrt(Expr x);
Expr tanh(Expr x);
Expr erf(Expr x);
Expr sigmoid(Expr x);
Expr fabs(Expr x);
Expr abs(Expr x);
Expr floor(Expr x);
Expr ceil(Expr x);
Expr round(Expr x);
Expr trunc(Expr x);
Expr sin(Expr x);
Expr cos(Expr x);
Expr pow(Expr x, Expr y);
/** Two float32 values rounded to bfloat16 and packed into a uint32 (lo in the low half); see Intrinsic::PackBF16x2. */
Expr pack_bf16x2(Expr lo, Expr hi);
/** The float32 dot product of two packed bfloat16 pairs; see Intrinsic::DotBF16x2. */
Expr dot_bf16x2(Expr a, Expr b);
/** The int32 dot product of two words of four packed bytes (int32: signed bytes, uint32: unsigned); see Intrinsic::DotI8x4. */
Expr dot_i8x4(Expr a, Expr b);
/** Calls a math intrinsic by enum with dtype handling as above. */
Expr call_math(Intrinsic op, std::vector<Expr> args);

}  // namespace kiln

#endif  // KILN_IR_OP_H
