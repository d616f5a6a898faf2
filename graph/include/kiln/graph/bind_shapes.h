/** \file
 * A graph with symbolic dims at given sizes: every shape variable replaced by
 * its value, every type inferred again. Tuning a dynamic model tunes these
 * static twins at the sizes the user expects, and compiling it finds their
 * records (the trace of a static twin replays on the symbolic kernel).
 */
#ifndef KILN_GRAPH_BIND_SHAPES_H
#define KILN_GRAPH_BIND_SHAPES_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/runtime/model.h"

namespace kiln::graph {

/** Shape variable name -> size. */
using ShapeBinding = std::map<std::string, int64_t>;

/** `d` with the bound variables replaced (a dim over others stays symbolic). */
Dim bind_dim(const Dim& d, const ShapeBinding& values);

/**
 * `g` with its shape variables bound: inputs of the bound types, every
 * operator re-made (types inferred again; Shape-valued attributes bound too).
 * Fused groups (kiln.fused) are bound inside. Throws kiln::Error when a size
 * breaks an operator's rules (the node's error), or is negative.
 */
Graph bind_shapes(const Graph& g, const ShapeBinding& values);

/** The shape variables of the graph's inputs, in the order they first appear. */
std::vector<std::string> shape_var_names(const Graph& g);

/**
 * The sizes a dynamic model is tuned at and takes records from, most likely
 * first: the product of each variable's likely sizes (`sizes`, most likely
 * first), a variable without any at ops::kDefaultSizeHint clamped into its
 * range (`ranges`, lo..hi). One binding per combination; empty for a static graph.
 */
std::vector<ShapeBinding> likely_bindings(const std::vector<std::string>& vars, const std::map<std::string, std::vector<int64_t>>& sizes,
                                          const std::map<std::string, ShapeRange>& ranges);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_BIND_SHAPES_H
