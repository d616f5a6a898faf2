// Tests of the graph passes (passes.h), the memory planner and the executor,
// on graphs of the elementwise ops and two test-only operators: a matmul
// (output-fusable) and a row sum (reduction). Results are compared with
// naive loops written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kiln/graph/executor.h"
#include "kiln/graph/layout_plan.h"
#include "kiln/graph/memory_plan.h"
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/ir/op.h"
#include "kiln/ops/nn.h"
#include "kiln/support/error.h"
#include "graph_test_util.h"
#include "test_util.h"

namespace kiln::graph {
namespace {

using testing::random_array;

void register_test_ops() {
  static bool done = [] {
    OpDef mm;
    mm.name = "test.MatMul";
    mm.min_inputs = mm.max_inputs = 2;
    mm.pattern = Pattern::OutputFusable;
    mm.infer = [](const OpCall& c) {
      return std::vector<TensorType>{{{c.input_types[0].shape[0], c.input_types[1].shape[1]}, DataType::Float(32)}};
    };
    mm.compute = [](const OpCall&, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{ops::matmul(in[0], in[1], "mm")}; };
    register_op(mm);
    OpDef rs;
    rs.name = "test.RowSum";
    rs.pattern = Pattern::Reduction;
    rs.infer = [](const OpCall& c) { return std::vector<TensorType>{{{c.input_types[0].shape[0], 1}, DataType::Float(32)}}; };
    rs.compute = [](const OpCall&, const std::vector<te::Tensor>& in) {
      te::Tensor X = in[0];
      IterVar k = te::reduce_axis(Range(0, X.shape()[1]), "k");
      return std::vector<te::Tensor>{te::compute({X.shape()[0], Expr(1)}, [&](const std::vector<Var>& i) { return te::sum(X(i[0], k.var()), {k}); }, "rowsum")};
    };
    register_op(rs);
    return true;
  }();
  (void)done;
}

// Options with only these fields changed (designated initializers would leave the rest unnamed).
CompileOptions options(bool fuse, bool layout, bool plain) {
  CompileOptions o;
  o.fuse = fuse;
  o.layout = layout;
  o.plain = plain;
  return o;
}

Value op(const std::string& name, std::vector<Value> in, const std::string& node = "") { return make_op(name, std::move(in), {}, node)->output(); }

TEST(GraphPasses, RemoveIdentityAndCse) {
  auto x = make_input("x", {{4}, DataType::Float(32)});
  Value a = op("Relu", {x->output()}), b = op("Relu", {x->output()});
  Graph g = Graph::make({x}, {op("Add", {a, b})});
  Graph c = eliminate_common_subexpr(g);
  EXPECT_EQ(g.op_nodes().size(), 3u);
  EXPECT_EQ(c.str(),
            "graph(%x: float32[4]) {\n"
            "  %0 = Relu(%x) : float32[4]\n"
            "  %1 = Add(%0, %0) : float32[4]\n"
            "  return %1\n"
            "}");
  EXPECT_TRUE(eliminate_common_subexpr(c).same_as(c));  // nothing left to merge
}

// Transpose pairs: undoing each other they vanish; otherwise one Transpose
// of the composed permutation remains, and the result is unchanged.
TEST(GraphPasses, FoldTransposesComposesPermutations) {
  auto x = make_input("x", {{2, 3, 4}, DataType::Float(32)});
  auto transpose = [](Value v, std::vector<int64_t> perm) { return make_op("Transpose", {v}, Attrs({{"perm", AttrValue(perm)}}))->output(); };
  Value back = transpose(transpose(x->output(), {1, 2, 0}), {2, 0, 1});   // [3, 4, 2] then back to [2, 3, 4]
  Value rev = make_op("Transpose", {transpose(x->output(), {0, 2, 1})})->output();  // [2, 4, 3], then no perm: reversed
  Graph g = Graph::make({x}, {op("Relu", {back}), rev}, {"a", "b"});
  Graph f = fold_transposes(g);
  auto nodes = f.op_nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0]->op->name, "Relu");
  EXPECT_TRUE(nodes[0]->inputs[0].node.get() == x.get()) << f.str();
  EXPECT_EQ(nodes[1]->op->name, "Transpose");
  // Reversing [x0, x2, x1] gives [x1, x2, x0]: perm {1, 2, 0}.
  EXPECT_EQ(nodes[1]->attrs.get_ints("perm"), (std::vector<int64_t>{1, 2, 0}));
  EXPECT_EQ(nodes[1]->types[0].shape, (std::vector<int64_t>{3, 4, 2}));
  NDArray in = random_array({2, 3, 4}, 5);
  std::vector<NDArray> got = compile(g, options(true, false, true)).run({in});
  const float* xv = in.data_as<float>();
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(got[0].data_as<float>()[i], std::max(0.f, xv[i])) << "a " << i;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 2; ++k) EXPECT_EQ(got[1].data_as<float>()[(i * 4 + j) * 2 + k], xv[(k * 3 + i) * 4 + j]) << "b " << i << "," << j << "," << k;
  EXPECT_TRUE(fold_transposes(f).same_as(f));
}

TEST(GraphPasses, FoldConstantsEvaluatesConstantSubgraphs) {
  auto x = make_input("x", {{3}, DataType::Float(32)});
  NDArray c1 = random_array({3}, 1), c2 = random_array({3}, 2);
  Value k = op("Add", {make_constant("c1", c1)->output(), make_constant("c2", c2)->output()}, "kadd");
  Graph g = Graph::make({x}, {op("Mul", {x->output(), op("Relu", {k})})});
  Graph f = fold_constants(g);
  auto nodes = f.op_nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]->op->name, "Mul");
  const auto& folded = static_cast<const ConstantNode&>(*nodes[0]->inputs[1].node);
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(folded.data.data_as<float>()[i], std::max(0.f, c1.data_as<float>()[i] + c2.data_as<float>()[i]));
}

// mm = x @ w; y = relu(mm + b); s = rowsum(y * y): the matmul group takes its
// epilogue, and the square fuses into the reduction.
Graph mlp_graph(NDArray* w, NDArray* b) {
  register_test_ops();
  *w = random_array({16, 8}, 3);
  *b = random_array({8}, 4);
  auto x = make_input("x", {{4, 16}, DataType::Float(32)});
  Value mm = op("test.MatMul", {x->output(), make_constant("w", *w)->output()}, "mm");
  Value y = op("Relu", {op("Add", {mm, make_constant("b", *b)->output()}, "bias")}, "act");
  Value s = op("test.RowSum", {op("Mul", {y, y}, "square")}, "rowsum");
  return Graph::make({x}, {s, y}, {"sum", "act"});
}

TEST(GraphPasses, FuseOpsGroupsByPattern) {
  NDArray w, b;
  Graph g = mlp_graph(&w, &b);
  Graph f = fuse_ops(g);
  std::vector<std::string> groups;
  for (const OpNode* n : f.op_nodes()) groups.push_back(n->attrs.get_string("ops"));
  EXPECT_EQ(groups, (std::vector<std::string>{"test.MatMul+Add+Relu", "Mul+test.RowSum"}));
  // The first group's output is read by the second group and is a graph output.
  EXPECT_EQ(f.op_nodes()[0]->num_outputs(), 1);
  Graph unfused = wrap_ops(g);
  EXPECT_EQ(unfused.op_nodes().size(), 5u);
}

TEST(GraphPasses, ElementwiseChainEndsBeforeAHeavyConsumer) {
  register_test_ops();
  auto x = make_input("x", {{4, 4}, DataType::Float(32)});
  auto w = make_constant("w", random_array({4, 4}, 5));
  Value r = op("Relu", {x->output()});
  Value mm = op("test.MatMul", {r, w->output()});
  Graph f = fuse_ops(Graph::make({x}, {mm}));
  std::vector<std::string> groups;
  for (const OpNode* n : f.op_nodes()) groups.push_back(n->attrs.get_string("ops"));
  // An elementwise producer is not inlined into a matmul (it would run once per read).
  EXPECT_EQ(groups, (std::vector<std::string>{"Relu", "test.MatMul"}));
}

TEST(GraphPasses, FoldBatchNormIntoConv) {
  auto x = make_input("x", {{1, 3, 5, 5}, DataType::Float(32)});
  Value conv = make_op("Conv", {x->output(), make_constant("w", random_array({4, 3, 3, 3}, 12))->output()}, {}, "conv")->output();
  NDArray gamma = random_array({4}, 13), beta = random_array({4}, 14), mean = random_array({4}, 15), var = random_array({4}, 16);
  for (int i = 0; i < 4; ++i) var.data_as<float>()[i] = 0.5f + std::abs(var.data_as<float>()[i]);
  Value bn = make_op("BatchNormalization", {conv, make_constant("g", gamma)->output(), make_constant("b", beta)->output(),
                                            make_constant("m", mean)->output(), make_constant("v", var)->output()}, {}, "bn")->output();
  Graph g = Graph::make({x}, {bn});
  Graph f = fold_batch_norm(g);
  ASSERT_EQ(f.op_nodes().size(), 1u);
  EXPECT_EQ(f.op_nodes()[0]->op->name, "Conv");
  EXPECT_EQ(f.op_nodes()[0]->inputs.size(), 3u);  // the folded bias
  // Reference: the conv alone, then the batch norm by hand.
  NDArray in = random_array({1, 3, 5, 5}, 17);
  CompileOptions plain = options(false, false, true);
  NDArray c = compile(Graph::make({x}, {conv}), plain).run({in})[0];
  NDArray folded = compile(f, plain).run({in})[0];
  ASSERT_EQ(folded.shape(), c.shape());
  int64_t per = c.numel() / 4;
  for (int64_t i = 0; i < c.numel(); ++i) {
    int k = static_cast<int>(i / per);
    float want = (c.data_as<float>()[i] - mean.data_as<float>()[k]) / std::sqrt(var.data_as<float>()[k] + 1e-5f) * gamma.data_as<float>()[k] + beta.data_as<float>()[k];
    EXPECT_NEAR(folded.data_as<float>()[i], want, 1e-4);
  }
}

// conv -> relu -> conv -> (+ x) in NCHW: after alter_conv_layout the convs,
// the relu and the residual add run blocked, with one transform in and one out.
// Whole vectors up to the cap; where none divides the channels, at most one
// vector's part (3 channels: 3), or whole vectors over the channels padded to
// a vector where that wastes fewer lanes (58 channels: 64 in blocks of 16 or
// 32, not blocks of 2) or as few as several parts would (24 on 16 lanes: 32
// in whole vectors, not blocks of 12; on 8 lanes 24 divides).
TEST(GraphPasses, ChannelBlocksAreWholeVectorsOrAtMostOne) {
  EXPECT_EQ(graph::channel_block_for(58, 32, 16), 32);
  EXPECT_EQ(graph::channel_block_for(58, 16, 16), 16);
  EXPECT_EQ(graph::channel_block_for(116, 32, 16), 32);
  EXPECT_EQ(graph::channel_block_for(232, 32, 16), 16);  // 240: 15 vectors
  EXPECT_EQ(graph::channel_block_for(116, 16, 8), 8);    // 120: 15 vectors
  EXPECT_EQ(graph::channel_block_for(232, 16, 8), 8);    // divides: no padding
  EXPECT_EQ(graph::padded_channels(58, 32), 64);
  EXPECT_EQ(graph::padded_channels(232, 8), 232);
  EXPECT_EQ(graph::channel_block_for(64, 32, 16), 32);
  EXPECT_EQ(graph::channel_block_for(144, 32, 16), 16);
  EXPECT_EQ(graph::channel_block_for(96, 32, 16), 32);
  EXPECT_EQ(graph::channel_block_for(24, 16, 8), 8);
  EXPECT_EQ(graph::channel_block_for(24, 32, 16), 32);
  EXPECT_EQ(graph::channel_block_for(24, 16, 16), 16);
  EXPECT_EQ(graph::padded_channels(24, 16), 32);
  EXPECT_EQ(graph::channel_block_for(12, 32, 16), 12);  // one part, all of it: no padding
  EXPECT_EQ(graph::channel_block_for(3, 32, 16), 3);
  EXPECT_EQ(graph::channel_block_for(3, 16, 8), 3);
}

// A blocked tensor may hold its last block padded: NCHW 58 -> blocks of 16
// holds 64 channels, the last 6 zero, and back to NCHW gives the 58; without
// `channels` a block that does not divide is refused with the fix named.
TEST(GraphPasses, LayoutTransformPadsAndDropsTheLastBlock) {
  auto x = make_input("x", {{1, 58, 2, 3}, DataType::Float(32)});
  auto lt = [](Value v, int64_t from, int64_t to, int64_t channels) {
    Attrs a;
    a.set("src_block", from);
    a.set("dst_block", to);
    if (channels > 0) a.set("channels", channels);
    return make_op("kiln.LayoutTransform", {v}, a, "lt")->output();
  };
  Value blocked = lt(x->output(), 0, 16, 58);
  EXPECT_EQ(blocked.type().shape, (std::vector<int64_t>{1, 4, 2, 3, 16}));
  Value reblocked = lt(blocked, 16, 8, 58);  // 64 held, 58 true: blocks of 8 hold 64 again
  EXPECT_EQ(reblocked.type().shape, (std::vector<int64_t>{1, 8, 2, 3, 8}));
  Value back = lt(reblocked, 8, 0, 58);
  EXPECT_EQ(back.type().shape, (std::vector<int64_t>{1, 58, 2, 3}));
  NDArray in = random_array({1, 58, 2, 3}, 3);
  std::vector<NDArray> out = compile(Graph::make({x}, {back, blocked})).run({in});
  for (int64_t i = 0; i < in.numel(); ++i) EXPECT_EQ(out[0].data_as<float>()[i], in.data_as<float>()[i]);
  const float* b = out[1].data_as<float>();
  for (int64_t c = 0; c < 64; ++c)
    for (int64_t p = 0; p < 6; ++p) EXPECT_EQ(b[((c / 16) * 6 + p) * 16 + c % 16], c < 58 ? in.data_as<float>()[c * 6 + p] : 0.0f) << c << " " << p;
  EXPECT_TRUE(kiln::testing::throws_with([&] { lt(x->output(), 0, 16, 0); }, "58 channels do not split into blocks of 16; give channels"));
  EXPECT_TRUE(kiln::testing::throws_with([&] { lt(blocked, 16, 0, 40); }, "does not hold 40 channels"));
}

TEST(GraphPasses, AlterConvLayoutLeavesTransformsAtTheBoundary) {
  auto x = make_input("x", {{1, 16, 6, 6}, DataType::Float(32)});
  Attrs pad1;
  pad1.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  Value c1 = make_op("Conv", {x->output(), make_constant("w1", random_array({16, 16, 3, 3}, 8))->output(), make_constant("b1", random_array({16}, 9))->output()}, pad1, "c1")->output();
  Value c2 = make_op("Conv", {op("Relu", {c1}), make_constant("w2", random_array({16, 16, 1, 1}, 10))->output()}, {}, "c2")->output();
  Graph g = Graph::make({x}, {op("Add", {c2, x->output()}, "residual")});
  Graph a = alter_conv_layout(g, Target::parse("llvm -mcpu=haswell"));  // 8 lanes: blocks of 16
  std::vector<std::string> ops;
  for (const OpNode* n : a.op_nodes()) ops.push_back(n->op->name);
  EXPECT_EQ(ops, (std::vector<std::string>{"kiln.LayoutTransform", "kiln.ConvNCHWc", "Add", "Relu", "kiln.ConvNCHWc", "Add", "kiln.LayoutTransform"})) << a.str();
  NDArray in = random_array({1, 16, 6, 6}, 11);
  std::vector<NDArray> blocked = compile(g).run({in});
  std::vector<NDArray> plain = compile(g, options(true, false, true)).run({in});
  for (int64_t i = 0; i < plain[0].numel(); ++i) EXPECT_NEAR(blocked[0].data_as<float>()[i], plain[0].data_as<float>()[i], 1e-4);
}

// A grouped kiln.ConvNCHWc in blocks of 16 reads an input blocked by 32 (a multiple) as it reads
// the same channels blocked by 16 (the relayout alter_conv_layout no longer inserts before it);
// an input block that is not a multiple of the weights' is refused, naming the shapes.
TEST(GraphPasses, BlockedConvReadsAnInputInAWiderBlock) {
  auto x = make_input("x", {{1, 2, 6, 6, 32}, DataType::Float(32)});
  Value w = make_constant("w", random_array({4, 1, 3, 3, 16, 16}, 21))->output();
  Attrs a;
  a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  a.set("group_blocks", int64_t(1));  // each block of 16 output channels reads its own 16 input channels
  Attrs relayout;
  relayout.set("src_block", int64_t(32));
  relayout.set("dst_block", int64_t(16));
  Value narrow = make_op("kiln.LayoutTransform", {x->output()}, relayout, "narrow")->output();
  Value wide_read = make_op("kiln.ConvNCHWc", {x->output(), w}, a, "wide")->output();
  Value narrow_read = make_op("kiln.ConvNCHWc", {narrow, w}, a, "narrow_conv")->output();
  EXPECT_EQ(wide_read.type().shape, narrow_read.type().shape);
  NDArray in = random_array({1, 2, 6, 6, 32}, 22);
  std::vector<NDArray> out = compile(Graph::make({x}, {wide_read, narrow_read})).run({in});
  ASSERT_EQ(out[0].numel(), out[1].numel());
  for (int64_t i = 0; i < out[0].numel(); ++i) ASSERT_NEAR(out[0].data_as<float>()[i], out[1].data_as<float>()[i], 1e-4) << i;
  // Blocks of 16 under weights of 32 (16 is not a multiple of 32): refused.
  Value w32 = make_constant("w32", random_array({2, 1, 3, 3, 32, 32}, 23))->output();
  std::string msg;
  try {
    make_op("kiln.ConvNCHWc", {narrow, w32}, a, "bad");
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("do not match"), std::string::npos) << msg;
}

// g compiled blocked for `target` computes what it computes in plain NCHW.
// Within 1e-4, or `relative` times the output's largest magnitude where that is more.
void expect_blocked_matches_plain(const Graph& g, const NDArray& in, const std::string& target, double relative = 0) {
  CompileOptions blocked_options;
  blocked_options.target = target;
  std::vector<NDArray> blocked = compile(g, blocked_options).run({in});
  std::vector<NDArray> plain = compile(g, options(true, false, true)).run({in});
  const float* want = plain[0].data_as<float>();
  double largest = 0;
  for (int64_t i = 0; i < plain[0].numel(); ++i) largest = std::max(largest, std::abs(double(want[i])));
  const double tol = std::max(1e-4, relative * largest);
  for (int64_t i = 0; i < plain[0].numel(); ++i) EXPECT_NEAR(blocked[0].data_as<float>()[i], want[i], tol);
}

TEST(GraphPasses, DefaultConvCapIsOneVectorWhereTwoFitTooFewOutputPixels) {
  Target avx2 = Target::parse("llvm -mcpu=haswell"), avx512 = Target::parse("llvm -mcpu=skylake-avx512");
  // AVX2: a tile of two vectors holds 6 pixels; a 7-wide output gets 1 of them, one vector gets 7.
  EXPECT_EQ(default_conv_cap(512, 7, 7, avx2), 8);
  EXPECT_EQ(default_conv_cap(256, 14, 14, avx2), 16);  // 2 x 2 pixels of two vectors
  EXPECT_EQ(default_conv_cap(64, 56, 56, avx2), 16);
  EXPECT_EQ(default_conv_cap(16, 6, 6, avx2), 16);
  EXPECT_EQ(default_conv_cap(24, 7, 7, avx2), 16);  // no two-vector block at all: channel_block_for decides
  // AVX-512: 32 registers fit 7 pixels of two vectors.
  EXPECT_EQ(default_conv_cap(512, 7, 7, avx512), 32);
}

// On AVX-512, a 1x1 conv whose default streams 4 MiB of weights or more
// from L3 over a small image (ResNet-50's layer4) takes one-vector blocks;
// one of 1 MiB, or over an image whose output block outgrows the streamed
// accumulator (14 x 14), keeps two. AVX2 keeps its 7 x 7 rule.
TEST(GraphPasses, OneByOneConvsStreamingFromL3TakeOneVectorBlocksOnAvx512) {
  auto conv_node = [](int64_t C, int64_t K, int64_t HW) {
    auto x = make_input("x", {{1, C, HW, HW}, DataType::Float(32)});
    Value y = make_op("Conv", {x->output(), make_constant("w", random_array({K, C, 1, 1}, 30))->output()}, {}, "c")->output();
    return Graph::make({x}, {y});
  };
  const Target avx2 = Target::parse("llvm -mcpu=haswell"), avx512 = Target::parse("llvm -mcpu=skylake-avx512");
  auto cap = [](const Graph& g, const Target& t) {
    for (const OpNode* n : g.op_nodes())
      if (n->op->name == "Conv") return default_conv_cap(*n, t);
    return int64_t{0};
  };
  Graph reduce = conv_node(2048, 512, 7), expand = conv_node(512, 2048, 7), mid = conv_node(512, 512, 7), wide = conv_node(2048, 512, 14);
  EXPECT_EQ(cap(reduce, avx512), 16);
  EXPECT_EQ(cap(expand, avx512), 16);
  EXPECT_EQ(cap(mid, avx512), 32);   // 1 MiB: stays in L2
  EXPECT_EQ(cap(wide, avx512), 32);  // 196 pixels x 32 channels: more than the streamed accumulator
  EXPECT_EQ(cap(reduce, avx2), 8);
  EXPECT_EQ(cap(wide, avx2), 16);
  EXPECT_EQ(default_layout_plan(reduce, avx512).max_block, 0);
  EXPECT_EQ(default_layout_plan(mid, avx512).max_block, 32);
  Graph a = alter_conv_layout(reduce, avx512);
  int convs = 0;
  for (const OpNode* n : a.op_nodes())
    if (n->op->name == "kiln.ConvNCHWc") {
      ++convs;
      EXPECT_EQ(n->inputs[1].type().shape, (std::vector<int64_t>{32, 128, 1, 1, 16, 16}));
    }
  EXPECT_EQ(convs, 1) << a.str();
}

// A 1x1 conv after a grouped conv of narrow groups (one-vector blocks, as
// ResNeXt's) reads the grouped conv's blocks as they come: no relayout
// between them; a 3x3 conv there keeps its own block. Equal to the plain graph.
TEST(GraphPasses, OneByOneConvReadsANarrowerInputBlockWithoutARelayout) {
  auto graph = [](int64_t KH) {
    auto x = make_input("x", {{1, 64, 14, 14}, DataType::Float(32)});
    Attrs grouped;
    grouped.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    grouped.set("group", int64_t{16});  // 4 channels a group: one-vector blocks
    Value g = make_op("Conv", {x->output(), make_constant("wg", random_array({64, 4, 3, 3}, 40))->output()}, grouped, "grouped")->output();
    Attrs pads;
    pads.set("pads", std::vector<int64_t>(4, KH / 2));
    Value y = make_op("Conv", {op("Relu", {g}), make_constant("w", random_array({128, 64, KH, KH}, 41))->output()}, pads, "dense")->output();
    return Graph::make({x}, {y});
  };
  for (const char* target : {"llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"}) {
    const Target t = Target::parse(target);
    const int64_t lanes = t.natural_lanes(DataType::Float(32));
    for (int64_t KH : {1, 3}) {
      Graph a = alter_conv_layout(graph(KH), t);
      int transforms = 0;
      for (const OpNode* n : a.op_nodes()) {
        transforms += n->op->name == "kiln.LayoutTransform";
        if (n->op->name == "kiln.ConvNCHWc" && n->name == "dense" && KH == 1)
          EXPECT_EQ(n->inputs[1].type().shape, (std::vector<int64_t>{128 / (2 * lanes), 64 / lanes, 1, 1, lanes, 2 * lanes})) << target;
      }
      EXPECT_EQ(transforms, KH == 1 ? 2 : 3) << target << " " << KH << "x" << KH << "\n" << a.str();
    }
  }
  expect_blocked_matches_plain(graph(1), random_array({1, 64, 14, 14}, 42), "llvm -mcpu=haswell", 1e-5);
}

TEST(GraphPasses, SevenWideConvolutionsTakeOneVectorBlocksAndStayCorrect) {
  auto x = make_input("x", {{1, 16, 7, 7}, DataType::Float(32)});
  Attrs pad1;
  pad1.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  Value c1 = make_op("Conv", {x->output(), make_constant("w1", random_array({16, 16, 3, 3}, 12))->output()}, pad1, "c1")->output();
  Graph g = Graph::make({x}, {op("Relu", {c1})});
  Graph a = alter_conv_layout(g, Target::parse("llvm -mcpu=haswell"));
  int convs = 0;
  for (const OpNode* n : a.op_nodes())
    if (n->op->name == "kiln.ConvNCHWc") {
      ++convs;
      EXPECT_EQ(n->inputs[1].type().shape, (std::vector<int64_t>{2, 2, 3, 3, 8, 8})) << a.str();
    }
  EXPECT_EQ(convs, 1) << a.str();
  // A plan naming the convolution overrides the default.
  LayoutPlan plan;
  plan.conv_max_block["c1"] = 16;
  Graph planned = alter_conv_layout(g, Target::parse("llvm -mcpu=haswell"), plan);
  for (const OpNode* n : planned.op_nodes()) {
    if (n->op->name == "kiln.ConvNCHWc") {
      EXPECT_EQ(n->inputs[1].type().shape, (std::vector<int64_t>{1, 1, 3, 3, 16, 16}));
    }
  }
  // The default plan is per convolution here; a graph whose convolutions all default to two vectors gets the uniform plan.
  EXPECT_EQ(default_layout_plan(g, Target::parse("llvm -mcpu=haswell")).max_block, 0);
  EXPECT_EQ(default_layout_plan(g, Target::parse("llvm -mcpu=skylake-avx512")).max_block, 32);
  expect_blocked_matches_plain(g, random_array({1, 16, 7, 7}, 13), "llvm -mcpu=haswell");
}

// 3x3 stride-1 convolutions with 49 tiles of 2x2 outputs or more run as
// Winograd F(2x2, 3x3): input transform, 16 products, output transform with
// the conv's epilogue fused. Two images of odd extents (half tiles at the
// edges), asymmetric padding, a bias and a residual; compared with the
// plain NCHW conv's loops.
TEST(GraphPasses, ThreeByThreeConvsWithManyPixelsRunAsWinograd) {
  auto x = make_input("x", {{2, 16, 13, 15}, DataType::Float(32)});
  Attrs pad1, uneven;
  pad1.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  uneven.set("pads", std::vector<int64_t>{0, 1, 2, 1});  // top, left, bottom, right: 13 x 15 out
  Value c1 = make_op("Conv", {x->output(), make_constant("w1", random_array({16, 16, 3, 3}, 40))->output(), make_constant("b1", random_array({16}, 41))->output()}, pad1, "c1")->output();
  Value c2 = make_op("Conv", {op("Relu", {c1}), make_constant("w2", random_array({16, 16, 3, 3}, 42))->output()}, uneven, "c2")->output();
  Graph g = Graph::make({x}, {op("Relu", {op("Add", {c2, x->output()}, "residual")})});
  const Target haswell = Target::parse("llvm -mcpu=haswell");
  auto count = [](const Graph& a, const std::string& name) {
    int n = 0;
    for (const OpNode* node : a.op_nodes()) n += node->op->name == name;
    return n;
  };
  Graph a = alter_conv_layout(g, haswell);
  EXPECT_EQ(count(a, "kiln.WinogradInputNCHWc"), 2) << a.str();
  EXPECT_EQ(count(a, "kiln.WinogradMatMul"), 2) << a.str();
  EXPECT_EQ(count(a, "kiln.WinogradOutputNCHWc"), 2) << a.str();
  EXPECT_EQ(count(a, "kiln.ConvNCHWc"), 0) << a.str();
  // Fused, the epilogue (bias, relu; residual, relu) goes with the output transform.
  Graph fused = optimize(g, haswell);
  int output_groups = 0;
  for (const OpNode* node : fused.op_nodes()) {
    std::string ops = node->attrs.get_string("ops");
    if (ops.rfind("kiln.WinogradOutputNCHWc", 0) == 0) {
      ++output_groups;
      EXPECT_NE(ops.find("Relu"), std::string::npos) << ops;
    }
  }
  EXPECT_EQ(output_groups, 2) << fused.str();
  // A plan without Winograd keeps the direct conv; a 7 x 7 output (16 tiles) never takes it.
  LayoutPlan direct;
  direct.winograd = 0;
  EXPECT_EQ(count(alter_conv_layout(g, haswell, direct), "kiln.ConvNCHWc"), 2);
  auto small = make_input("x", {{1, 16, 7, 7}, DataType::Float(32)});
  Graph g7 = Graph::make({small}, {make_op("Conv", {small->output(), make_constant("w", random_array({16, 16, 3, 3}, 43))->output()}, pad1, "c")->output()});
  EXPECT_EQ(count(alter_conv_layout(g7, haswell), "kiln.WinogradMatMul"), 0);
  expect_blocked_matches_plain(g, random_array({2, 16, 13, 15}, 44), "llvm -mcpu=haswell");
}

TEST(GraphPasses, ConvsWithManyFourByFourTilesRunAsWinogradF4x4) {
  // 29 x 30 outputs: 8 x 8 tiles of 4 x 4, the last row and column of tiles partly past the image.
  auto x = make_input("x", {{1, 16, 29, 30}, DataType::Float(32)});
  Attrs pad1, uneven;
  pad1.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  uneven.set("pads", std::vector<int64_t>{2, 0, 0, 2});  // top, left, bottom, right: 29 x 30 out
  Value c1 = make_op("Conv", {x->output(), make_constant("w1", random_array({32, 16, 3, 3}, 50))->output(), make_constant("b1", random_array({32}, 51))->output()}, pad1, "c1")->output();
  Value c2 = make_op("Conv", {op("Relu", {c1}), make_constant("w2", random_array({16, 32, 3, 3}, 52))->output()}, uneven, "c2")->output();
  Graph g = Graph::make({x}, {op("Relu", {op("Add", {c2, x->output()}, "residual")})});
  // The transformed tiles of each conv: 36 (F(4x4, 3x3)) by default, 16 (F(2x2, 3x3)) with the plan's largest tile 2.
  auto tiles = [&](const Target& t, const LayoutPlan& plan) {
    std::vector<int64_t> out;
    Graph a = alter_conv_layout(g, t, plan);
    for (const OpNode* node : a.op_nodes())
      if (node->op->name == "kiln.WinogradMatMul") out.push_back(node->types[0].shape[0]);
    return out;
  };
  LayoutPlan small_tiles;
  small_tiles.winograd = 2;
  for (const char* name : {"llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"}) {
    const Target t = Target::parse(name);
    EXPECT_EQ(tiles(t, LayoutPlan{}), (std::vector<int64_t>{36, 36})) << name;
    EXPECT_EQ(tiles(t, small_tiles), (std::vector<int64_t>{16, 16})) << name;
  }
  // F(4x4, 3x3)'s float32 error: a few 1e-6 of the largest output (up to about 70 here).
  expect_blocked_matches_plain(g, random_array({1, 16, 29, 30}, 53), "llvm -mcpu=haswell", 1e-5);
}

TEST(GraphPasses, DepthwiseConvKeepsTheBlockItsInputComesIn) {
  // MobileNetV2's inverted residual at 7 x 7 on AVX2: the 1x1 convs take
  // one-vector blocks (8), and the depthwise conv between them follows, so
  // no transform sits between the three.
  auto x = make_input("x", {{1, 16, 7, 7}, DataType::Float(32)});
  Attrs dw;
  dw.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  dw.set("group", int64_t{32});
  Value expand = make_op("Conv", {x->output(), make_constant("we", random_array({32, 16, 1, 1}, 20))->output()}, {}, "expand")->output();
  Value depthwise = make_op("Conv", {op("Relu", {expand}), make_constant("wd", random_array({32, 1, 3, 3}, 21))->output()}, dw, "depthwise")->output();
  Value project = make_op("Conv", {op("Relu", {depthwise}), make_constant("wp", random_array({16, 32, 1, 1}, 22))->output()}, {}, "project")->output();
  Graph g = Graph::make({x}, {project});
  const Target haswell = Target::parse("llvm -mcpu=haswell");
  ASSERT_EQ(default_conv_cap(32, 7, 7, haswell), 8);
  auto transforms_and_depthwise_block = [&](const LayoutPlan& plan) {
    Graph a = alter_conv_layout(g, haswell, plan);
    int transforms = 0;
    int64_t block = 0;
    for (const OpNode* n : a.op_nodes()) {
      transforms += n->op->name == "kiln.LayoutTransform";
      if (n->op->name == "kiln.DepthwiseConvNCHWc") block = n->inputs[1].type().shape.back();
    }
    return std::make_pair(transforms, block);
  };
  // The graph's input and output only.
  EXPECT_EQ(transforms_and_depthwise_block(LayoutPlan{}), std::make_pair(2, int64_t{8}));
  // A plan that names the depthwise conv still decides its block (and pays the relayouts).
  LayoutPlan named;
  named.conv_max_block["depthwise"] = 16;
  EXPECT_EQ(transforms_and_depthwise_block(named), std::make_pair(4, int64_t{16}));
  expect_blocked_matches_plain(g, random_array({1, 16, 7, 7}, 23), "llvm -mcpu=haswell");
}

TEST(GraphExecutor, FusedAndUnfusedMatchNaiveLoops) {
  NDArray w, b;
  Graph g = mlp_graph(&w, &b);
  NDArray x = random_array({4, 16}, 6);
  // Naive reference.
  std::vector<float> act(4 * 8), sum(4, 0.f);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) {
      float acc = 0;
      for (int k = 0; k < 16; ++k) acc += x.data_as<float>()[i * 16 + k] * w.data_as<float>()[k * 8 + j];
      act[i * 8 + j] = std::max(0.f, acc + b.data_as<float>()[j]);
      sum[i] += act[i * 8 + j] * act[i * 8 + j];
    }
  for (bool fuse : {true, false}) {
    Executor exe = compile(g, options(fuse, true, false));
    EXPECT_EQ(exe.groups().size(), fuse ? 2u : 5u);
    std::vector<NDArray> out = exe.run({x});
    ASSERT_EQ(out.size(), 2u);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[0].data_as<float>()[i], sum[i], 1e-4 * (1 + std::abs(sum[i])));
    for (int i = 0; i < 32; ++i) EXPECT_NEAR(out[1].data_as<float>()[i], act[i], 1e-5);
    MemoryReport m = exe.memory();
    EXPECT_EQ(m.weight_bytes, (16 * 8 + 8) * 4);
    EXPECT_LE(m.arena_bytes, m.naive_bytes + 64 * 5);
  }
}

TEST(GraphExecutor, WrongInputsAreRefused) {
  NDArray w, b;
  Executor exe = compile(mlp_graph(&w, &b));
  auto msg = [&](std::vector<NDArray> in) {
    try {
      exe.run(in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg({random_array({4, 15}, 1)}).find("has shape [4, 15]; the model was compiled for [4, 16]"), std::string::npos);
  EXPECT_NE(msg({NDArray::empty({4, 16}, DataType::Int(32))}).find("has dtype int32; the model expects float32"), std::string::npos);
  EXPECT_NE(msg({}).find("takes 1 inputs, got 0"), std::string::npos);
}

TEST(MemoryPlan, ReusesBytesOfDeadValuesOnly) {
  // A chain a -> b -> c -> d: each value dies when the next is written, so two slots suffice.
  std::vector<PlannedValue> vs(4);
  for (int i = 0; i < 4; ++i) {
    vs[i].bytes = 1000;
    vs[i].first_step = i;
    vs[i].last_step = i + 1;
  }
  MemoryPlanStats st = plan_memory(&vs);
  EXPECT_EQ(st.naive_bytes, 4000);
  EXPECT_EQ(st.arena_bytes, 2 * 1024);
  EXPECT_EQ(st.peak_bytes, 2 * 1024);
  for (int i = 0; i + 1 < 4; ++i) EXPECT_NE(vs[i].offset, vs[i + 1].offset);  // overlapping lifetimes never share
  // In place: value 1 may take value 0's bytes (0 dies at step 1, where 1 is written).
  std::vector<PlannedValue> ip(2);
  ip[0] = {1000, 0, 1};
  ip[1] = {1000, 1, 2, 0};
  MemoryPlanStats st2 = plan_memory(&ip);
  EXPECT_EQ(st2.inplace, 1);
  EXPECT_EQ(ip[0].offset, ip[1].offset);
  EXPECT_EQ(st2.arena_bytes, 1024);
}

TEST(MemoryPlan, ChainsOfInPlaceValuesShareOneAllocation) {
  // A ResNet's residual blocks: each block's output written over the block before it (read at steps 1, 3, 5...).
  std::vector<PlannedValue> vs(4);
  for (int i = 0; i < 4; ++i) vs[i] = {1000, 2 * i, 2 * i + 2, i - 1};
  // Value 4 lives beside the chain (steps 1..2): it may not take the chain's bytes.
  vs.push_back({1000, 1, 2});
  MemoryPlanStats st = plan_memory(&vs);
  EXPECT_EQ(st.inplace, 3);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(vs[i].offset, vs[0].offset);
  EXPECT_NE(vs[4].offset, vs[0].offset);
}

TEST(MemoryPlan, RandomLifetimesNeverOverlapInSpaceAndTime) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<PlannedValue> vs(30);
    for (auto& v : vs) {
      v.bytes = 64 + rng() % 5000;
      v.first_step = rng() % 20;
      v.last_step = v.first_step + rng() % 6;
    }
    MemoryPlanStats st = plan_memory(&vs);
    EXPECT_GE(st.arena_bytes, st.peak_bytes);
    EXPECT_LE(st.arena_bytes, st.naive_bytes + 64 * 30);
    for (size_t i = 0; i < vs.size(); ++i)
      for (size_t j = i + 1; j < vs.size(); ++j) {
        bool time = vs[i].first_step <= vs[j].last_step && vs[j].first_step <= vs[i].last_step;
        bool space = vs[i].offset < vs[j].offset + vs[j].bytes && vs[j].offset < vs[i].offset + vs[i].bytes;
        EXPECT_FALSE(time && space) << "values " << i << " and " << j << " collide";
      }
  }
}

// A join's producers write into its bytes (view_of): each piece lies at its
// offset in its host, and nothing outside the join shares those bytes while
// any of them lives, in-place requests on pieces and hosts included.
TEST(MemoryPlan, PiecesOfJoinsLieInTheirHostsAndNothingElseCollides) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<PlannedValue> vs(30);
    for (auto& v : vs) {
      v.bytes = 64 * (1 + rng() % 80);
      v.first_step = rng() % 20;
      v.last_step = v.first_step + rng() % 6;
    }
    std::vector<int> family(vs.size());
    for (size_t i = 0; i < vs.size(); ++i) family[i] = static_cast<int>(i);
    // Values 0-2 join into 3, 4-5 into 6: the host written at its last piece's step, read a while after.
    auto join = [&](std::vector<int> pieces, int host) {
      int64_t offset = 0;
      int written = 0;
      for (int p : pieces) {
        vs[p].view_of = host;
        vs[p].view_offset = offset;
        offset += vs[p].bytes;
        written = std::max(written, vs[p].first_step);
        family[p] = host;
      }
      vs[host].bytes = offset + 64 * (rng() % 2);  // a host may hold more than its pieces
      vs[host].first_step = vs[host].last_step = written;
      vs[host].last_step += rng() % 6;
    };
    join({0, 1, 2}, 3);
    join({4, 5}, 6);
    // In place over a piece, a host, and a piece over another value: all refused.
    vs[7].first_step = vs[7].last_step = vs[0].last_step, vs[7].bytes = vs[0].bytes, vs[7].inplace_of = 0;
    vs[8].first_step = vs[8].last_step = vs[3].last_step, vs[8].bytes = 64, vs[8].inplace_of = 3;
    vs[1].inplace_of = 9;
    MemoryPlanStats st = plan_memory(&vs);
    EXPECT_EQ(st.inplace, 0);
    EXPECT_GE(st.arena_bytes, st.peak_bytes);
    for (int p : {0, 1, 2}) EXPECT_EQ(vs[p].offset, vs[3].offset + vs[p].view_offset);
    for (int p : {4, 5}) EXPECT_EQ(vs[p].offset, vs[6].offset + vs[p].view_offset);
    for (size_t i = 0; i < vs.size(); ++i)
      for (size_t j = i + 1; j < vs.size(); ++j) {
        if (family[i] == family[j] || family[i] == static_cast<int>(j) || family[j] == static_cast<int>(i)) continue;
        bool time = vs[i].first_step <= vs[j].last_step && vs[j].first_step <= vs[i].last_step;
        bool space = vs[i].offset < vs[j].offset + vs[j].bytes && vs[j].offset < vs[i].offset + vs[i].bytes;
        EXPECT_FALSE(time && space) << "trial " << trial << ": values " << i << " and " << j << " collide";
      }
  }
}

}  // namespace
}  // namespace kiln::graph
