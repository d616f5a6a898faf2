// The registry entry as the distribution pass reads it: every operator
// declares a sharding rule (an op without one is refused by name, never
// guessed), and the cost auto_shard weighs comes from the entry (OpDef::cost),
// checked against counts by hand.
#include <gtest/gtest.h>

#include <string>

#include "kiln/dist/auto_shard.h"
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/support/error.h"

using namespace kiln;
using namespace kiln::graph;
using namespace kiln::dist;

namespace {

Value weight(const std::string& name, std::vector<int64_t> shape) { return make_constant(name, NDArray::empty(shape, DataType::Float(32)))->output(); }

// An elementwise-looking op registered without a sharding rule: the pass must not guess the elementwise rule from its pattern.
const OpDef& no_rule_op() {
  static const OpDef& op = []() -> const OpDef& {
    OpDef d;
    d.name = "test.NoShardingRule";
    d.pattern = Pattern::Elementwise;
    d.infer = [](const OpCall& call) { return std::vector<TensorType>{call.input_types[0]}; };
    return register_op(std::move(d));
  }();
  return op;
}

// An op whose entry claims a contraction of 1e6 multiply-adds whatever its shapes.
const OpDef& heavy_op() {
  static const OpDef& op = []() -> const OpDef& {
    OpDef d;
    d.name = "test.Heavy";
    d.pattern = Pattern::Opaque;
    d.infer = [](const OpCall& call) { return std::vector<TensorType>{call.input_types[0]}; };
    d.sharding = replicated_rule();
    d.cost = [](const OpCall&, const std::vector<TensorType>&) {
      OpCost c;
      c.macs = 1e6;
      c.rows = 1e6;
      return c;
    };
    return register_op(std::move(d));
  }();
  return op;
}

}  // namespace

TEST(DistRegistry, EveryRegisteredOpHasAShardingRule) {
  no_rule_op();  // registered by this test only, and refused below
  // kiln.fused registers on fuse_ops' first call.
  auto x = make_input("x", {{4}, DataType::Float(32)});
  fuse_ops(Graph::make({x}, {make_op("Relu", {x->output()})->output()}));
  ASSERT_NE(find_op("kiln.fused"), nullptr);
  for (const std::string& name : registered_ops()) {
    if (name == no_rule_op().name) continue;
    const OpDef& op = get_op(name);
    EXPECT_TRUE(op.sharding.defined()) << name << " has no sharding rule";
    EXPECT_FALSE(op.sharding.name.empty()) << name;
  }
}

TEST(DistRegistry, AnOpWithoutARuleIsRefusedByName) {
  auto x = make_input("x", {{8, 4}, DataType::Float(32)});
  Value y = make_op(&no_rule_op(), {make_op("Relu", {x->output()})->output()}, {}, "mystery")->output();
  Graph g = Graph::make({x}, {y});
  try {
    shard_graph(g, Mesh({{"data", 2}}), {{"x", "S(data) R"}});
    FAIL() << "shard_graph accepted an op without a sharding rule";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("test.NoShardingRule node 'mystery'"), std::string::npos) << m;
    EXPECT_NE(m.find("has no sharding rule"), std::string::npos) << m;
    EXPECT_NE(m.find("register a sharding rule in its OpDef"), std::string::npos) << m;
  }
  // auto_shard and the pipeline's op_times run the same pass: refused too.
  EXPECT_THROW(op_times(g), Error);
}

TEST(DistRegistry, CostOfMatMulConvAndElementwiseByHand) {
  // MatMul [2, 1, 4, 8] x [3, 8, 5] -> [2, 3, 4, 5]: 120 outputs of 8 multiply-adds; rows 2 x 3 x 4.
  auto q = make_input("q", TensorType{{2, 1, 4, 8}});
  auto m = make_op("MatMul", {q->output(), weight("k", {3, 8, 5})});
  OpCost mc = op_cost(*m);
  EXPECT_DOUBLE_EQ(mc.macs, 120.0 * 8);
  EXPECT_DOUBLE_EQ(mc.flops, 2 * 120.0 * 8);
  EXPECT_DOUBLE_EQ(mc.rows, 24);
  EXPECT_DOUBLE_EQ(mc.bytes, 4.0 * (64 + 120 + 120));  // A, B read, Y written (float32)

  // Conv x [2, 8, 10, 10] by W [6, 4, 3, 3] (group 2, stride 2) + bias: y [2, 6, 4, 4],
  // each output 4 x 3 x 3 multiply-adds and one bias add; rows N x H x W = 32.
  auto x = make_input("x", TensorType{{2, 8, 10, 10}});
  auto c = make_op("Conv", {x->output(), weight("w", {6, 4, 3, 3}), weight("b", {6})},
                   Attrs({{"group", int64_t(2)}, {"strides", std::vector<int64_t>{2, 2}}}));
  ASSERT_EQ(c->types[0].shape, (std::vector<int64_t>{2, 6, 4, 4}));
  OpCost cc = op_cost(*c);
  EXPECT_DOUBLE_EQ(cc.macs, 192.0 * 36);
  EXPECT_DOUBLE_EQ(cc.flops, 2 * 192.0 * 36 + 192);
  EXPECT_DOUBLE_EQ(cc.rows, 32);
  EXPECT_DOUBLE_EQ(cc.bytes, 4.0 * (1600 + 216 + 6 + 192));

  // Add [4, 5] + [5] -> [4, 5]: one op per output element, no contraction; bytes 20 + 5 read, 20 written.
  auto a = make_input("a", TensorType{{4, 5}});
  auto add = make_op("Add", {a->output(), weight("bias", {5})});
  OpCost ac = op_cost(*add);
  EXPECT_DOUBLE_EQ(ac.macs, 0);
  EXPECT_DOUBLE_EQ(ac.flops, 20);
  EXPECT_DOUBLE_EQ(ac.bytes, 4.0 * (20 + 5 + 20));
}

TEST(DistRegistry, AutoShardWeighsOpsByTheirEntrysCost) {
  // One op: its seconds are the entry's 1e6 multiply-adds at the GEMM rate plus one kernel,
  // whatever its (tiny) shapes, and the op the entry says nothing about streams its bytes.
  auto x = make_input("x", {{4, 4}, DataType::Float(32)});
  Value h = make_op(&heavy_op(), {x->output()}, {}, "heavy")->output();
  Value y = make_op("Transpose", {h})->output();
  CostParams p;
  std::vector<double> t = op_times(Graph::make({x}, {y}), p);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_DOUBLE_EQ(t[0], p.kernel_s + 2 * 1e6 / p.flops_per_s);
  EXPECT_DOUBLE_EQ(t[1], 2 * 64.0 / p.memory_bytes_per_s);  // injective: no kernel of its own
  // On a mesh of two with x split, a MatMul's cost is the rank's half.
  auto a = make_input("a", {{8, 16}, DataType::Float(32)});
  Graph g = Graph::make({a}, {make_op("MatMul", {a->output(), weight("w", {16, 32})})->output()});
  PlanEstimate one = estimate_plan(shard_graph(g, Mesh({{"data", 2}}), {}), p);
  PlanEstimate two = estimate_plan(shard_graph(g, Mesh({{"data", 2}}), {{"a", "S(data) R"}}), p);
  EXPECT_NEAR(one.compute_s - two.compute_s, 2.0 * 4 * 32 * 16 / p.flops_per_s, 1e-15);
}
