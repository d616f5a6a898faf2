/** \file
 * Blocked-channel ("NCHWc") layouts for graph-level layout planning: the
 * layout changes, and convolutions in the blocked layout with the general
 * parameters models use (asymmetric padding, separate strides and
 * dilations per axis, depthwise). A blocked tensor [N, C/b, H, W, b] keeps
 * the b channels of a pixel contiguous: one or two vectors, the layout the
 * tuner's register tiles want (see conv2d_nchwc in nn.h).
 */
#ifndef KILN_OPS_LAYOUT_H
#define KILN_OPS_LAYOUT_H

#include <functional>
#include <string>

#include "kiln/te/operation.h"

namespace kiln::ops {

struct Conv2dParams {
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int dilation_h = 1, dilation_w = 1;
};

/** Zero padding of dimensions 2 and 3 of an NCHW or NCHWc tensor, possibly asymmetric. */
te::Tensor pad_hw(const te::Tensor& X, int top, int left, int bottom, int right, const std::string& name = "pad");
/**
 * Changes the channel blocking of a 4-D NCHW tensor (block 0) or a 5-D
 * blocked one: to_block 0 gives NCHW, b > 0 gives [N, ceil(C/b), H, W, b].
 * `channels` is the tensor's true channel count C (0: all the input holds,
 * which must then split into blocks of to_block). A blocked tensor may hold
 * more than C channels, the last block padded: blocking pads it with zeros
 * and unblocking drops it, so 58 channels run as 64 in whole vectors.
 */
te::Tensor change_channel_block(const te::Tensor& X, int from_block, int to_block, const std::string& name = "layout", int64_t channels = 0);
/**
 * Channel index maps between blocked tensors [N, ceil(C/b), H, W, b] (each
 * holding C true channels, the last block possibly padded), to a blocked
 * output of block `to` whose padded tail reads as zero: no trip through NCHW.
 *
 * channel_permute_nchwc: output channel j (0 <= j < count) is input channel
 * perm(start + j), where perm(t) = (t % groups) * (C / groups) + t / groups
 * is a channel shuffle of `groups` (ShuffleNet's Reshape-Transpose-Reshape;
 * groups 1 is the plain order, so a slice or a re-blocking).
 */
te::Tensor channel_permute_nchwc(const te::Tensor& X, int64_t channels, int64_t groups, int64_t start, int64_t count, int to,
                                 const std::string& name = "channel_permute");
/** The channels of several blocked tensors (channels[k] true channels each, their own blocks) one after another. */
te::Tensor channel_concat_nchwc(const std::vector<te::Tensor>& Xs, const std::vector<int64_t>& channels, int to, const std::string& name = "channel_concat");
/**
 * conv2d of a blocked input [N, C/cb, H, W, cb] and weights [K/kb, C/cb, KH, KW, cb, kb] to [N, K/kb, OH, OW, kb].
 * Grouped (group_blocks > 0): weights [K/kb, R, KH, KW, cb, kb], and output block k reads the R input blocks
 * from (k / group_blocks) * R on (input [N, (K/kb / group_blocks) * R, H, W, cb]): a block inside a group
 * (R = group's C / cb, group_blocks = group's K / kb), or one spanning whole groups (R = group_blocks = 1,
 * the weights zero between groups).
 * The input may come in a wider block xb, a multiple of cb ([N, C/xb, H, W, xb], the same channels): input
 * channel c is read at [c / xb, c % xb], so a conv computing in blocks of cb needs no relayout of an input
 * its producer wrote in blocks of xb (a grouped conv in one vector between two-vector neighbours).
 * `product` multiplies an input and a weight element (a * b when empty); the
 * bfloat16 form passes dot_bf16x2, X and W then holding bfloat16 pairs along
 * the block's channels ([N, C/cb, H, W, cb/2] and [K/kb, C/cb, KH, KW, cb/2, kb]).
 */
te::Tensor conv2d_nchwc_general(const te::Tensor& X, const te::Tensor& W, const Conv2dParams& p, const std::string& name = "conv", int64_t group_blocks = 0,
                                const std::function<Expr(Expr, Expr)>& product = {});
/** Depthwise conv2d of a blocked input [N, C/b, H, W, b] and weights [C/b, KH, KW, b] to [N, C/b, OH, OW, b]. */
te::Tensor depthwise_conv2d_nchwc(const te::Tensor& X, const te::Tensor& W, const Conv2dParams& p, const std::string& name = "dwconv");

/**
 * A [..., M, K] times B packed into panels Bp [N/nb, K, nb] (the nb columns
 * of a panel contiguous per k): C[..., i, j] = sum_k A[..., i, k] * Bp[j/nb, k, j%nb],
 * C [..., M, N]. Constant weights are packed once at compile time, so the
 * register tile's vectors read contiguous memory along k. `product` as
 * conv2d_nchwc_general's (dot_bf16x2: A and the panels bfloat16 pairs along K).
 */
te::Tensor matmul_packed_b(const te::Tensor& A, const te::Tensor& Bp, const std::string& name = "matmul",
                           const std::function<Expr(Expr, Expr)>& product = {});

}  // namespace kiln::ops

#endif  // KILN_OPS_LAYOUT_H
