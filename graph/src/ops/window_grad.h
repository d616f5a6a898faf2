// What the gradient ops of windowed operators (Conv, MaxPool, AveragePool)
// share: their resolved window attributes, and the tap arithmetic run both
// ways -- forward (output position and tap -> input position, as the op
// reads) and reverse (input position and tap -> the output position whose
// window puts that tap there), which is how a gradient reaches an input
// without a scatter.
#ifndef KILN_GRAPH_OPS_WINDOW_GRAD_H
#define KILN_GRAPH_OPS_WINDOW_GRAD_H

#include <utility>
#include <vector>

#include "kiln/graph/op_registry.h"
#include "kiln/ops/graph_nn.h"
#include "kiln/te/operation.h"

namespace kiln::graph::ops_detail {

/** kernel_shape, strides, dilations and pads [begins..., ends...] of resolved windows (no auto_pad left). */
Attrs window_grad_attrs(const std::vector<ops::WindowDim>& dims);
/** The schema of those attributes (all required); with `input_shape` (ops whose output is the input's gradient). */
std::vector<AttrSpec> window_grad_specs(bool input_shape);
/** Windows back from those attributes; `in` and `out` are the spatial extents of the input and of the output gradient. */
std::vector<ops::WindowDim> grad_windows(const OpCall& call, const std::vector<int64_t>& in, const std::vector<int64_t>& out);

/** One reduce axis per spatial dim over the kernel taps. */
struct Taps {
  std::vector<IterVar> axes;
  std::vector<Expr> t;  // the tap per spatial dim
  explicit Taps(const std::vector<ops::WindowDim>& dims);
  /** The taps as one row-major index (the order a window is scanned in). */
  Expr flat(const std::vector<ops::WindowDim>& dims) const;
};

/** Input positions read by output positions `o` at taps `t`, and whether they are inside the input (undefined: always). */
std::pair<std::vector<Expr>, Expr> forward_taps(const std::vector<ops::WindowDim>& dims, const std::vector<Expr>& o, const std::vector<Expr>& t);
/** The output positions whose tap `t` reads input positions `h`, and whether there are such (undefined: always). */
std::pair<std::vector<Expr>, Expr> reverse_taps(const std::vector<ops::WindowDim>& dims, const std::vector<Expr>& h, const std::vector<Expr>& t);

/** `a && b` where either may be undefined (always true). */
Expr and_maybe(const Expr& a, const Expr& b);

}  // namespace kiln::graph::ops_detail

#endif  // KILN_GRAPH_OPS_WINDOW_GRAD_H
