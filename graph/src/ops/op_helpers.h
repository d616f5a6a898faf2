// Shared pieces of the operator entries (graph/src/ops/*.cpp): type
// inference for the common shapes of operators, and the per-element cost.
// Each op is still registered once, in its family's file; these only keep
// the entries short.
#ifndef KILN_GRAPH_OPS_OP_HELPERS_H
#define KILN_GRAPH_OPS_OP_HELPERS_H

#include <string>
#include <vector>

#include "kiln/graph/op_registry.h"
#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"

namespace kiln::graph::ops_detail {

/** Normalises an axis in [-rank, rank) to [0, rank); fails naming the op otherwise. */
int normalize_axis(const OpCall& call, int64_t axis, int rank);
/** Output 0 has input 0's type. */
std::vector<TensorType> same_as_input(const OpCall& call);
/** Inputs (all present ones) broadcast; dtype of input 0 (all must agree unless `mixed_dtypes`). */
std::vector<TensorType> broadcast_types(const OpCall& call, bool mixed_dtypes = false);
/**
 * numpy broadcasting of two shapes whose dims may be symbolic. A symbolic
 * dim is treated as not 1 (its size is unknown until the model runs, and a
 * kernel cannot broadcast by a run-time choice): it must equal the other
 * side's dim (Dim ==, provably) or meet a 1. Static shapes behave (and fail)
 * as ops::broadcast_shape; a mismatch fails naming both dims.
 */
Shape broadcast_dims(const OpCall& call, const Shape& a, const Shape& b);
/** numpy matmul's output shape of a and b (dims may be symbolic: K must agree provably, batch dims broadcast); fails naming both shapes. */
Shape matmul_dims(const OpCall& call, const Shape& a, const Shape& b);
/** The sentence added to a mismatch involving a symbolic dim (empty for two static ones): the fix, one shape-variable name or a size. */
std::string same_name_hint(const Dim& a, const Dim& b);
/** A scalar constant of `t` with value v. */
Expr scalar(DataType t, double v);

/** The cost of an op doing `flops_per_element` operations per output element (elementwise ops); traffic: the default. */
CostFn per_element_cost(double flops_per_element = 1);

}  // namespace kiln::graph::ops_detail

#endif  // KILN_GRAPH_OPS_OP_HELPERS_H
