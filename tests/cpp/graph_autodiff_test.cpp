// Reverse-mode differentiation from C++: the gradient graph runs on the
// executor, an op without a gradient is named, parameters lift to inputs,
// and the operators a CNN, an MLP and a transformer encoder use all have
// gradients. (Per-op numerical checks are in tests/python/test_autodiff.py.)
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "kiln/graph/autodiff.h"
#include "kiln/graph/executor.h"
#include "kiln/support/error.h"

namespace kiln::graph {
namespace {

using testing::random_array;

Value reduce_all(const Value& v) {
  Attrs a;
  a.set("keepdims", int64_t(0));
  return make_op("ReduceSum", {v}, a, "loss")->output();
}

TEST(GraphAutodiff, GradientGraphRunsOnTheExecutor) {
  // loss = sum(x * w + w): dloss/dw = sum over the broadcast rows of x, plus one per row.
  auto x = make_input("x", {{3, 4}, DataType::Float(32)});
  auto w = make_input("w", {{4}, DataType::Float(32)});
  Value xw = make_op("Mul", {x->output(), w->output()})->output();
  Value loss = reduce_all(make_op("Add", {xw, w->output()})->output());
  Graph g = gradient_graph(Graph::make({x, w}, {loss}), {w->output(), x->output()});
  ASSERT_EQ(g.outputs().size(), 3u);
  EXPECT_EQ(g.output_names()[1], "grad_w");
  NDArray xv = random_array({3, 4}, 1), wv = random_array({4}, 2);
  std::vector<NDArray> out = compile(g).run({xv, wv});
  const float* xs = xv.data_as<float>();
  for (int j = 0; j < 4; ++j) {
    float want = 3;
    for (int i = 0; i < 3; ++i) want += xs[i * 4 + j];
    EXPECT_NEAR(out[1].data_as<float>()[j], want, 1e-5) << "dloss/dw[" << j << "]";
    for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(out[2].data_as<float>()[i * 4 + j], wv.data_as<float>()[j]);
  }
}

TEST(GraphAutodiff, AValueTheLossDoesNotReachHasNoGradient) {
  auto x = make_input("x", {{2}, DataType::Float(32)});
  auto u = make_input("u", {{2}, DataType::Float(32)});
  std::vector<Value> g = gradients(reduce_all(x->output()), {u->output(), x->output()});
  EXPECT_FALSE(g[0].defined());
  EXPECT_TRUE(g[1].defined());
}

TEST(GraphAutodiff, TheLossMustBeTheGraphs) {
  auto x = make_input("x", {{2}, DataType::Float(32)});
  Value loss = reduce_all(x->output());
  Graph g = Graph::make({x}, {loss});
  EXPECT_TRUE(gradients(g, loss, {x->output()})[0].defined());
  Value other = reduce_all(make_op("Exp", {x->output()})->output());
  EXPECT_THROW(gradients(g, other, {x->output()}), Error);
  // d loss / d loss is one.
  Graph self = Graph::make({x}, {loss, gradients(loss, {loss})[0]});
  std::vector<NDArray> out = compile(self).run({random_array({2}, 3)});
  EXPECT_FLOAT_EQ(out[1].data_as<float>()[0], 1.0f);
}

TEST(GraphAutodiff, VjpTakesTheOutputGradientsAsGiven) {
  // y1 = x * w, y2 = w (an input given back as it is), both seeded:
  // d/dw = sum_rows(x * d1) + d2 (twice, as w is listed twice), d/dx = w * d1.
  auto x = make_input("x", {{3, 4}, DataType::Float(32)});
  auto w = make_input("w", {{4}, DataType::Float(32)});
  auto d1 = make_input("d1", {{3, 4}, DataType::Float(32)});
  auto d2 = make_input("d2", {{4}, DataType::Float(32)});
  Value y1 = make_op("Mul", {x->output(), w->output()})->output();
  std::vector<Value> g = vjp({y1, w->output(), w->output()}, {d1->output(), d2->output(), d2->output()}, {w->output(), x->output()});
  ASSERT_TRUE(g[0].defined() && g[1].defined());
  // The seed reaches Mul's gradient as it is: d1 itself is an input of the node giving d/dx.
  const auto& dx = static_cast<const OpNode&>(*g[1].node);
  EXPECT_TRUE(dx.inputs[0].node == d1 || dx.inputs[1].node == d1) << dx.op->name;
  Graph graph = Graph::make({x, w, d1, d2}, {g[0], g[1]});
  NDArray xv = random_array({3, 4}, 1), wv = random_array({4}, 2), d1v = random_array({3, 4}, 3), d2v = random_array({4}, 4);
  std::vector<NDArray> out = compile(graph).run({xv, wv, d1v, d2v});
  const float *xs = xv.data_as<float>(), *ws = wv.data_as<float>(), *a = d1v.data_as<float>(), *b = d2v.data_as<float>();
  for (int j = 0; j < 4; ++j) {
    float want = 2 * b[j];
    for (int i = 0; i < 3; ++i) want += xs[i * 4 + j] * a[i * 4 + j];
    EXPECT_NEAR(out[0].data_as<float>()[j], want, 1e-5) << "d/dw[" << j << "]";
    for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(out[1].data_as<float>()[i * 4 + j], ws[j] * a[i * 4 + j]);
  }
  EXPECT_THROW(vjp({y1}, {}, {x->output()}), Error);
  EXPECT_THROW(vjp({y1}, {d2->output()}, {x->output()}), Error);  // the gradient's type must be the output's
}

TEST(GraphAutodiff, AnOpWithoutAGradientIsNamed) {
  auto x = make_input("x", {{2, 3}, DataType::Float(32)});
  Value loss = reduce_all(make_op("Floor", {x->output()}, {}, "round_down")->output());
  try {
    gradients(loss, {x->output()});
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {  // a user error: an InternalError is not an Error
    EXPECT_NE(std::string(e.what()).find("Floor node 'round_down'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no gradient"), std::string::npos) << e.what();
  }
}

TEST(GraphAutodiff, LiftParametersMakesWeightsInputs) {
  LiftedParameters p = lift_parameters(testing::small_graph());
  EXPECT_EQ(p.names, (std::vector<std::string>{"w", "b", "s"}));
  ASSERT_EQ(p.graph.inputs().size(), 5u);
  EXPECT_EQ(p.graph.inputs()[2]->name, "w");
  EXPECT_EQ(p.values[0].shape(), (std::vector<int64_t>{4, 3, 3, 3}));
  EXPECT_TRUE(p.buffer_names.empty());
  // Every weight is an input now: no operator reads a constant.
  for (const OpNode* n : p.graph.op_nodes())
    for (const Value& v : n->inputs) EXPECT_NE(v.node->kind, NodeKind::Constant) << n->name;
}

TEST(GraphAutodiff, TrainingBatchNormHasBuffers) {
  auto x = make_input("x", {{4, 2, 3, 3}, DataType::Float(32)});
  std::vector<Value> in{x->output()};
  for (const char* n : {"scale", "bias", "mean", "var"}) in.push_back(make_constant(n, random_array({2}, 5))->output());
  Graph g = Graph::make({x}, {make_op("BatchNormalization", in, {}, "bn")->output()});
  LiftedParameters p = lift_parameters(g, true);
  EXPECT_EQ(p.names, (std::vector<std::string>{"scale", "bias"}));
  EXPECT_EQ(p.buffer_names, (std::vector<std::string>{"mean", "var"}));
  EXPECT_EQ(p.graph.outputs().size(), 3u);
  EXPECT_EQ(p.graph.output_names()[1], "new.mean");
  // Batch statistics: each channel of the output has mean B (here `bias`).
  NDArray xv = random_array({4, 2, 3, 3}, 7);
  std::vector<NDArray> args{xv};
  for (const NDArray& a : p.values) args.push_back(a);
  for (const NDArray& a : p.buffer_values) args.push_back(a);
  std::vector<NDArray> out = compile(p.graph).run(args);
  for (int c = 0; c < 2; ++c) {
    double s = 0;
    for (int n = 0; n < 4; ++n)
      for (int k = 0; k < 9; ++k) s += out[0].data_as<float>()[(n * 2 + c) * 9 + k];
    EXPECT_NEAR(s / 36, p.values[1].data_as<float>()[c], 1e-5);
  }
}

TEST(GraphAutodiff, ModelOperatorsHaveGradients) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Neg", "Exp", "Log", "Sqrt", "Pow", "Erf", "Relu", "Sigmoid", "Tanh", "MatMul", "Gemm", "Conv",
                         "MaxPool", "AveragePool", "GlobalAveragePool", "Softmax", "LayerNormalization", "Reshape", "Flatten", "Transpose", "Squeeze",
                         "Unsqueeze", "Slice", "Concat", "Split", "Gather", "ReduceSum", "ReduceMean", "Where", "Cast", "Identity",
                         "kiln.SoftmaxCrossEntropy", "kiln.MeanSquaredError"})
    EXPECT_TRUE(get_op(op).gradient) << op;
}

}  // namespace
}  // namespace kiln::graph
