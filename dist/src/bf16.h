// float32 <-> bfloat16 for gradients sent in half the bytes (Communicator::start_all_reduce_bf16):
// bfloat16 is float32's top 16 bits, rounded to nearest even; NaN stays NaN. The array forms are
// written without branches so that the compiler vectorizes them (a gradient bucket is megabytes).
#ifndef KILN_SRC_DIST_BF16_H
#define KILN_SRC_DIST_BF16_H

#include <cstdint>
#include <cstring>

namespace kiln::dist {

inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#if defined(__GNUC__) && !defined(__clang__)
#define KILN_VECTORIZE __attribute__((optimize("O3")))
#else
#define KILN_VECTORIZE
#endif

KILN_VECTORIZE inline void to_bf16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}
KILN_VECTORIZE inline void from_bf16(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = from_bf16(in[i]);
}
/** b[i] = bfloat16(a[i] + b[i]): MPI's reduction of two ranks' words. */
KILN_VECTORIZE inline void add_bf16(const uint16_t* a, uint16_t* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) b[i] = to_bf16(from_bf16(a[i]) + from_bf16(b[i]));
}
/** x[i] = float(bfloat16(x[i])). */
KILN_VECTORIZE inline void round_to_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = from_bf16(to_bf16(x[i]));
}

#undef KILN_VECTORIZE

}  // namespace kiln::dist

#endif  // KILN_SRC_DIST_BF16_H
