// A graph as one compute DAG (to_te.h).
#include "kiln/graph/to_te.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "kiln/graph/op_registry.h"
#include "kiln/ir/op.h"
#include "kiln/support/error.h"

namespace kiln::graph {

std::vector<te::Tensor> GraphDag::args() const {
  std::vector<te::Tensor> a = inputs;
  a.insert(a.end(), constant_tensors.begin(), constant_tensors.end());
  a.insert(a.end(), outputs.begin(), outputs.end());
  return a;
}

namespace {

// The tensor's extents: immediates, or expressions of the shape variables
// (the kernel then takes each variable as a scalar bound from its arrays).
std::vector<Expr> dim_exprs(const TensorType& t) {
  std::vector<Expr> dims;
  for (const Dim& d : t.shape) dims.push_back(d.expr());
  return dims;
}

// A tensor whose every element is the constant's one value.
te::Tensor immediate(const ConstantNode& c) {
  Expr v = make_const(c.types[0].dtype, *scalar_of(c.data));
  return te::compute(dim_exprs(c.types[0]), [v](const std::vector<Var>&) { return v; }, "const");
}

}  // namespace

GraphDag to_te(const Graph& g, bool gpu) {
  GraphDag dag;
  dag.source = g;
  std::unordered_map<const NodeObj*, std::vector<te::Tensor>> tensors;
  for (const auto& in : g.inputs()) {
    dag.inputs.push_back(te::placeholder(dim_exprs(in->types[0]), in->types[0].dtype, in->name));
    tensors[in.get()] = {dag.inputs.back()};
  }
  // Constants become tensors when a kernel reads them: one read only at
  // compile time (Reshape's shape, Slice's starts) is no kernel argument.
  auto tensor_of = [&](const Value& v) -> te::Tensor {
    auto it = tensors.find(v.node.get());
    if (it != tensors.end()) return it->second[v.index];
    KILN_CHECK(v.node->kind == NodeKind::Constant) << "to_te: '" << v.node->name << "' is read before it is computed";
    const auto& c = static_cast<const ConstantNode&>(*v.node);
    if (scalar_of(c.data)) {
      tensors[&c] = {immediate(c)};
    } else {
      dag.constants.push_back(Ref<ConstantNode>(&c));
      dag.constant_tensors.push_back(te::placeholder(dim_exprs(c.types[0]), c.types[0].dtype, "w" + std::to_string(dag.constants.size() - 1)));
      tensors[&c] = {dag.constant_tensors.back()};
    }
    return tensors[&c][0];
  };
  for (const auto& n : g.topo_order()) {
    if (n->kind != NodeKind::Op) continue;
    const auto& op = static_cast<const OpNode&>(*n);
    KILN_USER_CHECK(op.op->compute) << op.op->name << " node '" << op.name << "' has no compute (pattern "
                                    << pattern_name(op.op->pattern) << "); it must be folded away before compilation";
    OpCall call = op_call(op);
    call.gpu = gpu;
    std::vector<te::Tensor> in;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      bool compile_time = op.op->reads_at_compile_time(static_cast<int>(i));
      in.push_back(!op.inputs[i].defined() || compile_time ? te::Tensor() : tensor_of(op.inputs[i]));
    }
    std::vector<te::Tensor> out = op.op->compute(call, in);
    KILN_CHECK(out.size() == op.types.size()) << op.op->name << "'s compute gave " << out.size() << " tensors for " << op.types.size() << " outputs";
    for (size_t i = 0; i < out.size(); ++i) {
      Shape shape;  // a symbolic extent must be the same expression as inference's (Dim ==)
      for (const Expr& d : out[i].shape()) shape.push_back(Dim(d));
      KILN_CHECK(shape == op.types[i].shape && out[i].dtype() == op.types[i].dtype)
          << op.op->name << " node '" << op.name << "': compute gives " << out[i].dtype().str() << shape_to_string(shape)
          << " but type inference says " << op.types[i].str();
    }
    tensors[n.get()] = std::move(out);
  }
  for (const Value& v : g.outputs()) {
    te::Tensor t = tensor_of(v);
    if (v.node->kind != NodeKind::Op) {
      // Inputs and constants are not computed by the kernel: copy them out.
      t = te::compute(t.shape(), [t](const std::vector<Var>& i) { return t(std::vector<Expr>(i.begin(), i.end())); }, "copy");
    }
    dag.outputs.push_back(t);
  }
  return dag;
}

}  // namespace kiln::graph
