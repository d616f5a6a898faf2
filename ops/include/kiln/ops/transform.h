/** \file
 * Shape and index-remapping computes (the operator library's side of the
 * graph's Reshape, Transpose, Concat, Slice, Gather, Pad, Resize ...). Each
 * output element reads input elements at an index map, so every compute
 * here works for any dtype (float, int64 shape vectors, bool).
 *
 * Extents may be symbolic (te.var shape variables) where an overload takes
 * Exprs, and in the computes that read their input's shape (permute_dims,
 * squeeze, expand_dims, concat, gather). Parameters are already normalised (non-negative
 * axes, clamped slice bounds): the ONNX rules live with the graph's type
 * inference, which must agree with these shapes anyway. The pure helpers
 * below (slice_range, resize_source_coord) are shared by both.
 */
#ifndef KILN_OPS_TRANSFORM_H
#define KILN_OPS_TRANSFORM_H

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ops/broadcast.h"
#include "kiln/te/operation.h"

namespace kiln::ops {

/** X reinterpreted as `shape` in row-major order (element counts must agree). */
te::Tensor reshape(const te::Tensor& X, const std::vector<int64_t>& shape, const std::string& name = "reshape");
/**
 * The same to extents that may be symbolic; their product must provably be X's (same_product), else kiln::Error
 * naming both shapes; with `counts_checked_at_run_time` (the graph recorded the equality as a shape constraint
 * that every run checks, model.h) the product need only be equal at run time.
 */
te::Tensor reshape(const te::Tensor& X, const std::vector<Expr>& shape, const std::string& name = "reshape", bool counts_checked_at_run_time = false);
/** out[i_0..i_{r-1}] = X[j] with j[perm[k]] = i_k (numpy's transpose(perm); nn.h's transpose is the 2-D one). */
te::Tensor permute_dims(const te::Tensor& X, const std::vector<int>& perm, const std::string& name = "transpose");
/** Drops the dimensions `axes` (sorted, distinct, each of extent 1). */
te::Tensor squeeze(const te::Tensor& X, const std::vector<int>& axes, const std::string& name = "squeeze");
/** Inserts dimensions of extent 1 at `axes` of the output (sorted, distinct, in [0, rank + axes.size())). */
te::Tensor expand_dims(const te::Tensor& X, const std::vector<int>& axes, const std::string& name = "unsqueeze");
/** Joins tensors of one rank and dtype along `axis` (other dimensions equal). */
te::Tensor concat(const std::vector<te::Tensor>& Xs, int axis, const std::string& name = "concat");
/** Splits X along `axis` into pieces of the given extents (summing to X's). */
std::vector<te::Tensor> split(const te::Tensor& X, int axis, const std::vector<int64_t>& sizes, const std::string& name = "split");

/** One axis of a slice after normalisation: out[i] = in[start + i * step], i < count. */
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};
/** ONNX/numpy slice bounds on an axis of extent `dim`: negative indices count from the end, bounds clamp, step != 0. */
SliceRange slice_range(int64_t dim, int64_t start, int64_t end, int64_t step);
/** out[i] = X[r_k.start + i_k * r_k.step] with one range per dimension. */
te::Tensor strided_slice(const te::Tensor& X, const std::vector<SliceRange>& ranges, const std::string& name = "slice");
/** A SliceRange whose start and count may be symbolic (a slice of a dynamic axis: its bounds clamp at run time). */
struct SliceExtent {
  Expr start;
  int64_t step = 1;
  Expr count;
};
te::Tensor strided_slice(const te::Tensor& X, const std::vector<SliceExtent>& ranges, const std::string& name = "slice");

/**
 * numpy's take(X, I, axis): out has shape X[:axis] + I + X[axis+1:]. Indices
 * (any integer dtype) below zero count from the end; indices still out of
 * range are clamped into it (a kernel cannot raise; this keeps reads in bounds).
 */
te::Tensor gather(const te::Tensor& X, const te::Tensor& I, int axis, const std::string& name = "gather");
/** X broadcast (numpy rules) to `shape`; `shape` must be the broadcast of X's shape and itself. */
te::Tensor broadcast_to(const te::Tensor& X, const std::vector<int64_t>& shape, const std::string& name = "expand");
te::Tensor broadcast_to(const te::Tensor& X, const std::vector<Expr>& shape, const std::string& name = "expand");

enum class PadMode : uint8_t { Constant, Reflect, Edge };
/**
 * Pads (or, with negative amounts, crops) each dimension by before[k] and
 * after[k]. Constant fills with `value` (X's dtype); Reflect mirrors without
 * repeating the edge (numpy's "reflect", periodically when the pad exceeds
 * the extent); Edge repeats the border element.
 */
te::Tensor pad(const te::Tensor& X, const std::vector<int64_t>& before, const std::vector<int64_t>& after, PadMode mode, Expr value,
               const std::string& name = "pad");

enum class CoordMode : uint8_t { HalfPixel, PytorchHalfPixel, AlignCorners, Asymmetric };
enum class NearestMode : uint8_t { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };
/** The input coordinate of output coordinate x (float) on an axis resized from in_len to out_len with `scale` (ONNX's formulas). */
Expr resize_source_coord(Expr x, int64_t in_len, int64_t out_len, double scale, CoordMode mode);
/** Nearest-neighbour resize of every dimension to out_shape; scales[k] = out/in as ONNX defines it. */
te::Tensor resize_nearest(const te::Tensor& X, const std::vector<int64_t>& out_shape, const std::vector<double>& scales, CoordMode coord,
                          NearestMode nearest, const std::string& name = "resize");
/** Bilinear resize of the last two dimensions (float X); the leading ones keep their extent. */
te::Tensor resize_bilinear(const te::Tensor& X, const std::vector<int64_t>& out_shape, const std::vector<double>& scales, CoordMode coord,
                           const std::string& name = "resize");

/** A tensor of `shape` whose every element is `value`. */
te::Tensor fill(const std::vector<int64_t>& shape, Expr value, const std::string& name = "fill");
/** [start, start + delta, ...] of n elements of `dtype`. */
te::Tensor arange(double start, double delta, int64_t n, DataType dtype, const std::string& name = "range");

}  // namespace kiln::ops

#endif  // KILN_OPS_TRANSFORM_H
