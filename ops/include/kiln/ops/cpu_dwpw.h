/** \file
 * The fused schedule of a depthwise convolution and the 1x1 convolution that
 * reads it, both in the blocked layout (an inverted residual block's 3x3
 * depthwise -> ReLU6 -> 1x1 projection, which fuse_depthwise_pointwise puts
 * in one group). Unfused, the depthwise output (e.g. 144 channels x 56 x 56,
 * 1.8 MB) goes to memory and comes back for the 1x1 conv; here a tile of
 * the depthwise output, a few pixels of one row in all its channels (C x
 * tile floats, a few KB: L1), is computed and then read by the 1x1 conv for
 * all its output channels before the next tile, so it never leaves the cache.
 *
 * The loops: output tiles (batch x height x tiles of a row; the tile is the
 * 1x1 conv's register tile of pixels, from the target's vector registers,
 * kiln/ops/register_tile.h) in one parallel loop; per tile the depthwise
 * stage (bias and activation applied as it is stored, each pixel's taps
 * summed in vector registers over the block's channels), then the 1x1 conv
 * per output block on the tile's pixels x one block, its epilogue (bias,
 * residual add) on the tile's vectors.
 *
 * It takes a task of one output whose computed stages are: an optional
 * padding, a depthwise reduction (kiln::ops::depthwise_conv2d_nchwc: 5-D,
 * two reduce axes), elementwise stages, a 1x1 stride-1 reduction over the
 * whole of their result (conv2d_nchwc_general: four reduce axes, taps 1 x 1)
 * and elementwise stages to the output, every extent static.
 */
#ifndef KILN_OPS_CPU_DWPW_H
#define KILN_OPS_CPU_DWPW_H

#include <optional>
#include <string>

#include "kiln/ops/task.h"
#include "kiln/te/schedule.h"

namespace kiln::ops {

/** The fused depthwise + pointwise schedule of `task`; nullopt (and *why, when given) where the task is not that pair or the target no CPU. */
std::optional<te::Schedule> depthwise_pointwise_schedule(const Task& task, std::string* why = nullptr);

/** The pixels of the 1x1 conv's register tile over an output width `ow`, beside `vectors` vectors of output channels, from the target. */
int depthwise_pointwise_tile(const Target& target, int64_t ow, int vectors);

}  // namespace kiln::ops

#endif  // KILN_OPS_CPU_DWPW_H
