/** \file
 * The shape constraints of a graph with symbolic dims that compile cannot
 * prove and a run must check (model.h: ModelPlan::constraints): a Reshape
 * whose input and output element counts are equal only for some sizes
 * ([batch, n] to [batch, 2, 3] needs batch * n == batch * 6; the -1 of
 * [0, -1, 100] for [batch, seq, 768] needs seq * 768 to divide by 100).
 * Type inference lets such a reshape through (transform_shape.cpp) and
 * compile adds these to the plan, so that a run at shapes that break one
 * fails naming the node, the expression, the variables and their values,
 * before any kernel runs.
 */
#ifndef KILN_GRAPH_SHAPE_CONSTRAINTS_H
#define KILN_GRAPH_SHAPE_CONSTRAINTS_H

#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/runtime/model.h"

namespace kiln::graph {

/**
 * One constraint per Reshape of `g` (and of its nodes' bodies) whose counts
 * are not provably equal: Divisible (count % K == 0) for a -1 beside entries
 * whose product is the constant K, else Equal (input count == output count);
 * over `shape_vars` (ShapeExpr::param(i) is
 * shape_vars[i]; a plan's). Throws kiln::Error when a count reads a variable
 * not in the list (no run could tell its value).
 */
std::vector<ShapeConstraint> reshape_constraints(const Graph& g, const std::vector<std::string>& shape_vars);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_SHAPE_CONSTRAINTS_H
