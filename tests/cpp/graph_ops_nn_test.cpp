// The shape of the compute DAGs of the NN operators (what the schedule rules
// see: a padding stage only when padded, one reduction over the contraction,
// the bias in its own stage after it) and their flops estimates. Numerics
// are tested from Python against PyTorch (tests/python/test_graph_ops_nn.py).
#include <gtest/gtest.h>

#include <algorithm>

#include "kiln/graph/graph.h"
#include "kiln/graph/op_registry.h"
#include "kiln/graph/to_te.h"
#include "kiln/ir/functor.h"
#include "kiln/ops/search_space.h"
#include "kiln/ops/task.h"

namespace kiln::graph {
namespace {

NDArray zeros(std::vector<int64_t> shape) { return NDArray::empty(shape, DataType::Float(32)); }

// The stages of the one-output graph `out` by name.
struct Dag {
  std::vector<te::Operation> ops;
  GraphDag g;

  explicit Dag(const Ref<OpNode>& out, std::vector<Ref<InputNode>> inputs) {
    g = to_te(Graph::make(std::move(inputs), {out->output()}));
    ops = te::topo_sort(g.outputs);
  }
  const te::ComputeOpNode* stage(const std::string& name) const {
    for (const te::Operation& op : ops)
      if (op->name == name && op->kind == te::OpKind::Compute) return static_cast<const te::ComputeOpNode*>(op.get());
    return nullptr;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const te::Operation& op : ops) n.push_back(op->name);
    return n;
  }
};

std::vector<std::string> reduce_names(const te::ComputeOpNode* s) {
  std::vector<std::string> n;
  for (const IterVar& r : s->reduce_axis) n.push_back(r.name());
  return n;
}

std::vector<std::string> axis_names(const te::ComputeOpNode* s) {
  std::vector<std::string> n;
  for (const IterVar& a : s->axis) n.push_back(a.name());
  return n;
}

Ref<OpNode> conv(const Ref<InputNode>& x, int64_t K, int64_t cg, int64_t k, Attrs attrs, bool bias = true) {
  std::vector<Value> in = {x->output(), make_constant("w", zeros({K, cg, k, k}))->output()};
  if (bias) in.push_back(make_constant("b", zeros({K}))->output());
  return make_op("Conv", in, std::move(attrs));
}

TEST(GraphOpsNn, GroupedConvIsPadThenReductionThenBias) {
  auto x = make_input("x", TensorType{{1, 8, 10, 10}});
  Dag d(conv(x, 8, 4, 3, Attrs({{"group", int64_t(2)}, {"pads", std::vector<int64_t>{1, 0, 1, 2}}})), {x});
  ASSERT_TRUE(d.stage("conv.pad"));
  EXPECT_FALSE(d.stage("conv.pad")->is_reduction());
  ASSERT_TRUE(d.stage("conv"));
  EXPECT_EQ(reduce_names(d.stage("conv")), (std::vector<std::string>{"rc", "ry", "rx"}));
  EXPECT_EQ(axis_names(d.stage("conv")), (std::vector<std::string>{"n", "f", "y", "x"}));
  ASSERT_TRUE(d.stage("conv.bias"));
  EXPECT_FALSE(d.stage("conv.bias")->is_reduction());
  // Asymmetric pads: top 1 + bottom 1 rows, left 0 + right 2 columns.
  EXPECT_EQ(*as_const_int(d.stage("conv.pad")->shape[2]), 12);
  EXPECT_EQ(*as_const_int(d.stage("conv.pad")->shape[3]), 12);
}

TEST(GraphOpsNn, UnpaddedDepthwiseConvHasNoPadStageAndSumsOverTheWindow) {
  auto x = make_input("x", TensorType{{1, 8, 10, 10}});
  Dag d(conv(x, 8, 1, 3, Attrs({{"group", int64_t(8)}}), false), {x});
  EXPECT_FALSE(d.stage("conv.pad"));
  EXPECT_FALSE(d.stage("conv.bias"));
  EXPECT_EQ(reduce_names(d.stage("conv")), (std::vector<std::string>{"ry", "rx"}));
}

TEST(GraphOpsNn, BiasAndReluFuseAsTheConvolutionsEpilogue) {
  // The tuner's first sketch tiles the conv at its consumer, the Relu output (rule 3).
  auto x = make_input("x", TensorType{{1, 8, 10, 10}});
  auto c = conv(x, 8, 4, 3, Attrs({{"group", int64_t(2)}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  Dag d(make_op("Relu", {c->output()}), {x});
  ops::SearchSpace space(ops::make_task(d.g.args(), Target::host(), "conv"));
  EXPECT_NE(space.describe_sketch(0).find("conv: tiled, at its consumer 'Relu'"), std::string::npos) << space.describe_sketch(0);
  EXPECT_NE(space.describe_sketch(0).find("conv.bias: inline"), std::string::npos) << space.describe_sketch(0);
}

TEST(GraphOpsNn, WideConvIsComputedChannelsLastAndWrittenNchw) {
  auto x = make_input("x", TensorType{{1, 8, 10, 10}});
  auto c = conv(x, 16, 8, 3, Attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  EXPECT_EQ(c->types[0].shape, (std::vector<int64_t>{1, 16, 10, 10}));
  Dag d(c, {x});
  ASSERT_TRUE(d.stage("conv"));
  EXPECT_EQ(axis_names(d.stage("conv")), (std::vector<std::string>{"n", "y", "x", "f"}));
  EXPECT_EQ(reduce_names(d.stage("conv")), (std::vector<std::string>{"rc", "ry", "rx"}));
  // The weights [K, C, kh, kw] as [C, kh, kw, K], stored (a reduction over one element), and the bias after the conv.
  ASSERT_TRUE(d.stage("conv.wT"));
  EXPECT_TRUE(d.stage("conv.wT")->is_reduction());
  EXPECT_EQ(*as_const_int(d.stage("conv.wT")->shape[3]), 16);
  ASSERT_TRUE(d.stage("conv.bias"));
  EXPECT_FALSE(d.stage("conv.bias")->is_reduction());
  ops::SearchSpace space(ops::make_task(d.g.args(), Target::host(), "conv"));
  EXPECT_NE(space.describe_sketch(0).find("conv.wT: simple"), std::string::npos) << space.describe_sketch(0);
}

TEST(GraphOpsNn, MatMulWithConstantBIsOneReductionOverK) {
  auto a = make_input("a", TensorType{{2, 3, 8}});
  auto mm = make_op("MatMul", {a->output(), make_constant("b", zeros({8, 16}))->output()});
  Dag d(mm, {a});
  const te::ComputeOpNode* s = d.stage("matmul");
  ASSERT_TRUE(s);
  EXPECT_EQ(axis_names(s), (std::vector<std::string>{"b", "i", "j"}));
  EXPECT_EQ(reduce_names(s), (std::vector<std::string>{"k"}));
  // A is read with k as its last index.
  bool a_k_last = false;
  post_order_visit(s->body, [&](const Expr& e) {
    const TensorLoad* t = e.as<TensorLoad>();
    if (t && t->producer->producer_name() == "a") a_k_last = t->indices.back().same_as(s->reduce_axis[0].var());
  });
  EXPECT_TRUE(a_k_last);
}

TEST(GraphOpsNn, Cost) {
  auto x = make_input("x", TensorType{{2, 8, 10, 10}});
  auto c = conv(x, 6, 4, 3, Attrs({{"group", int64_t(2)}, {"strides", std::vector<int64_t>{2, 2}}}));
  // Output [2, 6, 4, 4]; each output 4 * 3 * 3 multiply-adds plus its bias.
  EXPECT_DOUBLE_EQ(op_cost(*c).flops, 2.0 * 6 * 16 * (2.0 * 36 + 1));
  auto a = make_input("a", TensorType{{5, 3}});
  auto g = make_op("Gemm", {a->output(), make_constant("b", zeros({7, 5}))->output()}, Attrs({{"transA", int64_t(1)}, {"transB", int64_t(1)}}));
  EXPECT_EQ(g->types[0].shape, (std::vector<int64_t>{3, 7}));
  EXPECT_DOUBLE_EQ(op_cost(*g).flops, 2.0 * 3 * 7 * 5);
  auto q = make_input("q", TensorType{{2, 1, 4, 8}});
  auto m = make_op("MatMul", {q->output(), make_constant("k", zeros({3, 8, 5}))->output()});
  EXPECT_EQ(m->types[0].shape, (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_DOUBLE_EQ(op_cost(*m).flops, 2.0 * 2 * 3 * 4 * 5 * 8);
}

}  // namespace
}  // namespace kiln::graph
