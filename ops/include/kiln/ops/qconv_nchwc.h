/** \file
 * The int8 convolution of the dot-product instructions in the blocked
 * channel layout (the float NCHWc convs' layout, in bytes):
 *
 *   X   [N, C/cb, H, W, cb]            uint8 or int8 activations
 *   W4  [K/kb, C/cb, KH, KW, cb/4, kb] int32: the weights' signed bytes,
 *                                      four input channels to a word
 *   acc [N, K/kb, OH, OW, kb]          int32 sums of (x - x_zero) * w
 *
 * The input is read as byte quads along its block's channels (uint32, one
 * broadcast per pixel and quad), so that acc += dot_i8x4(quad, W4 vector)
 * is one vpdpbusd per 16 output channels x 4 input channels. int8
 * activations are moved to uint8 by +128 (the instruction's unsigned side);
 * padding reads the (moved) zero point, so that a padded tap adds
 * (x_zero - x_zero) * w = 0 and the whole correction is one per-channel
 * constant: sum (x - x_zero) w = sum x w - x_zero * sum w (qconv_offsets).
 */
#ifndef KILN_OPS_QCONV_NCHWC_H
#define KILN_OPS_QCONV_NCHWC_H

#include <string>

#include "kiln/ops/layout.h"
#include "kiln/te/operation.h"

namespace kiln::ops {

/**
 * X [N, C/cb, H, W, cb] (uint8, or int8 moved by +128) as uint32 byte quads
 * [N, C/cb, H + pads, W + pads, cb/4], the padding filled with `pad_byte`
 * (the moved input zero point) in all four bytes.
 */
te::Tensor pad_quads_nchwc(const te::Tensor& X, const Conv2dParams& p, int pad_byte, const std::string& name = "quads");
/**
 * The int32 sums over the input channels and taps of dot_i8x4(quads, W4):
 * acc [N, K/kb, OH, OW, kb] = sum x' w, x' the (moved) input bytes and
 * padding; the caller subtracts x_zero' * sum w per output channel.
 */
te::Tensor qconv2d_nchwc(const te::Tensor& X, const te::Tensor& W4, const Conv2dParams& p, int pad_byte, const std::string& name = "qconv");

}  // namespace kiln::ops

#endif  // KILN_OPS_QCONV_NCHWC_H
