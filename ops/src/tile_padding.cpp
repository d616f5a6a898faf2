// padded_rows_extent and padded_vector_extent (kiln/ops/tile_padding.h).
#include "kiln/ops/tile_padding.h"

#include <algorithm>

namespace kiln::ops {

namespace {
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

int64_t padded_rows_extent(int64_t extent, int64_t want, int64_t limit) {
  want = std::max<int64_t>(1, std::min(want, limit));
  if (extent <= limit || want < 2) return extent;
  for (int64_t d = (2 * want + 2) / 3; d <= limit; ++d)
    if (extent % d == 0) return extent;
  return round_up(extent, want);
}

int64_t padded_vector_extent(int64_t extent, int lanes) {
  int64_t half = std::max(1, lanes / 2);
  if (extent <= 2 * int64_t(lanes) || extent % half == 0) return extent;
  return round_up(extent, 2 * int64_t(lanes));
}

}  // namespace kiln::ops
