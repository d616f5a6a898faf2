/** \file
 * Which blocked 1 x 1 convolutions stream their weights from L3 by default.
 *
 * On a target of 32 vector registers (AVX-512) the default schedule of a
 * 1 x 1 convolution whose weights outgrow every target's L2 over a small
 * image streams its input-channel blocks (ops/src/search_space_seeds.cpp,
 * stream_l3_weights): each step's few KiB of weights serve every pixel of
 * the image from L1. The graph's layout defaults (default_conv_cap) ask the
 * same question, so it lives here, shared by both.
 */
#ifndef KILN_OPS_STREAMED_WEIGHTS_H
#define KILN_OPS_STREAMED_WEIGHTS_H

#include <cstdint>

namespace kiln::ops {

/** Weight bytes from which a 1 x 1 conv's weights count as beyond every target's L2. */
constexpr int64_t kStreamedL3WeightBytes = 4 << 20;
/** The most bytes of output a streamed conv keeps as its accumulator (one output-channel block, all its rows). */
constexpr int64_t kStreamedAccumulatorBytes = 16 << 10;

/**
 * Whether a 1 x 1 conv of `in_channels` -> `out_channels` over `out_pixels`
 * output pixels (all images), in output blocks of `out_block` channels of
 * `elem_bytes` each, streams its weights from L3 by default on a target of
 * `registers` vector registers.
 */
inline bool streams_1x1_weights_from_l3(int64_t in_channels, int64_t out_channels, int64_t out_pixels, int64_t out_block, int64_t elem_bytes,
                                        int registers) {
  return registers > 16 && in_channels * out_channels * elem_bytes >= kStreamedL3WeightBytes &&
         out_pixels * out_block * elem_bytes <= kStreamedAccumulatorBytes;
}

}  // namespace kiln::ops

#endif  // KILN_OPS_STREAMED_WEIGHTS_H
