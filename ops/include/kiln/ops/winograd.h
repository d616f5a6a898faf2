/** \file
 * Winograd F(m x m, 3x3) convolution (m = 2 or 4) in the blocked ("NCHWc")
 * layout: a 3x3, stride-1 conv as three computations, each a stage the tuner
 * schedules on its own. With alpha = m + 2:
 *   V = B^T d B   per alpha x alpha input tile d (winograd_input_nchwc)
 *   M = U . V     alpha^2 batched products over the input channels (winograd_matmul)
 *   Y = A^T M A   per m x m output tile (winograd_output_nchwc)
 * with U = G g G^T, the weights transformed once at compile time
 * (winograd_weights). Per m x m outputs and input channel the direct conv
 * takes 9 m^2 multiplies: F(2x2, 3x3) 16 of 36 (2.25x fewer), F(4x4, 3x3)
 * 36 of 144 (4x fewer), for two passes over memory that are light next to
 * them where the output has many pixels. F(4x4, 3x3) (points 0, +-1, +-2)
 * has coefficients up to 8 and 1/24; its float32 error stays about 1e-6
 * relative on unit-scale data.
 * The tile index p runs over (n, tile row, tile column).
 */
#ifndef KILN_OPS_WINOGRAD_H
#define KILN_OPS_WINOGRAD_H

#include <string>

#include "kiln/runtime/ndarray.h"
#include "kiln/te/operation.h"

namespace kiln::ops {

/** Extents of the tile grid of an output of out_h x out_w pixels: m x m outputs per tile. */
struct WinogradTiles {
  int64_t n, rows, cols, m;
  int64_t count() const { return n * rows * cols; }
  /** Side of an input tile (and of the transformed tile): m + 2. */
  int64_t alpha() const { return m + 2; }
};
WinogradTiles winograd_tiles(int64_t n, int64_t out_h, int64_t out_w, int64_t m = 2);

/**
 * The transformed input V [alpha^2, C/cb, P, cb] of a blocked X [N, C/cb, H, W, cb]
 * with the conv's zero padding (pad_top, pad_left), output out_h x out_w and output tile m.
 * N may be symbolic (a dynamic batch: P is then N times the tiles of an image); H and W are static.
 */
te::Tensor winograd_input_nchwc(const te::Tensor& X, int pad_top, int pad_left, int64_t out_h, int64_t out_w, int64_t m = 2,
                                const std::string& name = "winograd_input");
/** M [alpha^2, K/kb, P, kb] = sum over c of V [alpha^2, C/cb, P, cb] and U [alpha^2, K/kb, C/cb, cb, kb]. */
te::Tensor winograd_matmul(const te::Tensor& V, const te::Tensor& U, const std::string& name = "winograd_matmul");
/** The conv's output Y [N, K/kb, out_h, out_w, kb] from M [alpha^2, K/kb, P, kb]. */
te::Tensor winograd_output_nchwc(const te::Tensor& M, int64_t n, int64_t out_h, int64_t out_w, int64_t m = 2,
                                 const std::string& name = "winograd_output");
/** The same with N an expression (a dynamic batch): M's P must be N times the tiles of an image. */
te::Tensor winograd_output_nchwc(const te::Tensor& M, const Expr& n, int64_t out_h, int64_t out_w, int64_t m = 2,
                                 const std::string& name = "winograd_output");

/** U [alpha^2, K/kb, C/cb, cb, kb] = G g G^T of float32 weights [K, C, 3, 3]. */
NDArray winograd_weights(const NDArray& W, int64_t cb, int64_t kb, int64_t m = 2);

}  // namespace kiln::ops

#endif  // KILN_OPS_WINOGRAD_H
