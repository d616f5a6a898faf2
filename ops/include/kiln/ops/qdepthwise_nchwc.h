/** \file
 * The int8 depthwise convolution (group == channels) in the blocked channel
 * layout, in bytes:
 *
 *   X   [N, C/b, H, W, b]   uint8 or int8 activations
 *   Wd  [C/b, KH, KW, b]    int32 (or float32) weights minus their zero point
 *   acc [N, C/b, OH, OW, b] sums over the taps of x * w
 *
 * A depthwise conv has no reduction over channels (each lane is its own
 * channel, KH x KW taps), so the dot-product instructions' four-byte groups
 * have nothing to sum: each byte widens to a 32-bit lane and multiplies its
 * channel's weight (vpmovzxbd + vpmulld, or with float32 weights
 * vcvtdq2ps + an FMA, exact while taps * 255 * 128 < 2^24). Padding reads
 * `pad_byte` (the input zero point), so a padded tap adds x_zero * w and
 * the correction sum (x - x_zero) w = sum x w - x_zero sum w is one constant
 * per channel, as for qconv2d_nchwc.
 */
#ifndef KILN_OPS_QDEPTHWISE_NCHWC_H
#define KILN_OPS_QDEPTHWISE_NCHWC_H

#include <string>

#include "kiln/ops/layout.h"
#include "kiln/te/operation.h"

namespace kiln::ops {

/**
 * acc [N, C/b, OH, OW, b] (Wd's dtype: int32 or float32) = sum over the taps
 * of x' * w, x' the input bytes and the padding `pad_byte` (a value of X's
 * dtype); the caller subtracts pad_byte * sum w per channel.
 */
te::Tensor qdepthwise_conv2d_nchwc(const te::Tensor& X, const te::Tensor& Wd, const Conv2dParams& p, int pad_byte,
                                   const std::string& name = "qdwconv");

}  // namespace kiln::ops

#endif  // KILN_OPS_QDEPTHWISE_NCHWC_H
