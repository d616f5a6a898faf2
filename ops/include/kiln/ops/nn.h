/** \file
 * The operator library: compute definitions of common deep-learning ops as
 * tensor expressions. Each returns the output tensor; inputs are tensors the
 * caller made (placeholders or other ops). Layouts: NCHW for images, OIHW
 * for convolution weights, row-major matrices.
 */
#ifndef KILN_OPS_NN_H
#define KILN_OPS_NN_H

#include <string>

#include "kiln/codegen/target.h"
#include "kiln/te/operation.h"

namespace kiln::ops {

using te::Tensor;

/** C[i, j] = sum_k A[i, k] * B[k, j]. */
Tensor matmul(const Tensor& A, const Tensor& B, const std::string& name = "C");
/** C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]. */
Tensor batch_matmul(const Tensor& A, const Tensor& B, const std::string& name = "C");
/** Zero padding of dimensions 2 and 3 (H and W) of an NCHW or NCHWc tensor. */
Tensor pad2d(const Tensor& X, int pad_h, int pad_w, const std::string& name = "pad");
/** NCHW conv2d with OIHW weights; the padding stage is returned through `padded` if asked. */
Tensor conv2d_nchw(const Tensor& X, const Tensor& W, int stride, int pad, int dilation, const std::string& name = "conv", Tensor* padded = nullptr);
/** conv2d in the blocked layouts of CPU inference: input [N, C/cb, H, W, cb],
 * weights [K/kb, C/cb, KH, KW, cb, kb], output [N, K/kb, OH, OW, kb]. The kb
 * output channels of a pixel are contiguous (one or two vectors), as are the
 * kb weights of one (input channel, tap): the layout the tuner's register
 * tiles want. The layout change is the caller's (once per model for weights). */
Tensor conv2d_nchwc(const Tensor& X, const Tensor& W, int stride, int pad, const std::string& name = "conv", Tensor* padded = nullptr);
/** The channel block of a blocked layout: the largest divisor of channels not above preferred. */
int channel_block(int channels, int preferred);
/** conv2d_nchwc's default blocks for C input and K output channels on `target`:
 * cb = channel_block(C, lanes) (one vector of inputs per step), kb =
 * channel_block(K, 2 * lanes) (two vectors of outputs); lanes are the
 * target's fp32 lanes (8 on AVX2, 16 on AVX-512). Without a target: the host's. */
struct NchwcBlocks {
  int cb, kb;
};
NchwcBlocks nchwc_blocks(int in_channels, int out_channels, const Target& target);
NchwcBlocks nchwc_blocks(int in_channels, int out_channels);
/** Depthwise conv2d: W is [C, 1, KH, KW]. */
Tensor depthwise_conv2d_nchw(const Tensor& X, const Tensor& W, int stride, int pad, const std::string& name = "dwconv", Tensor* padded = nullptr);
/** Max pooling over kernel x kernel windows, NCHW. */
Tensor max_pool2d(const Tensor& X, int kernel, int stride, int pad, const std::string& name = "maxpool");
/** Average pooling (count includes padding), NCHW. */
Tensor avg_pool2d(const Tensor& X, int kernel, int stride, const std::string& name = "avgpool");
/** Softmax over the last axis of a 2-D tensor: max, exp, sum, divide stages. */
Tensor softmax(const Tensor& X, const std::string& name = "softmax");
/** Layer norm over the last axis of a 2-D tensor with gamma, beta of [N]. */
Tensor layer_norm(const Tensor& X, const Tensor& gamma, const Tensor& beta, float eps = 1e-5f, const std::string& name = "layernorm");
/** Transpose of a 2-D tensor. */
Tensor transpose(const Tensor& X, const std::string& name = "T");
/** Elementwise stages: add of two same-shape tensors, relu, gelu (tanh-free, erf form), bias add on the last axis. */
Tensor add(const Tensor& A, const Tensor& B, const std::string& name = "add");
Tensor relu(const Tensor& X, const std::string& name = "relu");
Tensor gelu(const Tensor& X, const std::string& name = "gelu");
Tensor bias_add(const Tensor& X, const Tensor& bias, const std::string& name = "bias_add");

}  // namespace kiln::ops

#endif  // KILN_OPS_NN_H
