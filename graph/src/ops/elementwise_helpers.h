// Shared pieces of the elementwise operator family (elementwise.cpp,
// activation.cpp, logical.cpp, batch_norm.cpp): dtype classes with their
// checks, broadcasting of any number of inputs, scalar constant inputs, and
// registration of unary and broadcast ops whose infer checks dtypes (the
// compute of a float op on an int tensor would silently change its dtype).
#ifndef KILN_GRAPH_OPS_ELEMENTWISE_HELPERS_H
#define KILN_GRAPH_OPS_ELEMENTWISE_HELPERS_H

#include <functional>
#include <string>
#include <vector>

#include "kiln/graph/autodiff.h"
#include "op_helpers.h"

namespace kiln::graph::ops_detail {

/** The dtypes an operator accepts. */
enum class DTypes : uint8_t {
  Float,    ///< float16/32/64 (bfloat16)
  Signed,   ///< floats and signed integers
  Numeric,  ///< floats and all integers (not bool)
  Bool,     ///< bool only
  Any,
};
bool dtype_in(DataType t, DTypes k);
/** "a float tensor (float16, float32 or float64)", ... for error messages. */
const char* dtypes_name(DTypes k);
/** Fails unless present input i's dtype is in k: "<what> has dtype int32; <Op> needs ...". */
void expect_dtype(const OpCall& call, int i, DTypes k, const std::string& what);
/** Fails unless inputs i and j (both present) have one dtype; the message names both. */
void expect_same_dtype(const OpCall& call, int i, int j);
/** The broadcast shape of the present inputs listed (all present inputs when `which` is empty). */
Shape broadcast_inputs(const OpCall& call, const std::vector<int>& which = {});
/** The one value of a constant input of any numeric or bool dtype; fails unless it has one element. */
double scalar_constant(const OpCall& call, int i, const char* what);

/** f with the node's call (for attributes and constant inputs). */
using CallUnaryFn = std::function<Expr(const OpCall&, Expr)>;
using CallNaryFn = std::function<Expr(const OpCall&, const std::vector<Expr>&)>;

/** An Elementwise op out = f(x) of a dtype in `dtypes`; output dtype `out` (Void: the input's). Sharding: elementwise_rule; cost: one op per element. */
OpDef unary_def(const std::string& name, const std::string& doc, DTypes dtypes, CallUnaryFn f, std::vector<AttrSpec> attrs = {},
                DataType out = DataType::Void());
/** A Broadcast op of min..max inputs of one dtype in `dtypes`: out = f(xs); output dtype `out` (Void: the inputs'). Sharding and cost as unary_def's. */
OpDef broadcast_def(const std::string& name, const std::string& doc, int min_inputs, int max_inputs, DTypes dtypes, CallNaryFn f,
                    DataType out = DataType::Void());

/** d with its gradient set (so a registration reads register_op(with_grad(unary_def(...), grad))). */
inline OpDef with_grad(OpDef d, GradientFn f) {
  d.gradient = std::move(f);
  return d;
}
/** The gradient of a one-input elementwise op: g * f'(x), written by `df` from the builder and g. */
using UnaryGradFn = std::function<Value(GradBuilder& b, const Value& g)>;
GradientFn unary_grad(UnaryGradFn df);

}  // namespace kiln::graph::ops_detail

#endif  // KILN_GRAPH_OPS_ELEMENTWISE_HELPERS_H
