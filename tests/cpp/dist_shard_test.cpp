// The distribution pass: specs, propagation, collective insertion and per-rank lowering, checked by golden dumps.
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/dist/runner.h"
#include "kiln/dist/shard.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/op_registry.h"
#include "kiln/support/error.h"

using namespace kiln;
using namespace kiln::graph;
using namespace kiln::dist;

#include "dist_goldens.inc"

namespace {

Value weight(const std::string& name, std::vector<int64_t> shape) {
  NDArray a = NDArray::empty(shape, DataType::Float(32));
  float* p = static_cast<float*>(a.data());
  for (int64_t i = 0; i < a.numel(); ++i) p[i] = static_cast<float>(i);
  return make_constant(name, a)->output();
}

Value op(const std::string& name, std::vector<Value> in, Attrs attrs = {}) { return make_op(name, std::move(in), std::move(attrs), "")->output(); }

// x[8,16] -> MatMul w1[16,32] -> Relu -> MatMul w2[32,16] -> Add b2
Graph mlp(Ref<InputNode>& x) {
  x = make_input("x", {{8, 16}, DataType::Float(32)});
  Value h = op("Relu", {op("Add", {op("MatMul", {x->output(), weight("w1", {16, 32})}), weight("b1", {32})})});
  Value y = op("Add", {op("MatMul", {h, weight("w2", {32, 16})}), weight("b2", {16})});
  return Graph::make({x}, {y});
}

int count_ops(const Graph& g, const std::string& name) {
  int n = 0;
  for (const OpNode* o : g.op_nodes()) n += o->op->name == name;
  return n;
}

}  // namespace

TEST(DistSpec, PrintParseLocalShape) {
  Mesh mesh({{"data", 2}, {"model", 2}});
  EXPECT_EQ(mesh.str(), "Mesh(data=2, model=2)");
  EXPECT_EQ(mesh.coords(3), (std::vector<int>{1, 1}));
  EXPECT_EQ(mesh.rank_of({1, 0}), 2);
  ShardingSpec s = parse_spec("S(data,model) R partial(x)", Mesh({{"data", 2}, {"model", 2}, {"x", 1}}), 2, "t");
  EXPECT_EQ(s.str(Mesh({{"data", 2}, {"model", 2}, {"x", 1}})), "S(data,model) R partial(x)");
  ShardingSpec t = parse_spec("R S(model)", mesh, 2, "t");
  EXPECT_EQ(local_shape({8, 6}, t, mesh, "t"), (std::vector<int64_t>{8, 3}));
  EXPECT_THROW(local_shape({8, 5}, t, mesh, "t"), kiln::Error);
  EXPECT_THROW(parse_spec("S(pipe) R", mesh, 2, "t"), kiln::Error);
  EXPECT_THROW(parse_spec("R", mesh, 2, "t"), kiln::Error);
  EXPECT_THROW(parse_spec("S(data) S(data)", mesh, 2, "t"), kiln::Error);
  auto block = local_block({8, 6}, parse_spec("S(data,model) R", mesh, 2, "t"), mesh, 2);
  EXPECT_EQ(block[0], (std::pair<int64_t, int64_t>{4, 2}));  // rank 2 = (data 1, model 0): block 2 of 4
}

TEST(DistShard, MatmulChainRowSplitGivesPartialThenAllReduce) {
  Mesh mesh({{"model", 2}});
  auto x = make_input("x", {{4, 8}, DataType::Float(32)});
  Value y = op("MatMul", {op("MatMul", {x->output(), weight("w1", {8, 8})}), weight("w2", {8, 4})});
  ShardedGraph sg = shard_graph(Graph::make({x}, {y}), mesh, {{"w1", "R S(model)"}, {"w2", "S(model) R"}});
  EXPECT_EQ(sg.str(), GOLDEN_CHAIN);
  Graph r1 = lower_to_rank(sg, 1);
  EXPECT_EQ(r1.str(), GOLDEN_CHAIN_RANK1);
}

TEST(DistShard, MegatronMlpColumnThenRowOneAllReduce) {
  Ref<InputNode> x;
  Graph g = mlp(x);
  ShardedGraph sg = shard_graph(g, Mesh({{"model", 2}}), {{"w1", "R S(model)"}, {"w2", "S(model) R"}});
  EXPECT_EQ(sg.str(), GOLDEN_MLP);
  EXPECT_EQ(count_ops(sg.graph, "kiln.AllReduce"), 1);
  Graph r0 = lower_to_rank(sg, 0);
  EXPECT_EQ(r0.inputs()[0]->types[0].shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(r0.str(), GOLDEN_MLP_RANK0);
}

TEST(DistShard, DataParallelMlpOnTwoAxes) {
  Ref<InputNode> x;
  Graph g = mlp(x);
  Mesh mesh({{"data", 2}, {"model", 2}});
  ShardedGraph sg = shard_graph(g, mesh, {{"x", "S(data) R"}, {"w1", "R S(model)"}, {"w2", "S(model) R"}});
  EXPECT_EQ(sg.str(), GOLDEN_MLP_2D);
  EXPECT_EQ(lower_to_rank(sg, 3).inputs()[0]->types[0].shape, (std::vector<int64_t>{4, 16}));
}

TEST(DistShard, CnnDataParallel) {
  auto x = make_input("x", {{4, 3, 8, 8}, DataType::Float(32)});
  Value c = op("Relu", {op("Conv", {x->output(), weight("w", {8, 3, 3, 3}), weight("b", {8})}, Attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}))});
  Value p = op("Flatten", {op("GlobalAveragePool", {c})});
  Value y = op("Softmax", {op("Gemm", {p, weight("fc", {5, 8}), weight("fcb", {5})}, Attrs({{"transB", int64_t{1}}}))});
  ShardedGraph sg = shard_graph(Graph::make({x}, {y}), Mesh({{"data", 2}}), {{"x", "S(data) R R R"}});
  EXPECT_EQ(sg.str(), GOLDEN_CNN);
  EXPECT_EQ(count_ops(sg.graph, "kiln.AllGather"), 1);
  EXPECT_EQ(lower_to_rank(sg, 1).str(), GOLDEN_CNN_RANK1);
}

TEST(DistShard, ReshardingBetweenSpecKinds) {
  // Each kind of resharding: partial -> replicated (all-reduce), partial -> split
  // (reduce-scatter), split dim 0 -> dim 1 (all-to-all), split -> replicated
  // (all-gather), replicated -> split (a local slice), replicated -> partial.
  Mesh mesh({{"m", 2}});
  auto x = make_input("x", {{4, 8}, DataType::Float(32)});
  auto y = make_input("y", {{4, 4}, DataType::Float(32)});
  auto z = make_input("z", {{4, 4}, DataType::Float(32)});
  auto r = make_input("r", {{4, 4}, DataType::Float(32)});
  Value p = op("MatMul", {x->output(), weight("w", {8, 4})});
  Value s = op("Add", {op("Add", {op("Add", {p, y->output()}), z->output()}), r->output()});
  Value g = op("Gemm", {x->output(), weight("v", {8, 4}), r->output()});
  ShardedGraph sg = shard_graph(Graph::make({x, y, z, r}, {s, g}), mesh, {{"x", "R S(m)"}, {"y", "S(m) R"}, {"z", "R S(m)"}, {"r", "R R"}});
  EXPECT_EQ(sg.str(), GOLDEN_RESHARD);
  for (const char* c : {"kiln.AllReduce", "kiln.ReduceScatter", "kiln.AllToAll", "kiln.AllGather", "kiln.Shard", "kiln.ToPartial"})
    EXPECT_GE(count_ops(sg.graph, c), 1) << c;
  EXPECT_EQ(lower_to_rank(sg, 1).str(), GOLDEN_RESHARD_RANK1);
  // Partial sums are resolved even when outputs stay sharded.
  ShardedGraph k = shard_graph(Graph::make({x}, {p}), mesh, {{"x", "R S(m)"}}, {.keep_outputs_sharded = true});
  EXPECT_EQ(count_ops(k.graph, "kiln.AllReduce"), 1);
}

Value constant_ints(const std::string& name, std::vector<int64_t> v) {
  NDArray a = NDArray::empty({static_cast<int64_t>(v.size())}, DataType::Int(64));
  std::memcpy(a.data(), v.data(), v.size() * sizeof(int64_t));
  return make_constant(name, a)->output();
}

// Self-attention with 2 heads and a residual layer norm: x [2, 4, 8].
Graph attention_block() {
  auto x = make_input("x", {{2, 4, 8}, DataType::Float(32)});
  auto heads = [&](const std::string& w, std::vector<int64_t> perm) {
    Value p = op("MatMul", {x->output(), weight(w, {8, 8})});
    Value r = make_op("Reshape", {p, constant_ints(w + ".shape", {2, 4, 2, 4})}, {}, w + ".heads")->output();
    return op("Transpose", {r}, Attrs({{"perm", perm}}));
  };
  Value q = heads("wq", {0, 2, 1, 3}), k = heads("wk", {0, 2, 3, 1}), v = heads("wv", {0, 2, 1, 3});
  Value s = op("Softmax", {op("MatMul", {q, k})}, Attrs({{"axis", int64_t{-1}}}));
  Value o = op("Transpose", {op("MatMul", {s, v})}, Attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
  Value merged = make_op("Reshape", {o, constant_ints("merge.shape", {2, 4, 8})}, {}, "merge")->output();
  Value y = op("Add", {op("MatMul", {merged, weight("wo", {8, 8})}), x->output()});
  Value n = op("LayerNormalization", {y, weight("ln.scale", {8}), weight("ln.bias", {8})});
  return Graph::make({x}, {n});
}

TEST(DistShard, TransformerAttentionSplitByHeads) {
  ShardedGraph sg = shard_graph(attention_block(), Mesh({{"model", 2}}),
                                {{"wq", "R S(model)"}, {"wk", "R S(model)"}, {"wv", "R S(model)"}, {"wo", "S(model) R"}});
  EXPECT_EQ(sg.str(), GOLDEN_ATTENTION);
  EXPECT_EQ(count_ops(sg.graph, "kiln.AllReduce"), 1);
  EXPECT_EQ(count_ops(sg.graph, "kiln.AllGather"), 0);
  Graph r1 = lower_to_rank(sg, 1);
  EXPECT_EQ(r1.str(), GOLDEN_ATTENTION_RANK1);
}

TEST(DistShard, AWeightWantedTwoWaysIsSlicedTwiceNotCommunicated) {
  Mesh mesh({{"m", 2}});
  auto a = make_input("a", {{4, 4}, DataType::Float(32)});
  auto b = make_input("b", {{4, 4}, DataType::Float(32)});
  Value w = weight("w", {4, 4});
  Value y = op("Add", {op("Add", {a->output(), w}), op("Add", {b->output(), w})});
  ShardedGraph sg = shard_graph(Graph::make({a, b}, {y}), mesh, {{"a", "S(m) R"}, {"b", "R S(m)"}});
  int constants = 0;
  for (const auto& n : sg.graph.topo_order()) constants += n->kind == NodeKind::Constant;
  EXPECT_EQ(constants, 2) << sg.str();
  EXPECT_EQ(count_ops(sg.graph, "kiln.AllToAll"), 1) << sg.str();  // only between the two activations
  Graph r0 = lower_to_rank(sg, 0);
  EXPECT_EQ(r0.op_nodes().size(), 5u);  // three Adds, the all-to-all and the output's all-gather
}

TEST(DistShard, MatmulConflictTakesTheCheaperResharding) {
  // A [4, 64] split on K over m and B [64, 256] split on its columns over m: keeping B's
  // split and gathering A's K moves A (small); keeping A's would gather B (large).
  Mesh mesh({{"m", 2}});
  auto a = make_input("a", {{4, 64}, DataType::Float(32)});
  auto b = make_input("b", {{64, 256}, DataType::Float(32)});
  Value y = op("MatMul", {a->output(), b->output()});
  ShardedGraph sg = shard_graph(Graph::make({a, b}, {y}), mesh, {{"a", "R S(m)"}, {"b", "R S(m)"}}, {.keep_outputs_sharded = true});
  const OpNode* mm = nullptr;
  for (const OpNode* o : sg.graph.op_nodes())
    if (o->op->name == "MatMul") mm = o;
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(sg.specs.at(mm->output()).str(mesh), "R S(m)") << sg.str();
  EXPECT_EQ(count_ops(sg.graph, "kiln.AllGather"), 1);
  for (const OpNode* o : sg.graph.op_nodes())
    if (o->op->name == "kiln.AllGather") {
      EXPECT_EQ(o->attrs.get_int("bytes"), 4 * 64 * 4);  // A gathered, not B
    }
  // Swapped sizes: A large, B small: A's K split is kept (B moves its split by an all-to-all) and the output is a partial sum.
  auto a2 = make_input("a", {{256, 64}, DataType::Float(32)});
  auto b2 = make_input("b", {{64, 4}, DataType::Float(32)});
  ShardedGraph sg2 = shard_graph(Graph::make({a2, b2}, {op("MatMul", {a2->output(), b2->output()})}), Mesh({{"m", 2}}),
                                 {{"a", "R S(m)"}, {"b", "R S(m)"}});
  EXPECT_EQ(count_ops(sg2.graph, "kiln.AllReduce"), 1) << sg2.str();
}

TEST(DistShard, Errors) {
  Ref<InputNode> x;
  Graph g = mlp(x);
  EXPECT_THROW(shard_graph(g, Mesh({{"model", 2}}), {{"nope", "R R"}}), kiln::Error);
  EXPECT_THROW(shard_graph(g, Mesh({{"model", 3}}), {{"x", "S(model) R"}}), kiln::Error);
  EXPECT_THROW(Mesh({{"a", 2}, {"a", 2}}), kiln::Error);
  EXPECT_THROW(shard_graph(g, Mesh({{"model", 2}}), {{"x", "R R partial(model)"}}), kiln::Error);
}

TEST(DistStrategy, MegatronSplitsColumnsThenRows) {
  Ref<InputNode> x;
  Mesh mesh({{"model", 2}});
  auto mlp_specs = megatron_specs(mlp(x), mesh, "model");
  EXPECT_EQ(mlp_specs, (std::map<std::string, std::string>{{"w1", "R S(model)"}, {"w2", "S(model) R"}}));
  auto att = megatron_specs(attention_block(), mesh, "model");
  EXPECT_EQ(att, (std::map<std::string, std::string>{{"wq", "R S(model)"}, {"wk", "R S(model)"}, {"wv", "R S(model)"}, {"wo", "S(model) R"}}));
  EXPECT_THROW(megatron_specs(attention_block(), mesh, "data"), kiln::Error);
}

TEST(DistRunner, OneRankRunsTheMeshOfOne) {
  // Without mpirun the world is one rank: collectives are copies, and the segments around them run.
  Ref<InputNode> x;
  Graph g = mlp(x);
  ShardedGraph sg = shard_graph(g, Mesh({{"model", 1}}), megatron_specs(g, Mesh({{"model", 1}}), "model"));
  Runner runner(sg, world());
  EXPECT_EQ(runner.num_segments(), 2);  // before and after the all-reduce
  NDArray in = NDArray::empty({8, 16}, DataType::Float(32));
  for (int64_t i = 0; i < in.numel(); ++i) static_cast<float*>(in.data())[i] = 0.01f * static_cast<float>(i % 7);
  NDArray got = runner.run({in})[0];
  NDArray want = compile(g).run({in})[0];
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_NEAR(static_cast<float*>(got.data())[i], static_cast<float*>(want.data())[i], 1e-4);
  EXPECT_THROW(Runner(shard_graph(g, Mesh({{"model", 2}}), {}), world()), kiln::Error);  // 2 ranks wanted, 1 running
}
