// GradBuilder: the ops a gradient is made of, named after the node they
// differentiate ("<node>/grad/<op><k>") so a dump of a training graph shows
// where each backward op comes from.
#include <algorithm>
#include <cstring>

#include "kiln/graph/autodiff.h"
#include "kiln/support/error.h"

namespace kiln::graph {

std::vector<Value> GradBuilder::op_n(const std::string& name, std::vector<Value> inputs, Attrs attrs) {
  std::string label = prefix_ + name + std::to_string(count_++);
  Ref<OpNode> n = make_op(name, std::move(inputs), std::move(attrs), label);
  std::vector<Value> outs;
  for (int i = 0; i < n->num_outputs(); ++i) outs.push_back(n->output(i));
  return outs;
}

Value GradBuilder::op(const std::string& name, std::vector<Value> inputs, Attrs attrs) {
  return op_n(name, std::move(inputs), std::move(attrs))[0];
}

Value GradBuilder::scalar(double v, DataType t) {
  NDArray a = NDArray::empty({}, t);
  if (t == DataType::Float(32)) *a.data_as<float>() = static_cast<float>(v);
  else if (t == DataType::Float(64)) *a.data_as<double>() = v;
  else if (t == DataType::Int(64)) *a.data_as<int64_t>() = static_cast<int64_t>(v);
  else if (t == DataType::Int(32)) *a.data_as<int32_t>() = static_cast<int32_t>(v);
  else throw Error(node_.name + ": kiln differentiates float32 and float64 graphs, not " + t.str());
  return make_constant(prefix_ + "c" + std::to_string(count_++), a)->output();
}

Value GradBuilder::ints(const std::vector<int64_t>& v) {
  NDArray a = NDArray::empty({static_cast<int64_t>(v.size())}, DataType::Int(64));
  if (!v.empty()) std::memcpy(a.data(), v.data(), v.size() * sizeof(int64_t));
  return make_constant(prefix_ + "i" + std::to_string(count_++), a)->output();
}

Value GradBuilder::reshape(Value a, const std::vector<int64_t>& shape) {
  if (a.type().shape == shape) return a;
  return op("Reshape", {a, ints(shape)});
}

Value GradBuilder::transpose(Value a, const std::vector<int64_t>& perm) { return op("Transpose", {a}, Attrs({{"perm", perm}})); }

Value GradBuilder::reduce_sum(Value a, const std::vector<int64_t>& axes, bool keepdims) {
  if (axes.empty()) return a;  // ReduceSum would read empty axes as "all"
  return op("ReduceSum", {a, ints(axes)}, Attrs({{"keepdims", int64_t(keepdims)}}));
}

Value GradBuilder::reduce_mean(Value a, const std::vector<int64_t>& axes, bool keepdims) {
  if (axes.empty()) return a;
  return op("ReduceMean", {a}, Attrs({{"axes", axes}, {"keepdims", int64_t(keepdims)}}));
}

Value GradBuilder::expand(Value a, const std::vector<int64_t>& shape) {
  if (a.type().shape == shape) return a;
  return op("Expand", {a, ints(shape)});
}

Value GradBuilder::sum_to(Value g, const std::vector<int64_t>& shape) {
  const std::vector<int64_t>& gs = g.type().shape;
  if (gs == shape) return g;
  // Broadcasting prepends dims and stretches 1s: sum the prepended dims and
  // the stretched ones, then drop what was prepended.
  size_t lead = gs.size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t k = 0; k < gs.size(); ++k)
    if (k < lead || (shape[k - lead] == 1 && gs[k] != 1)) axes.push_back(static_cast<int64_t>(k));
  return reshape(reduce_sum(g, axes, true), shape);
}

}  // namespace kiln::graph
