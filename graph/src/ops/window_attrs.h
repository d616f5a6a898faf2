// The sliding-window attributes Conv and the pools share (kernel_shape,
// strides, dilations, pads, auto_pad, ceil_mode), checked once and resolved
// to the geometry the computes take (kiln/ops/graph_nn.h).
#ifndef KILN_GRAPH_OPS_WINDOW_ATTRS_H
#define KILN_GRAPH_OPS_WINDOW_ATTRS_H

#include <vector>

#include "kiln/graph/op_registry.h"
#include "kiln/ops/graph_nn.h"

namespace kiln::graph::ops_detail {

/**
 * The windows over the spatial dims (2..) of input 0 for `kernel`: reads
 * strides, pads, auto_pad and, where the op has them, dilations and
 * ceil_mode. Fails naming the node when a list has the wrong length, a
 * value is out of range or the kernel is larger than the padded input.
 * With `pads_below_kernel` (pools), a pad must be smaller than the window,
 * so no window lies entirely in the padding. A symbolic spatial dim gets a
 * symbolic output (WindowDim::out_symbolic; out_dim() reads either).
 */
std::vector<ops::WindowDim> resolve_windows(const OpCall& call, const std::vector<int64_t>& kernel, bool pads_below_kernel);

/** The output extent of a resolved window as a Dim (symbolic when its input is). */
Dim out_dim(const ops::WindowDim& d);

/** The spatial attribute `name` (strides, pads...) of n * per_dim values (pads: 2 per dim), or `fallback` repeated when it is empty. */
std::vector<int64_t> spatial_attr(const OpCall& call, const char* name, size_t n, int64_t fallback, size_t per_dim = 1);

}  // namespace kiln::graph::ops_detail

#endif  // KILN_GRAPH_OPS_WINDOW_ATTRS_H
