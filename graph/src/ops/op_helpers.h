// Shared pieces of the operator entries (graph/src/ops/*.cpp): type
// inference for the common shapes of operators, and registration of the
// elementwise families. Each op is still registered once, in its family's
// file; these only keep the entries short.
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
/** A scalar constant of `t` with value v. */
Expr scalar(DataType t, double v);

/** Registers an elementwise op of one input: out = f(x). */
void register_unary(const std::string& name, ops::UnaryFn f, const std::string& doc, std::vector<AttrSpec> attrs = {});
/** As register_unary, with the node's attributes (Clip's bounds, LeakyRelu's alpha). */
using UnaryAttrFn = std::function<Expr(const OpCall&, Expr)>;
void register_unary_attrs(const std::string& name, UnaryAttrFn f, const std::string& doc, std::vector<AttrSpec> attrs);
/** Registers a broadcast op of two inputs: out = f(a, b). */
void register_binary(const std::string& name, ops::BinaryFn f, const std::string& doc, DataType out_dtype = DataType::Void());

}  // namespace kiln::graph::ops_detail

#endif  // KILN_GRAPH_OPS_OP_HELPERS_H
