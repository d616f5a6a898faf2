/** \file
 * The AMX schedule of an int8 or bfloat16 matmul (x86 with amx-tile and
 * amx-int8 / amx-bf16): the output in blocks of up to 32 x 32 (up to 128
 * rows, several row blocks, under one tile configuration where 8 or more
 * blocks remain for the parallel loop), the blocks in one parallel loop, and
 * each block's accumulator summed over all of K on AMX tiles (the nest
 * marked "amx", kiln/pass/amx.h, which the LLVM backend emits as tile code),
 * its epilogue (requantization, bias, activation) on vectors after it.
 * Before answering it lowers the schedule and reads the marked nest as the
 * backend will, so a form the tiles cannot load falls back (nullopt, *why).
 *
 * It takes a task whose one reduction stage sums dot_i8x4 or dot_bf16x2 of
 * two operands, A[..., m, q] and B[q, n] (or B in panels [n/nb, q, nb]), q
 * the packed words of K, every extent static, q up to 16 or a multiple of
 * 16, and whose output is that stage or an elementwise function of it of the
 * same shape. More reduce axes outside q (a blocked convolution's channel
 * blocks and taps, conv2d_nchwc_general with dot_bf16x2: rows m along the
 * output's width, n the output channels of a block) run inside the block
 * with the accumulators in tiles. An operand computed in the group (a padded
 * input) is stored whole first.
 */
#ifndef KILN_OPS_CPU_AMX_H
#define KILN_OPS_CPU_AMX_H

#include <optional>
#include <string>

#include "kiln/ops/task.h"
#include "kiln/te/schedule.h"

namespace kiln::ops {

/** Whether the target runs AMX tile code for `dot` ("i8" or "bf16"): x86 with amx-tile and amx-int8 / amx-bf16. */
bool target_has_amx(const Target& target, const std::string& dot);

/** The AMX schedule of `task` on its target; nullopt (and *why, when given) where the target has no AMX or the task does not suit it. */
std::optional<te::Schedule> amx_schedule(const Task& task, std::string* why = nullptr);

}  // namespace kiln::ops

#endif  // KILN_OPS_CPU_AMX_H
