// The input gradient of a grouped (depthwise included) strided convolution,
// split by stride phase (conv_grad_grouped.cpp). Used by kiln.ConvGradInput.
#ifndef KILN_GRAPH_OPS_CONV_GRAD_GROUPED_H
#define KILN_GRAPH_OPS_CONV_GRAD_GROUPED_H

#include <cstdint>
#include <vector>

#include "kiln/ops/graph_nn.h"
#include "kiln/te/operation.h"

namespace kiln::graph::ops_detail {

/**
 * dX [xs] of a convolution with `G` > 1 groups and a stride above 1, from dY
 * [N, K, out...] and W [K, C/G, kernel...], computed per stride phase: the
 * input positions h = a * s + p of one phase p are reached by the taps
 * kh = (p + pad) mod s + t * s alone, from output a + (p + pad) div s - t,
 * so each phase is a small dense convolution of dY over t (no zeros of a
 * stride-dilated dY, no per-lane test of h mod s), vectorized along a; dX
 * interleaves the phases. Undefined where it does not apply: group 1, no
 * stride, a dilation.
 */
te::Tensor grouped_grad_input_by_phases(const te::Tensor& dY, const te::Tensor& W, const std::vector<ops::WindowDim>& dims, int64_t G,
                                        const std::vector<int64_t>& xs);

}  // namespace kiln::graph::ops_detail

#endif  // KILN_GRAPH_OPS_CONV_GRAD_GROUPED_H
