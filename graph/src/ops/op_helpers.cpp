#include "op_helpers.h"

#include "kiln/ops/graph_nn.h"
#include "kiln/support/error.h"

namespace kiln::graph::ops_detail {

int normalize_axis(const OpCall& call, int64_t axis, int rank) {
  if (axis < -rank || axis >= std::max(rank, 1))
    call.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

std::vector<TensorType> same_as_input(const OpCall& call) { return {call.input_types[0]}; }

std::string same_name_hint(const Dim& a, const Dim& b) {
  if (a.is_static() && b.is_static()) return "";
  if (a.is_static() || b.is_static()) {
    const Dim &sym = a.is_static() ? b : a, &fixed = a.is_static() ? a : b;
    return " ('" + sym.str() + "' is known only when the model runs and cannot be proven to be " + fixed.str() +
           "; if it always is, give the input that size)";
  }
  return " ('" + a.str() + "' and '" + b.str() + "' cannot be proven equal: if they are one size, give them the same shape-variable name)";
}

Shape broadcast_dims(const OpCall& call, const Shape& a, const Shape& b) {
  if (a.is_static() && b.is_static()) {
    try {
      return ops::broadcast_shape(a.values(), b.values());
    } catch (const Error& e) {
      call.fail(e.what());
    }
  }
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t k = 0; k < n; ++k) {
    Dim x = k < n - a.size() ? Dim(1) : a[k - (n - a.size())];
    Dim y = k < n - b.size() ? Dim(1) : b[k - (n - b.size())];
    // A symbolic dim is never 1 here (x == 1 is false for it): it broadcasts only against 1 or itself.
    if (!(x == y || x == 1 || y == 1))
      call.fail("shapes " + shape_to_string(a) + " and " + shape_to_string(b) + " do not broadcast (dimension " + std::to_string(k) + ": " +
                x.str() + " vs " + y.str() + ")" + same_name_hint(x, y));
    out[k] = x == 1 ? y : x;
  }
  return out;
}

Shape matmul_dims(const OpCall& call, const Shape& a, const Shape& b) {
  if (a.is_static() && b.is_static()) {
    try {
      return ops::matmul_shape(a.values(), b.values());
    } catch (const Error& e) {
      call.fail(e.what());
    }
  }
  if (a.empty() || b.empty()) call.fail("matmul: operands must have rank 1 or more, got shapes " + shape_to_string(a) + " and " + shape_to_string(b));
  Dim ka = a.back(), kb = b.size() == 1 ? b[0] : b[b.size() - 2];
  if (!(ka == kb))
    call.fail("matmul: shapes " + shape_to_string(a) + " and " + shape_to_string(b) + " do not fit: A's last dimension is " + ka.str() + " but B's " +
              (b.size() == 1 ? "only" : "second-to-last") + " dimension is " + kb.str() + same_name_hint(ka, kb));
  Shape out = broadcast_dims(call, Shape(a.begin(), a.end() - std::min<size_t>(a.size(), 2)), Shape(b.begin(), b.end() - std::min<size_t>(b.size(), 2)));
  if (a.size() > 1) out.push_back(a[a.size() - 2]);
  if (b.size() > 1) out.push_back(b.back());
  return out;
}

std::vector<TensorType> broadcast_types(const OpCall& call, bool mixed_dtypes) {
  Shape shape = call.input_types[0].shape;
  for (int i = 1; i < call.num_inputs(); ++i) {
    if (!call.has_input(i)) continue;
    if (!mixed_dtypes && call.input_types[i].dtype != call.input_types[0].dtype)
      call.fail("inputs have dtypes " + call.input_types[0].dtype.str() + " and " + call.input_types[i].dtype.str() + "; they must agree (insert a Cast)");
    shape = broadcast_dims(call, shape, call.input_types[i].shape);
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
