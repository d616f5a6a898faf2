// use_amx_operands (passes.h): on targets with AMX-BF16, a kiln.MatMulBF16Pairs
// with a transposed operand (a training step's gradients: dX = dY W^T reads
// W^T, dW = X^T dY reads X^T) reads it through a Transpose of its pair
// words instead. The words hold pairs along K either way, so [N, K/2]
// transposed is the [K/2, N] an AMX tile loads by rows of B (and [K/2, M]
// the [M, K/2] of A); the transpose runs once per call, memory-bound, and
// the product then takes ops::amx_schedule's tiles (cpu_amx.h) where the
// flags would have kept it on vectors.
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"
#include "kiln/ops/cpu_amx.h"

namespace kiln::graph {

Graph use_amx_operands(const Graph& g, const Target& target) {
  if (!ops::target_has_amx(target, "bf16")) return g;
  return rewrite_graph(g, [](const Ref<OpNode>& n) -> std::vector<Value> {
    if (n->op->name != "kiln.MatMulBF16Pairs" || n->num_outputs() != 1) return {};
    bool ta = n->attrs.get_int("transA") != 0, tb = n->attrs.get_int("transB") != 0;
    if (!ta && !tb) return {};
    auto flip = [&](const Value& v, const char* suffix) {
      return make_op("Transpose", {v}, Attrs({{"perm", std::vector<int64_t>{1, 0}}}), n->name + suffix)->output();
    };
    Value a = ta ? flip(n->inputs[0], ".a_rows") : n->inputs[0], b = tb ? flip(n->inputs[1], ".b_rows") : n->inputs[1];
    return {make_op("kiln.MatMulBF16Pairs", {a, b}, Attrs({{"transA", int64_t(0)}, {"transB", int64_t(0)}}), n->name)->output()};
  });
}

}  // namespace kiln::graph
