/** \file
 * Winograd F(2x2, 3x3) convolution in the blocked ("NCHWc") layout: a 3x3,
 * stride-1 conv as three computations, each a stage the tuner schedules on
 * its own.
 *   V = B^T d B   per 4x4 input tile d (winograd_input_nchwc)
 *   M = U . V     16 batched products over the input channels (winograd_matmul)
 *   Y = A^T M A   per 2x2 output tile (winograd_output_nchwc)
 * with U = G g G^T, the weights transformed once at compile time
 * (winograd_weights). It takes 16 multiplies per 2x2 outputs and input
 * channel where the direct conv takes 36: 2.25x fewer, for two passes over
 * memory that are light next to them where the output has many pixels.
 * The tile index p runs over (n, tile row, tile column).
 */
#ifndef KILN_OPS_WINOGRAD_H
#define KILN_OPS_WINOGRAD_H

#include <string>

#include "kiln/runtime/ndarray.h"
#include "kiln/te/operation.h"

namespace kiln::ops {

/** Extents of the tile grid of an output of out_h x out_w pixels: 2x2 outputs per tile. */
struct WinogradTiles {
  int64_t n, rows, cols;
  int64_t count() const { return n * rows * cols; }
};
WinogradTiles winograd_tiles(int64_t n, int64_t out_h, int64_t out_w);

/**
 * The transformed input V [16, C/cb, P, cb] of a blocked X [N, C/cb, H, W, cb]
 * with the conv's zero padding (pad_top, pad_left) and output out_h x out_w.
 */
te::Tensor winograd_input_nchwc(const te::Tensor& X, int pad_top, int pad_left, int64_t out_h, int64_t out_w,
                                const std::string& name = "winograd_input");
/** M [16, K/kb, P, kb] = sum over c of V [16, C/cb, P, cb] and U [16, K/kb, C/cb, cb, kb]. */
te::Tensor winograd_matmul(const te::Tensor& V, const te::Tensor& U, const std::string& name = "winograd_matmul");
/** The conv's output Y [N, K/kb, out_h, out_w, kb] from M [16, K/kb, P, kb]. */
te::Tensor winograd_output_nchwc(const te::Tensor& M, int64_t n, int64_t out_h, int64_t out_w, const std::string& name = "winograd_output");

/** U [16, K/kb, C/cb, cb, kb] = G g G^T of float32 weights [K, C, 3, 3]. */
NDArray winograd_weights(const NDArray& W, int64_t cb, int64_t kb);

}  // namespace kiln::ops

#endif  // KILN_OPS_WINOGRAD_H
