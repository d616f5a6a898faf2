// Cache eviction for cold-cache timings (see cache_flush.h).
#include "kiln/runtime/cache_flush.h"

#include <cstdint>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln {

void evict_from_cache(const void* data, size_t bytes) {
  if (data == nullptr || bytes == 0) return;
#if defined(__x86_64__) || defined(__i386__)
  // clflush is in every x86-64 CPU (clflushopt would need a CPUID check); a
  // line is 64 bytes on every x86 kiln targets. Fences order the flushes
  // against the loads before and the timed kernel after.
  constexpr uintptr_t kLine = 64;
  uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(kLine - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
  _mm_mfence();
  for (uintptr_t p = begin; p < end; p += kLine) _mm_clflush(reinterpret_cast<const void*>(p));
  _mm_mfence();
#else
  // No portable flush instruction: reading a buffer larger than the largest
  // last-level cache pushes the data out in practice.
  static std::vector<unsigned char> scratch(size_t(256) << 20, 1);
  volatile unsigned char sink = 0;
  for (size_t i = 0; i < scratch.size(); i += 64) sink = sink + scratch[i];
  (void)sink;
#endif
}

}  // namespace kiln
