/** \file
 * The hand schedule of a grouped convolution in the blocked layout
 * (conv2d_nchwc_general with group_blocks: ResNeXt's 3x3 convs of 32 groups,
 * RegNet's), its bias and activation fused after it.
 *
 * A grouped conv reduces over one group's channels only (16 to 32 a block,
 * 144 to 288 multiply-adds a pixel), so its padded input is read back far
 * more often per byte than it is computed: the search space's default either
 * padded the whole input once at root (a copy the size of the input, 1 to
 * 2 MB, that fell out of L2 before the conv read it back) or inlined the
 * padding, a bounds test in every broadcast of the register tile (ResNeXt's
 * stride-2 convs ran at a third of their stride-1 neighbours' rate). Here
 * the padding is computed per row of register tiles: the few input rows one
 * row of tiles reads (one group's blocks, a few KB), once, in L1, with no
 * test left in the tile.
 *
 * The loops: images x groups of output blocks x rows of tiles in one
 * parallel loop; per iteration the padded input rows, then the register
 * tiles along the row: `rows` x `cols` output pixels x `blocks` output
 * blocks (blocks of one group read the same input channels and share each
 * broadcast; where one group's blocks cannot fill the registers a tile
 * spans several groups), each summed over its group's input blocks, the
 * taps and the block's channels (8 a step, unrolled) before its epilogue.
 *
 * It takes a task of one output whose computed stages are: an optional
 * input stage (the padding), a blocked conv reduction reading fewer input
 * channels than its input holds (5-D, four reduce axes: channel blocks,
 * kernel rows, kernel columns, a block's channels; weights a placeholder)
 * and elementwise stages of its shape to the output; every extent static.
 */
#ifndef KILN_OPS_CPU_GROUPED_CONV_H
#define KILN_OPS_CPU_GROUPED_CONV_H

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/ops/task.h"
#include "kiln/te/schedule.h"

namespace kiln::ops {

/** A grouped conv's register tile: output blocks (of one group) x rows x columns of pixels. */
struct GroupedConvTile {
  int64_t blocks = 1, rows = 1, cols = 1;
};

/**
 * The register tile for an `oh` x `ow` output of `blocks` blocks, each
 * `vectors` vectors wide, `blocks_per_group` of them reading the same input
 * channels (sharing each broadcast), from the target's vector registers: of
 * the tiles whose accumulators fit beside their weight vectors, one
 * broadcast and a spare register, the fastest by a model of FMA, load and
 * latency cycles (the larger tile on a tie); rows divide `oh`, columns
 * divide `ow` unless a tail tile gains 10% (a prime width).
 */
GroupedConvTile grouped_conv_tile(const Target& target, int64_t oh, int64_t ow, int vectors, int64_t blocks, int64_t blocks_per_group);

/** The schedule above for `task`; nullopt (and *why, when given) where the task is no such grouped conv or the target no CPU. */
std::optional<te::Schedule> grouped_conv_schedule(const Task& task, std::string* why = nullptr, GroupedConvTile* tile = nullptr);

}  // namespace kiln::ops

#endif  // KILN_OPS_CPU_GROUPED_CONV_H
