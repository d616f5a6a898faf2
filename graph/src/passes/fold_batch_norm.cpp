// fold_batch_norm: Conv -> BatchNormalization (inference) becomes one Conv
// with scaled weights and a shifted bias:
//   scale = gamma / sqrt(var + eps),  W'[k] = W[k] * scale[k],
//   b'[k] = (b[k] - mean[k]) * scale[k] + beta[k].
// Applies when the Conv's weights (and bias) and the BatchNorm's parameters
// are constants and the Conv has no other reader.
#include <cmath>
#include <unordered_map>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"

namespace kiln::graph {

namespace {

const NDArray* constant_f32(const Value& v) {
  if (!v.defined() || v.node->kind != NodeKind::Constant || v.type().dtype != DataType::Float(32)) return nullptr;
  return &static_cast<const ConstantNode&>(*v.node).data;
}

}  // namespace

Graph fold_batch_norm(const Graph& g) {
  std::unordered_map<const NodeObj*, int> readers;
  for (const OpNode* n : g.op_nodes())
    for (const Value& v : n->inputs)
      if (v.defined()) ++readers[v.node.get()];
  for (const Value& v : g.outputs()) ++readers[v.node.get()];
  return rewrite_graph(g, [&](const Ref<OpNode>& bn) -> std::vector<Value> {
    if (bn->op->name != "BatchNormalization" || bn->inputs.size() < 5) return {};
    if (bn->attrs.get_int("training_mode") != 0) return {};  // batch statistics: nothing to fold
    const Value& x = bn->inputs[0];
    if (x.node->kind != NodeKind::Op) return {};
    const auto& conv = static_cast<const OpNode&>(*x.node);
    if (conv.op->name != "Conv" || readers[&conv] != 1 || conv.num_outputs() != 1) return {};
    const NDArray* W = constant_f32(conv.inputs[1]);
    const NDArray* B = conv.inputs.size() > 2 ? constant_f32(conv.inputs[2]) : nullptr;
    const NDArray *gamma = constant_f32(bn->inputs[1]), *beta = constant_f32(bn->inputs[2]), *mean = constant_f32(bn->inputs[3]),
                  *var = constant_f32(bn->inputs[4]);
    if (!W || !gamma || !beta || !mean || !var || (conv.inputs.size() > 2 && conv.inputs[2].defined() && !B)) return {};
    int64_t K = W->shape()[0], per_k = W->numel() / K;
    if (gamma->numel() != K || beta->numel() != K || mean->numel() != K || var->numel() != K) return {};
    double eps = bn->attrs.get_float("epsilon");
    NDArray W2 = NDArray::empty(W->shape(), DataType::Float(32)), B2 = NDArray::empty({K}, DataType::Float(32));
    for (int64_t k = 0; k < K; ++k) {
      double scale = gamma->data_as<float>()[k] / std::sqrt(double(var->data_as<float>()[k]) + eps);
      for (int64_t j = 0; j < per_k; ++j) W2.data_as<float>()[k * per_k + j] = static_cast<float>(W->data_as<float>()[k * per_k + j] * scale);
      double b = B ? B->data_as<float>()[k] : 0.0;
      B2.data_as<float>()[k] = static_cast<float>((b - mean->data_as<float>()[k]) * scale + beta->data_as<float>()[k]);
    }
    std::vector<Value> in{conv.inputs[0], make_constant(conv.inputs[1].node->name + ".bn_folded", W2)->output(),
                          make_constant(conv.name + ".bias.bn_folded", B2)->output()};
    Ref<OpNode> folded = make_op(conv.op, std::move(in), conv.attrs, conv.name);
    std::vector<Value> outs{folded->output()};
    for (int i = 1; i < bn->num_outputs(); ++i) outs.push_back(bn->output(i));
    return outs;
  });
}

}  // namespace kiln::graph
