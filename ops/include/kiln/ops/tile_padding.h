/** \file
 * Register tiles over extents with no good divisor (ViT's 197 tokens, CLIP's
 * 77, a prime batch of rows): the tile is split by a factor that does not
 * divide the extent, so the loops run full tiles plus one partial tile.
 *
 * Without this a tile factor must divide its extent, and for a prime extent
 * the register tile collapses to one row (197 rows: no register blocking,
 * 3-20x slower than 208 rows). A tiling over the padded extent (the next
 * multiple of the wanted tile) instead leaves a guard on the last tile that
 * lowering's loop_partition peels off: the full tiles run the unguarded,
 * unrolled and vectorized micro-kernel, only the last one is guarded.
 */
#ifndef KILN_OPS_TILE_PADDING_H
#define KILN_OPS_TILE_PADDING_H

#include <cstdint>

namespace kiln::ops {

/**
 * The extent a register tile's rows are chosen over: `extent` itself when it
 * fits one tile (at most `limit` rows) or has a divisor in [2/3 of `want`,
 * `limit`]; else `extent` rounded up to a multiple of `want`.
 */
int64_t padded_rows_extent(int64_t extent, int64_t want, int64_t limit);

/**
 * The extent a vector axis's tile is chosen over: `extent` itself when it is
 * at most two vectors wide or a multiple of half a vector (`lanes` / 2); else
 * `extent` rounded up to a multiple of two vectors.
 */
int64_t padded_vector_extent(int64_t extent, int lanes);

}  // namespace kiln::ops

#endif  // KILN_OPS_TILE_PADDING_H
