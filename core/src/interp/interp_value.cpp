#include "interp_value.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace kiln::interp {

int64_t wrap_int(DataType t, int64_t v) {
  if (t.is_bool()) return v & 1;
  int bits = t.bits();
  if (bits >= 64) return v;
  uint64_t mask = (uint64_t(1) << bits) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (t.is_int() && ((u >> (bits - 1)) & 1)) u |= ~mask;
  return static_cast<int64_t>(u);
}

// ------------------------------------------------------------ 16-bit floats

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t exp = (x >> 23) & 0xff;
  uint32_t mant = x & 0x7fffff;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 | (mant >> 13) : 0));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t h, rem, half;
  if (e <= 0) {
    // Subnormal half: the value is M * 2^(e-38) and a half subnormal step is 2^-24.
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    int shift = 14 - e;
    h = mant >> shift;
    rem = mant & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  } else {
    h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
    rem = mant & 0x1fff;
    half = 0x1000;
  }
  // Round to nearest even; a carry into the exponent is exactly right (up to inf).
  if (rem > half || (rem == half && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  uint32_t bits = exp == 31 ? (sign | 0x7f800000 | (mant << 13)) : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

float bfloat16_to_float(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

double round_to_type(DataType t, double v) {
  if (t.is_bfloat()) return bfloat16_to_float(float_to_bfloat16(static_cast<float>(v)));
  switch (t.bits()) {
    case 16: return half_to_float(float_to_half(static_cast<float>(v)));
    case 32: return static_cast<float>(v);
    default: return v;
  }
}

// -------------------------------------------------------------------- casts

// Float to int64 with truncation. C leaves out-of-range conversions
// undefined; we saturate (NaN gives 0) so the oracle never has UB itself.
static int64_t float_to_int64(double f, bool to_uint64) {
  if (std::isnan(f)) return 0;
  f = std::trunc(f);
  constexpr double two63 = 9223372036854775808.0;
  if (f >= two63) {
    if (to_uint64 && f < 2 * two63) return static_cast<int64_t>(static_cast<uint64_t>(f));
    return to_uint64 ? -1 : std::numeric_limits<int64_t>::max();
  }
  if (f < -two63) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(f);
}

// Int to float in one rounding step, from the source's signedness.
static double int_to_float(DataType from, DataType to, int64_t v) {
  bool u = from.is_uint() && from.bits() == 64;
  if (to.bits() == 32 && !to.is_bfloat()) return u ? static_cast<float>(static_cast<uint64_t>(v)) : static_cast<float>(v);
  double d = u ? static_cast<double>(static_cast<uint64_t>(v)) : static_cast<double>(v);
  return round_to_type(to, d);
}

Lane cast_lane(DataType from, DataType to, Lane v) {
  Lane r;
  if (to.is_float()) {
    r.f = from.is_float() ? round_to_type(to, v.f) : int_to_float(from, to, v.i);
  } else if (to.is_bool()) {
    r.i = from.is_float() ? v.f != 0 : v.i != 0;
  } else if (to.is_integer()) {
    // Narrowing keeps the low bits (what x86 code does after a 64-bit convert).
    int64_t x = from.is_float() ? float_to_int64(v.f, to.is_uint() && to.bits() == 64) : v.i;
    r.i = wrap_int(to, x);
  } else {
    KILN_USER_CHECK(from.is_handle() && to.is_handle()) << "cannot cast " << from.str() << " to " << to.str();
    r = v;
  }
  return r;
}

// ---------------------------------------------------------------- arithmetic

static int64_t int_binary(IRNodeKind op, DataType t, int64_t a, int64_t b) {
  // Unsigned arithmetic avoids C++ UB on overflow; wrap_int then gives two's complement.
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  bool is_unsigned = t.is_uint() || t.is_bool();
  switch (op) {
    case IRNodeKind::Add: return wrap_int(t, static_cast<int64_t>(ua + ub));
    case IRNodeKind::Sub: return wrap_int(t, static_cast<int64_t>(ua - ub));
    case IRNodeKind::Mul: return wrap_int(t, static_cast<int64_t>(ua * ub));
    case IRNodeKind::Min: return (is_unsigned ? ua < ub : a < b) ? a : b;
    case IRNodeKind::Max: return (is_unsigned ? ua > ub : a > b) ? a : b;
    case IRNodeKind::And: return a & b;
    case IRNodeKind::Or: return a | b;
    default: break;
  }
  KILN_CHECK(b != 0) << "integer division by zero reached int_binary";
  if (is_unsigned) {
    // Unsigned division truncates and floors alike.
    bool div = op == IRNodeKind::Div || op == IRNodeKind::FloorDiv;
    return wrap_int(t, static_cast<int64_t>(div ? ua / ub : ua % ub));
  }
  // INT64_MIN / -1 overflows in C++; the wrapped quotient is INT64_MIN, the remainder 0.
  if (b == -1) {
    bool div = op == IRNodeKind::Div || op == IRNodeKind::FloorDiv;
    return div ? wrap_int(t, static_cast<int64_t>(0 - ua)) : 0;
  }
  int64_t q = a / b, r = a % b;
  switch (op) {
    case IRNodeKind::Div: return wrap_int(t, q);
    case IRNodeKind::Mod: return r;
    case IRNodeKind::FloorDiv: return wrap_int(t, (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q);
    case IRNodeKind::FloorMod: return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    default: break;
  }
  KILN_UNREACHABLE() << "integer operation " << ir_node_kind_name(op);
  return 0;
}

static double float_binary(IRNodeKind op, double a, double b) {
  switch (op) {
    case IRNodeKind::Add: return a + b;
    case IRNodeKind::Sub: return a - b;
    case IRNodeKind::Mul: return a * b;
    case IRNodeKind::Div: return a / b;
    case IRNodeKind::Mod: return std::fmod(a, b);
    case IRNodeKind::FloorDiv: return std::floor(a / b);
    case IRNodeKind::FloorMod: return a - std::floor(a / b) * b;
    // NaN in either operand propagates, as in ONNX and PyTorch.
    case IRNodeKind::Min: return (a < b || std::isnan(a)) ? a : b;
    case IRNodeKind::Max: return (a > b || std::isnan(a)) ? a : b;
    default: break;
  }
  KILN_UNREACHABLE() << "float operation " << ir_node_kind_name(op);
  return 0;
}

Lane binary_lane(IRNodeKind op, DataType t, Lane a, Lane b) {
  Lane r;
  // For float32 the double result rounded to float equals the float result:
  // double has more than twice float's precision, so + - * / round once.
  if (t.is_float()) r.f = round_to_type(t, float_binary(op, a.f, b.f));
  else r.i = int_binary(op, t, a.i, b.i);
  return r;
}

bool compare_lane(IRNodeKind op, DataType t, Lane a, Lane b) {
  if (t.is_float()) {
    switch (op) {
      case IRNodeKind::EQ: return a.f == b.f;
      case IRNodeKind::NE: return a.f != b.f;
      case IRNodeKind::LT: return a.f < b.f;
      case IRNodeKind::LE: return a.f <= b.f;
      case IRNodeKind::GT: return a.f > b.f;
      case IRNodeKind::GE: return a.f >= b.f;
      default: break;
    }
  } else {
    // Only uint64 needs an unsigned compare: narrower unsigned lanes are zero-extended.
    bool u = t.is_uint() && t.bits() == 64;
    uint64_t ua = static_cast<uint64_t>(a.i), ub = static_cast<uint64_t>(b.i);
    switch (op) {
      case IRNodeKind::EQ: return a.i == b.i;
      case IRNodeKind::NE: return a.i != b.i;
      case IRNodeKind::LT: return u ? ua < ub : a.i < b.i;
      case IRNodeKind::LE: return u ? ua <= ub : a.i <= b.i;
      case IRNodeKind::GT: return u ? ua > ub : a.i > b.i;
      case IRNodeKind::GE: return u ? ua >= ub : a.i >= b.i;
      default: break;
    }
  }
  KILN_UNREACHABLE() << "comparison " << ir_node_kind_name(op);
  return false;
}

// Math in the working precision F (float for float32 and narrower, like
// compiled code calling expf; double for float64).
template <typename F>
static F math(Intrinsic op, F x, F y) {
  switch (op) {
    case Intrinsic::Exp: return std::exp(x);
    case Intrinsic::Log: return std::log(x);
    case Intrinsic::Sqrt: return std::sqrt(x);
    case Intrinsic::Rsqrt: return F(1) / std::sqrt(x);
    case Intrinsic::Tanh: return std::tanh(x);
    case Intrinsic::Erf: return std::erf(x);
    case Intrinsic::Pow: return std::pow(x, y);
    case Intrinsic::Fabs:
    case Intrinsic::Abs: return std::fabs(x);
    case Intrinsic::Sigmoid: return F(1) / (F(1) + std::exp(-x));
    case Intrinsic::Floor: return std::floor(x);
    case Intrinsic::Ceil: return std::ceil(x);
    // Round half to even (numpy's rule), in the default rounding mode.
    case Intrinsic::Round: return std::nearbyint(x);
    case Intrinsic::Trunc: return std::trunc(x);
    case Intrinsic::Sin: return std::sin(x);
    case Intrinsic::Cos: return std::cos(x);
    case Intrinsic::IfThenElse:
    case Intrinsic::Likely:
    case Intrinsic::SyncThreads:
    case Intrinsic::ThreadAllreduce:
    case Intrinsic::MmaFill:
    case Intrinsic::MmaSync:
    case Intrinsic::MmaStore: break;
  }
  KILN_UNREACHABLE() << "math_lane of " << intrinsic_name(op);
  return F(0);
}

Lane math_lane(Intrinsic op, DataType t, Lane a, Lane b) {
  Lane r;
  if (t.is_float()) {
    if (t.bits() == 64) r.f = math<double>(op, a.f, b.f);
    else r.f = round_to_type(t, math<float>(op, static_cast<float>(a.f), static_cast<float>(b.f)));
    return r;
  }
  switch (op) {
    case Intrinsic::Abs:
    case Intrinsic::Fabs: {
      uint64_t u = static_cast<uint64_t>(a.i);
      bool neg = !t.is_uint() && !t.is_bool() && a.i < 0;
      r.i = wrap_int(t, static_cast<int64_t>(neg ? 0 - u : u));
      return r;
    }
    case Intrinsic::Floor:
    case Intrinsic::Ceil:
    case Intrinsic::Round:
    case Intrinsic::Trunc: return a;
    default: break;
  }
  // Other math on integer lanes: compute in double, convert back like a Cast.
  DataType f64 = DataType::Float(64);
  Lane fa = cast_lane(t, f64, a), fb = cast_lane(t, f64, b);
  Lane fr;
  fr.f = math<double>(op, fa.f, fb.f);
  return cast_lane(f64, t, fr);
}

// ------------------------------------------------------------------- memory

template <typename T>
static T read(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
static void write(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

Lane load_lane(DataType t, const uint8_t* p) {
  Lane r{};
  switch (t.code()) {
    case DataType::Code::Int:
      switch (t.bits()) {
        case 8: r.i = read<int8_t>(p); return r;
        case 16: r.i = read<int16_t>(p); return r;
        case 32: r.i = read<int32_t>(p); return r;
        case 64: r.i = read<int64_t>(p); return r;
      }
      break;
    case DataType::Code::UInt:
      switch (t.bits()) {
        case 8: r.i = read<uint8_t>(p); return r;
        case 16: r.i = read<uint16_t>(p); return r;
        case 32: r.i = read<uint32_t>(p); return r;
        case 64: r.i = static_cast<int64_t>(read<uint64_t>(p)); return r;
      }
      break;
    case DataType::Code::Float:
      switch (t.bits()) {
        case 16: r.f = half_to_float(read<uint16_t>(p)); return r;
        case 32: r.f = read<float>(p); return r;
        case 64: r.f = read<double>(p); return r;
      }
      break;
    case DataType::Code::BFloat: r.f = bfloat16_to_float(read<uint16_t>(p)); return r;
    case DataType::Code::Bool: r.i = read<uint8_t>(p) != 0; return r;
    case DataType::Code::Handle: r.i = static_cast<int64_t>(reinterpret_cast<uintptr_t>(read<void*>(p))); return r;
  }
  KILN_USER_ERROR() << "the interpreter cannot load elements of type " << t.str();
  return r;
}

void store_lane(DataType t, uint8_t* p, Lane v) {
  switch (t.code()) {
    case DataType::Code::Int:
    case DataType::Code::UInt:
      switch (t.bits()) {
        case 8: write(p, static_cast<uint8_t>(v.i)); return;
        case 16: write(p, static_cast<uint16_t>(v.i)); return;
        case 32: write(p, static_cast<uint32_t>(v.i)); return;
        case 64: write(p, static_cast<uint64_t>(v.i)); return;
      }
      break;
    case DataType::Code::Float:
      switch (t.bits()) {
        case 16: write(p, float_to_half(static_cast<float>(v.f))); return;
        case 32: write(p, static_cast<float>(v.f)); return;
        case 64: write(p, v.f); return;
      }
      break;
    case DataType::Code::BFloat: write(p, float_to_bfloat16(static_cast<float>(v.f))); return;
    case DataType::Code::Bool: write(p, static_cast<uint8_t>(v.i != 0)); return;
    case DataType::Code::Handle: write(p, reinterpret_cast<void*>(static_cast<uintptr_t>(v.i))); return;
  }
  KILN_USER_ERROR() << "the interpreter cannot store elements of type " << t.str();
}

void poison(DataType t, uint8_t* p, int64_t n) {
  // Quiet NaNs with a payload: a read of uninitialised memory shows up as NaN
  // in float results, and as 0xA5A5... (a large or negative number) in ints.
  int bytes = t.bytes();
  uint64_t pattern = 0xA5A5A5A5A5A5A5A5ull;
  if (t.is_bfloat()) pattern = 0x7FE5;
  else if (t.is_float() && bytes == 2) pattern = 0x7EA5;
  else if (t.is_float() && bytes == 4) pattern = 0x7FE5A5A5;
  else if (t.is_float() && bytes == 8) pattern = 0x7FFCA5A5A5A5A5A5ull;
  for (int64_t k = 0; k < n; ++k) std::memcpy(p + k * bytes, &pattern, bytes);
}

}  // namespace kiln::interp
