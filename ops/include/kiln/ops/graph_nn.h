/** \file
 * The neural-network computes of the graph compiler's operators (Conv, Gemm,
 * MatMul, pooling, reductions, Softmax, LayerNormalization), in ONNX's
 * semantics: any spatial rank the op allows, asymmetric pads, groups,
 * numpy batching. Unlike the fixed-shape functions of nn.h, these take the
 * geometry the graph's type inference resolved (WindowDim), so the shapes
 * the compute produces are those inference announced.
 *
 * Every heavy compute is a DAG the schedule rules tile: a padding stage
 * (only when some pad is positive), then one reduction whose reduce axes
 * are the contraction, then separate elementwise stages (bias, alpha/beta,
 * divisors) that the rules fuse as the reduction's epilogue.
 */
#ifndef KILN_OPS_GRAPH_NN_H
#define KILN_OPS_GRAPH_NN_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/te/operation.h"

namespace kiln::ops {

using te::Tensor;

// ---------------------------------------------------------------- windows

/** ONNX's auto_pad. */
enum class AutoPad : uint8_t { NotSet, SameUpper, SameLower, Valid };
/** Parses "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"; throws kiln::Error naming the value otherwise. */
AutoPad parse_auto_pad(const std::string& s);

/** One spatial dimension of a sliding window (a conv's or a pool's). */
struct WindowDim {
  int64_t in = 1;      ///< input extent
  int64_t kernel = 1;  ///< kernel extent (before dilation)
  int64_t stride = 1;
  int64_t dilation = 1;
  int64_t pad_begin = 0;
  int64_t pad_end = 0;
  int64_t out = 0;  ///< output extent (filled by resolve_window)
  /**
   * A symbolic input extent (a dynamic image size): `in` is then unused and
   * resolve_window sets out_symbolic, an expression of it; the kernel,
   * stride, dilation and pads stay static.
   */
  Expr in_symbolic;
  Expr out_symbolic;
  /** A symbolic extent with ceil rounding (set by resolve_window): the last window may overhang the end pad. */
  bool ceil_symbolic = false;
  /** The extent the dilated kernel spans: (kernel - 1) * dilation + 1. */
  int64_t span() const { return (kernel - 1) * dilation + 1; }
  bool is_symbolic() const { return in_symbolic.defined(); }
  /** in and out as index expressions (symbolic or constant). */
  Expr in_extent() const;
  Expr out_extent() const;
};

/**
 * Sets d->out and, for SAME_* and VALID, d->pad_begin and d->pad_end, by
 * ONNX's rules: SAME gives out = ceil(in / stride) with the odd pad at the
 * end (UPPER) or the beginning (LOWER); NOTSET uses the given pads, floor
 * or (ceil_mode) ceil rounding, where a last window that would start in the
 * end padding is dropped (as PyTorch does). out may come out <= 0 when the
 * kernel is larger than the padded input: the caller reports that.
 * A symbolic input (in_symbolic) gets out_symbolic = floor((in + pads -
 * span) / stride) + 1; SAME padding only with stride 1 (its pads are then
 * static) and no ceil_mode: kiln::Error names what is refused.
 */
void resolve_window(WindowDim* d, AutoPad mode, bool ceil_mode);

/** Pads dimensions 2.. of X (the spatial ones of NC...) by dims' pads with `value`. */
Tensor pad_spatial(const Tensor& X, const std::vector<WindowDim>& dims, double value, const std::string& name = "pad");

// ---------------------------------------------------------------- conv, gemm, matmul

/**
 * Convolution of X [N, C, spatial...] with W [K, C/group, kernel...] (1 to 3
 * spatial dims), dims resolved: Y[n, k, o...] = sum over (rc, r...) of
 * P[n, g(k)*C/group + rc, o*stride + r*dilation] * W[k, rc, r...], P the
 * padded X (a stage of its own when a pad is positive; returned through
 * `padded`). Reduce axes of extent 1 are left out (a 1x1 conv sums over rc
 * alone, a depthwise one over its window alone). No bias: see add_channel_bias.
 */
Tensor conv_nchw(const Tensor& X, const Tensor& W, const std::vector<WindowDim>& dims, int64_t group, const std::string& name = "conv",
                 Tensor* padded = nullptr);
/**
 * The same convolution (group 1) computed with the output channel innermost,
 * for the tuner's register tiles: the weights are transposed to
 * [C, kernel..., K] (a stage of their own), the reduction is
 * T[n, o..., k] = sum over (rc, r...) of P[n, rc, o*stride + r*dilation] *
 * Wt[rc, r..., k], so a tile's vectors run along k through contiguous
 * weights while P is read one broadcast scalar at a time; a last stage adds
 * the bias (B may be undefined) and writes NCHW. Padding and extent-1
 * reduce axes as conv_nchw. `product` multiplies an X and a W element (a * b
 * when empty; bf16_pairs.h passes its pair dot product, X and W then being
 * bfloat16 pairs along C).
 */
Tensor conv_channels_last(const Tensor& X, const Tensor& W, const Tensor& B, const std::vector<WindowDim>& dims, const std::string& name = "conv",
                          const std::function<Expr(Expr, Expr)>& product = {});
/** Whether conv_channels_last suits a group-1 conv of K output channels: enough of them for whole vectors. */
bool prefer_channels_last(int64_t group, int64_t out_channels);
/** Y[n, k, ...] + B[k]: the bias as an elementwise stage after the reduction. */
Tensor add_channel_bias(const Tensor& Y, const Tensor& B, const std::string& name = "bias");

/** The output shape of numpy matmul of shapes a and b; throws kiln::Error naming both shapes when they do not fit. */
std::vector<int64_t> matmul_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b);
/** The same over extents that may be symbolic (broadcast.h's rules: a symbolic extent must match provably). */
std::vector<Expr> matmul_shape(const std::vector<Expr>& a, const std::vector<Expr>& b);
/**
 * numpy matmul: 1-D operands are promoted (and the promoted dimension
 * dropped from the result), batch dimensions broadcast. One reduction over
 * k with the batch, row and column dims as its spatial axes; A is read
 * with k innermost.
 */
Tensor matmul_nd(const Tensor& A, const Tensor& B, const std::string& name = "matmul");
/** matmul_nd with the product of an A and a B element given (a * b above; bf16_pairs.h passes its pair dot product). */
Tensor matmul_nd(const Tensor& A, const Tensor& B, const std::string& name, const std::function<Expr(Expr, Expr)>& product);
/**
 * alpha * A' B' + beta * C (A' = A or A^T, B' likewise; C broadcast to [M, N], may be undefined); the scaling is a stage after the reduction.
 * `product` multiplies an A' and a B' element (a * b when empty; bf16_pairs.h passes its pair dot product).
 */
Tensor gemm(const Tensor& A, const Tensor& B, const Tensor& C, double alpha, double beta, bool trans_a, bool trans_b,
            const std::string& name = "gemm", const std::function<Expr(Expr, Expr)>& product = {});

// ---------------------------------------------------------------- pooling, reductions, normalisation

/** Max pooling of X [N, C, spatial...] (or blocked [N, C/b, spatial..., b]) over resolved windows; padding never wins. */
Tensor max_pool(const Tensor& X, const std::vector<WindowDim>& dims, const std::string& name = "maxpool");
/**
 * Average pooling: a window sum, then a stage dividing by the window's
 * size: the elements inside X when !count_include_pad, else inside the
 * padded X (a ceil_mode window may still overhang that).
 */
Tensor avg_pool(const Tensor& X, const std::vector<WindowDim>& dims, bool count_include_pad, const std::string& name = "avgpool");

enum class ReduceOp : uint8_t { Sum, Mean, Max, Min };
/** Reduces X over `axes` (normalised, distinct); keepdims keeps them as 1s. An empty axes list reduces nothing (a copy). */
Tensor reduce(const Tensor& X, ReduceOp op, const std::vector<int>& axes, bool keepdims, const std::string& name = "reduce");

/** Softmax along one axis (normalised), numerically stable: max, exp(x - max), sum, divide. */
Tensor softmax_axis(const Tensor& X, int axis, const std::string& name = "softmax");
/**
 * Layer normalisation over dims axis..rank-1 of X: (x - mean) / sqrt(var +
 * eps) * scale + bias, mean and (biased) variance of those dims. scale and
 * bias broadcast to X's normalised shape; bias may be undefined.
 */
Tensor layer_norm_axes(const Tensor& X, const Tensor& scale, const Tensor& bias, int axis, double eps, const std::string& name = "layernorm");

}  // namespace kiln::ops

#endif  // KILN_OPS_GRAPH_NN_H
