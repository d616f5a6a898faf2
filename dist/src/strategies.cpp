// Spec choices for the named strategies of kiln.dist.shard.
#include <unordered_map>

#include "kiln/dist/shard.h"
#include "kiln/graph/op_registry.h"

namespace kiln::dist {

using namespace graph;

std::map<std::string, std::string> megatron_specs(const Graph& g, const Mesh& mesh, const std::string& axis) {
  mesh.axis(axis);  // checks the name
  // A value "carries a column split" from a column-split matmul until a
  // row-split matmul consumes it: a matmul whose activation carries one is
  // split by rows (its output is a partial sum: one all-reduce), any other by
  // columns. MLP: w1 columns, w2 rows; attention: Q, K, V columns, output rows.
  std::unordered_map<const NodeObj*, bool> carries;
  std::map<std::string, std::string> specs;
  const std::string s = "S(" + axis + ")";
  for (const OpNode* op : g.op_nodes()) {
    bool in = false;
    for (const Value& v : op->inputs)
      if (v.defined() && carries.count(v.node.get())) in = in || carries[v.node.get()];
    bool out = in;
    // A matrix weight the op contracts (its sharding rule's weight_splits: MatMul's and Gemm's B); a weight is a
    // constant, or a graph input (a training step's parameters are its inputs).
    const WeightSplitsFn& splits = op->op->sharding.weight_splits;
    WeightSplits ws = splits ? splits(*op) : WeightSplits{};
    const Value* w = ws.contracted >= 0 && ws.input < static_cast<int>(op->inputs.size()) ? &op->inputs[ws.input] : nullptr;
    if (w && w->defined() && w->node->kind != NodeKind::Op && w->type().ndim() == 2) {
      // Row split: the contracted dim; column split: the other.
      int dim = in ? ws.contracted : 1 - ws.contracted;
      specs[w->node->name] = dim == 0 ? s + " R" : "R " + s;
      out = !in;
    }
    carries[op] = out;
  }
  return specs;
}

}  // namespace kiln::dist
