#include "arg_scalars.h"

#include <cmath>
#include <cstring>

#include "kiln/support/error.h"

namespace kiln::detail {

std::ostream& operator<<(std::ostream& os, const Where& w) {
  return os << w.kernel.name << ": argument " << w.index << " '" << w.kernel.params[w.index].name << "'";
}

std::string a_or_an(const std::string& word) {
  bool vowel = !word.empty() && std::string("aeiou").find(word[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + word;
}

namespace {

// IEEE half from float, rounding to nearest even.
uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (abs < 0x38800000u) {
    // Below the smallest normal half: the result is a subnormal, f * 2^24 rounded.
    float a;
    std::memcpy(&a, &abs, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  abs += 0xc8000fffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | (abs >> 13));
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // keep NaN a NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

template <typename T>
void store(uint64_t* slot, T value) {
  std::memcpy(slot, &value, sizeof(T));
}

void pack_float_scalar(const Where& w, const Arg& a, DataType t, uint64_t* slot) {
  // Integers widen to a float parameter (as in C); the reverse is refused below.
  double v = a.kind() == Arg::Kind::Float ? a.float_value()
             : a.too_big()                ? static_cast<double>(static_cast<uint64_t>(a.int_value()))
                                          : static_cast<double>(a.int_value());
  if (t.is_bfloat()) return store(slot, float_to_bfloat16(static_cast<float>(v)));
  switch (t.bits()) {
    case 16: return store(slot, float_to_half(static_cast<float>(v)));
    case 32: return store(slot, static_cast<float>(v));
    case 64: return store(slot, v);
  }
  KILN_USER_ERROR() << w << " has dtype " << t.str() << ", which Module::call cannot pass";
}

}  // namespace

void pack_int_scalar(const Where& w, const Arg& a, DataType t, uint64_t* slot) {
  int64_t v = a.int_value();
  int bits = t.bits();
  if (t.is_bool()) {
    KILN_USER_CHECK(!a.too_big() && (v == 0 || v == 1)) << w << " = " << v << " is not a bool; pass 0 or 1";
    return store(slot, static_cast<uint8_t>(v));
  }
  bool fits;
  if (t.is_int()) {
    fits = !a.too_big() && (bits == 64 || (v >= -(int64_t(1) << (bits - 1)) && v < (int64_t(1) << (bits - 1))));
  } else {
    fits = a.too_big() ? bits == 64 : v >= 0 && (bits == 64 || v < (int64_t(1) << bits));
  }
  KILN_USER_CHECK(fits) << w << " = " << (a.too_big() ? std::to_string(static_cast<uint64_t>(v)) : std::to_string(v))
                        << " does not fit " << t.str();
  switch (bits) {
    case 8: return store(slot, static_cast<uint8_t>(v));
    case 16: return store(slot, static_cast<uint16_t>(v));
    case 32: return store(slot, static_cast<uint32_t>(v));
    case 64: return store(slot, static_cast<uint64_t>(v));
  }
  KILN_USER_ERROR() << w << " has dtype " << t.str() << ", which Module::call cannot pass";
}

void pack_scalar(const Where& w, const Arg& a, uint64_t* slot) {
  DataType t = w.kernel.params[w.index].dtype;
  KILN_USER_CHECK(a.kind() != Arg::Kind::Tensor) << w << " is a tensor, expected " << a_or_an(t.str()) << " scalar";
  KILN_USER_CHECK(t.is_scalar() && (t.is_float() || t.is_integer() || t.is_bool()))
      << w << " has dtype " << t.str() << ", which Module::call cannot pass as a scalar";
  *slot = 0;
  if (t.is_float()) return pack_float_scalar(w, a, t, slot);
  KILN_USER_CHECK(a.kind() == Arg::Kind::Int)
      << w << " is a float (" << a.float_value() << "), expected " << a_or_an(t.str()) << " scalar; pass an integer";
  pack_int_scalar(w, a, t, slot);
}

}  // namespace kiln::detail
