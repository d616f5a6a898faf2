/** \file
 * Private to the interpreter: the run-time value of an expression and the
 * lane-wise arithmetic on it. Everything here works on one lane of one
 * element type at a time, so each rule (wrap, rounding, division) is written
 * once and reads like its definition.
 */
#ifndef KILN_SRC_INTERP_INTERP_VALUE_H
#define KILN_SRC_INTERP_INTERP_VALUE_H

#include <algorithm>
#include <cstdint>

#include "kiln/ir/expr.h"
#include "kiln/support/error.h"

namespace kiln::interp {

/** The widest vector the interpreter evaluates; a fixed bound keeps values on the stack. */
constexpr int kMaxLanes = 64;

/**
 * One lane. Integers, bools and handles live in `i`: wrapped to the width of
 * their type, sign-extended for signed types and zero-extended for unsigned
 * ones (uint64 keeps its bit pattern). Floats live in `f`, already rounded to
 * the precision of their type, so a float32 lane always holds a float value.
 */
union Lane {
  int64_t i;
  double f;
};

/** A value of `type` (lanes included). Copies move only the lanes in use. */
struct Value {
  DataType type;
  Lane lane[kMaxLanes];

  Value() = default;
  explicit Value(DataType t) : type(t) {
    KILN_USER_CHECK(t.lanes() <= kMaxLanes) << "the interpreter handles vectors of at most " << kMaxLanes << " lanes, got " << t.str();
  }
  Value(const Value& o) : type(o.type) { std::copy_n(o.lane, o.lanes(), lane); }
  Value& operator=(const Value& o) {
    type = o.type;
    std::copy_n(o.lane, o.lanes(), lane);
    return *this;
  }
  int lanes() const { return type.lanes(); }
};

/** Wraps an integer to the width of t (two's complement); bools become 0/1 by their low bit. */
int64_t wrap_int(DataType t, int64_t v);
/** Rounds a double to the precision of float type t (float16 and bfloat16 round to nearest even). */
double round_to_type(DataType t, double v);

uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(uint16_t h);

/** Converts one lane from element type `from` to element type `to` with C semantics (see the .cpp). */
Lane cast_lane(DataType from, DataType to, Lane v);

/** Add, Sub, Mul, Div, Mod, FloorDiv, FloorMod, Min, Max, And, Or on element type t. The caller rules out integer division by zero. */
Lane binary_lane(IRNodeKind op, DataType t, Lane a, Lane b);
/** EQ, NE, LT, LE, GT, GE on operands of element type t. */
bool compare_lane(IRNodeKind op, DataType t, Lane a, Lane b);
/** A math intrinsic (not IfThenElse / Likely) on lanes of element type t; b is used by Pow only. */
Lane math_lane(Intrinsic op, DataType t, Lane a, Lane b);

/** Reads / writes one element of type t at p (unaligned access is fine). */
Lane load_lane(DataType t, const uint8_t* p);
void store_lane(DataType t, uint8_t* p, Lane v);
/** Fills n elements of type t with a recognisable pattern: a NaN for floats, 0xA5 bytes otherwise. */
void poison(DataType t, uint8_t* p, int64_t n);

}  // namespace kiln::interp

#endif  // KILN_SRC_INTERP_INTERP_VALUE_H
