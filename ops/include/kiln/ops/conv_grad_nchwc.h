/** \file
 * The two gradients of a blocked ("NCHWc") conv2d (conv2d_nchwc_general in
 * layout.h, group 1), as compute DAGs the schedule rules tile as they tile
 * the forward conv: register tiles of output pixels (or input channels)
 * times one or two vectors of channels, the reduction unrolled inside.
 *
 * Layouts: X [N, ceil(C/cb), H, W, cb], dY [N, ceil(K/kb), OH, OW, kb]
 * (a blocked tensor may hold more channels than it has, its last block
 * padded), plain weights W [K, C, KH, KW].
 *
 * Data gradient (a transposed convolution): split by output phase, so no
 * product runs on the zeros a stride would insert into dY. Input rows
 * h = stride * q + phase receive the taps r with (h + pad - r * dilation)
 * divisible by the stride: per phase an ordinary stride-1 convolution of dY
 * (shifted and zero-padded once for all phases) by the flipped, transposed
 * weights of those taps, all phases' packed in one small stage
 * [phases, C/cb, K/kb, taps_h, taps_w, kb, cb] (the most taps of a phase).
 * With stride 1 there is one phase and the result is that convolution; with
 * more, a last stage interleaves the phases (a phase no tap reaches is zero).
 *
 * Weight gradient: a reduction over output pixels and the images of a batch
 * group into R [G, K/kb, C/cb, KH, cb, KW, kb] (each register tile: kernel
 * columns x input channels x one or two vectors of output channels: one
 * vector load of dY per vector and a broadcast of X per row, per pixel),
 * X zero-padded once; the G groups' partial sums added by the last stage,
 * which reads R back plain [K, C, KH, KW] (the padded channels dropped) or
 * packed as the forward's weights.
 */
#ifndef KILN_OPS_CONV_GRAD_NCHWC_H
#define KILN_OPS_CONV_GRAD_NCHWC_H

#include <cstdint>
#include <string>

#include "kiln/ops/layout.h"
#include "kiln/te/operation.h"

namespace kiln::ops {

/**
 * dX [N, ceil(C/cb), H, W, cb] of a blocked conv2d with parameters p, from
 * dY [N, ceil(K/kb), OH, OW, kb] and plain weights W [K, C, KH, KW]. The
 * channels dX's last block pads are zero; the ones dY's pads meet zero
 * weights. H and W are the input's extents (a stride leaves them ambiguous).
 * W may instead be the forward's packed weights [ceil(K/kb), ceil(C/cb), KH,
 * KW, cb, kb] (conv2d_nchwc_general's, padded channels zero); `channels` is
 * then C. Their repacking moves within 4 KiB blocks, the plain one gathers.
 */
te::Tensor conv2d_nchwc_grad_input(const te::Tensor& dY, const te::Tensor& W, const Conv2dParams& p, int64_t H, int64_t Wd, int64_t cb,
                                   const std::string& name = "conv_grad_input", int64_t channels = 0);

/**
 * dW [K, C, KH, KW] (plain) of a blocked conv2d with parameters p, from the
 * blocked input X [N, ceil(C/cb), H, W, cb] and dY [N, ceil(K/kb), OH, OW, kb].
 * K and C are the true channel counts (at most what the blocks hold).
 * With `packed`, dW comes in the forward's packed layout instead,
 * [ceil(K/kb), ceil(C/cb), KH, KW, cb, kb] (conv2d_nchwc_general's weights),
 * its padded channels zero: a copy of whole kb vectors, where the plain
 * layout transposes every element.
 */
te::Tensor conv2d_nchwc_grad_weight(const te::Tensor& X, const te::Tensor& dY, const Conv2dParams& p, int64_t K, int64_t C, int64_t KH, int64_t KW,
                                    const std::string& name = "conv_grad_weight", bool packed = false);

/**
 * The depthwise forms (group = C = K, W [C, 1, KH, KW], depthwise_conv2d_nchwc's
 * gradients): dY [N, C/b, OH, OW, b] and X [N, C/b, H, W, b] in the same
 * whole blocks (b divides C). dX [N, C/b, H, W, b] split by stride phase as
 * above, each phase one tap-by-tap product of dY and the flipped weights per
 * lane; dW [C, 1, KH, KW] from R [G, C/b, KH, KW, b], a reduction over the
 * output pixels and a batch group's images, the G groups summed.
 */
te::Tensor depthwise_nchwc_grad_input(const te::Tensor& dY, const te::Tensor& W, const Conv2dParams& p, int64_t H, int64_t Wd,
                                      const std::string& name = "conv_grad_input");
te::Tensor depthwise_nchwc_grad_weight(const te::Tensor& X, const te::Tensor& dY, const Conv2dParams& p, int64_t KH, int64_t KW,
                                       const std::string& name = "conv_grad_weight");

}  // namespace kiln::ops

#endif  // KILN_OPS_CONV_GRAD_NCHWC_H
