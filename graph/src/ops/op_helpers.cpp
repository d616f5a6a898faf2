#include "op_helpers.h"

#include "kiln/support/error.h"

namespace kiln::graph::ops_detail {

int normalize_axis(const OpCall& call, int64_t axis, int rank) {
  if (axis < -rank || axis >= std::max(rank, 1))
    call.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

std::vector<TensorType> same_as_input(const OpCall& call) { return {call.input_types[0]}; }

std::vector<TensorType> broadcast_types(const OpCall& call, bool mixed_dtypes) {
  std::vector<int64_t> shape = call.input_types[0].shape;
  for (int i = 1; i < call.num_inputs(); ++i) {
    if (!call.has_input(i)) continue;
    if (!mixed_dtypes && call.input_types[i].dtype != call.input_types[0].dtype)
      call.fail("inputs have dtypes " + call.input_types[0].dtype.str() + " and " + call.input_types[i].dtype.str() + "; they must agree (insert a Cast)");
    try {
      shape = ops::broadcast_shape(shape, call.input_types[i].shape);
    } catch (const Error& e) {
      call.fail(e.what());
    }
  }
  return {TensorType{shape, call.input_types[0].dtype}};
}

Expr scalar(DataType t, double v) { return make_const(t, v); }

CostFn per_element_cost(double flops_per_element) {
  return [flops_per_element](const OpCall&, const std::vector<TensorType>& outputs) {
    OpCost c;
    for (const TensorType& t : outputs) c.flops += flops_per_element * static_cast<double>(t.numel());
    return c;
  };
}

}  // namespace kiln::graph::ops_detail
