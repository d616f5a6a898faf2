// float32 <-> bfloat16 for gradients sent in half the bytes (Communicator::start_all_reduce_bf16):
// bfloat16 is float32's top 16 bits, rounded to nearest even; NaN stays NaN.
#ifndef KILN_SRC_DIST_BF16_H
#define KILN_SRC_DIST_BF16_H

#include <cstdint>
#include <cstring>

namespace kiln::dist {

inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace kiln::dist

#endif  // KILN_SRC_DIST_BF16_H
