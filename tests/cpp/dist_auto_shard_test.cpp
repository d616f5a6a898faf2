// Automatic sharding (kiln/dist/auto_shard.h): the estimate's parts, and the
// search's choice with and without a memory limit.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/dist/auto_shard.h"
#include "kiln/graph/op_registry.h"
#include "kiln/support/error.h"

using namespace kiln;
using namespace kiln::graph;
using namespace kiln::dist;

namespace {

Value weight(const std::string& name, std::vector<int64_t> shape) {
  NDArray a = NDArray::empty(shape, DataType::Float(32));
  std::fill_n(static_cast<float*>(a.data()), a.numel(), 0.5f);
  return make_constant(name, a)->output();
}

// x[batch, width] through `layers` MatMul + Relu with width x width weights (4 MB each at width 1024).
Graph chain(int64_t batch, int64_t width, int layers) {
  auto x = make_input("x", {{batch, width}, DataType::Float(32)});
  Value h = x->output();
  for (int i = 0; i < layers; ++i)
    h = make_op("Relu", {make_op("MatMul", {h, weight("w" + std::to_string(i), {width, width})})->output()})->output();
  return Graph::make({x}, {h});
}

const PlanEstimate* baseline(const AutoShardResult& r, const std::string& name) {
  for (const auto& [n, e] : r.baselines)
    if (n == name) return &e;
  return nullptr;
}

}  // namespace

TEST(DistAutoShard, EstimateCountsComputeCommAndMemory) {
  Graph g = chain(64, 256, 2);
  Mesh mesh({{"model", 2}});
  CostParams c;
  // Replicated: the full matmuls, no collective; memory = weights + input + the live intermediates.
  PlanEstimate rep = estimate_plan(shard_graph(g, mesh, {}), c);
  EXPECT_EQ(rep.collectives, 0);
  // Two matmul kernels (the Relus fuse into them) and one run.
  EXPECT_NEAR(rep.compute_s, 2 * (2.0 * 64 * 256 * 256) / c.flops_per_s + 2 * (2 * 64 * 256 * 4.0) / c.memory_bytes_per_s + 2 * c.kernel_s + c.run_s,
              1e-9);
  EXPECT_GE(rep.memory_bytes, 2 * 256 * 256 * 4 + 64 * 256 * 4);
  // Megatron: w0 columns, w1 rows: half the multiply-adds, one all-reduce of the [64, 256] output.
  PlanEstimate mt = estimate_plan(shard_graph(g, mesh, megatron_specs(g, mesh, "model")), c);
  EXPECT_EQ(mt.collectives, 1);
  EXPECT_EQ(mt.comm_bytes, 64 * 256 * 4);  // 2(n-1)/n of the bytes with n = 2
  EXPECT_NEAR(mt.comm_s, 64 * 256 * 4 / c.link_bytes_per_s + 2 * c.latency_s + c.collective_s, 1e-12);
  EXPECT_LT(mt.memory_bytes, rep.memory_bytes);
  EXPECT_NE(mt.str().find("1 collective"), std::string::npos) << mt.str();
}

TEST(DistAutoShard, FewRowsComputeAtTheirOwnRate) {
  // One 256 x 256 matmul (its Relu fuses) at 32, 384 and 107 rows (about midway on a log scale):
  // against one rate for every shape, only the matmul's seconds change.
  Mesh one({{"one", 1}});
  auto compute = [&](int64_t rows, double few_rate) {
    CostParams c;
    c.few_rows_flops_per_s = few_rate;
    return estimate_plan(shard_graph(chain(rows, 256, 1), one, {}), c).compute_s;
  };
  const double flops = CostParams().flops_per_s, few = flops / 4;
  auto extra = [&](int64_t rows, double rate) { return 2.0 * rows * 256 * 256 * (1 / rate - 1 / flops); };
  EXPECT_NEAR(compute(32, few) - compute(32, 0), extra(32, few), 1e-12);
  EXPECT_NEAR(compute(16, few) - compute(16, 0), extra(16, few), 1e-12);  // fewer rows: the few-rows rate still
  EXPECT_NEAR(compute(384, few), compute(384, 0), 1e-12);
  double t = std::log(107.0 / 32) / std::log(384.0 / 32);
  EXPECT_NEAR(compute(107, few) - compute(107, 0), extra(107, few + t * (flops - few)), 1e-12);
}

TEST(DistAutoShard, LargeCollectivesMoveAtTheirOwnRate) {
  // The one all-reduce of the Megatron plan is 64 KB: under large_message_bytes the link rate, over it the large rate.
  Graph g = chain(64, 256, 2);
  Mesh mesh({{"model", 2}});
  ShardedGraph sg = shard_graph(g, mesh, megatron_specs(g, mesh, "model"));
  CostParams c;
  c.large_link_bytes_per_s = c.link_bytes_per_s / 10;
  c.large_message_bytes = 64 * 256 * 4;  // the result's bytes, not more: the link rate
  double fixed = 2 * c.latency_s + c.collective_s;
  EXPECT_NEAR(estimate_plan(sg, c).comm_s, 64 * 256 * 4 / c.link_bytes_per_s + fixed, 1e-12);
  c.large_message_bytes = 64 * 256 * 4 - 1;
  EXPECT_NEAR(estimate_plan(sg, c).comm_s, 64 * 256 * 4 / c.large_link_bytes_per_s + fixed, 1e-12);
  c.large_link_bytes_per_s = 0;  // no large rate: one rate for all
  EXPECT_NEAR(estimate_plan(sg, c).comm_s, 64 * 256 * 4 / c.link_bytes_per_s + fixed, 1e-12);
}

TEST(DistAutoShard, WithoutALimitDataParallelInferenceNeedsNoCommunication) {
  Graph g = chain(64, 1024, 4);
  AutoShardResult r = auto_shard(g, Mesh({{"data", 2}, {"model", 2}}));
  EXPECT_TRUE(r.exhaustive);
  EXPECT_EQ(r.specs.at("x"), "S(data,model) R") << r.report();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.specs.at("w" + std::to_string(i)), "R R") << r.report();
  // The output is gathered at the end (over each axis): the only collectives.
  EXPECT_EQ(r.estimate.collectives, 2) << r.report();
  for (const OpNode* op : r.sharded.graph.op_nodes())
    if (is_collective(op->op->name)) EXPECT_EQ(op->op->name, "kiln.AllGather") << r.report();
  ASSERT_NE(baseline(r, "data"), nullptr);
  EXPECT_LE(r.estimate.total_s(), baseline(r, "data")->total_s());
}

TEST(DistAutoShard, AMemoryLimitDataParallelCannotMeetSplitsTheWeights) {
  Graph g = chain(64, 1024, 4);  // 16 MB of weights
  Mesh mesh({{"data", 2}, {"model", 2}});
  AutoShardOptions o;
  o.memory_limit = 12 << 20;
  AutoShardResult r = auto_shard(g, mesh, o);
  const PlanEstimate* data = baseline(r, "data");
  ASSERT_NE(data, nullptr);
  EXPECT_GT(data->memory_bytes, o.memory_limit) << "data parallel replicates every weight";
  EXPECT_LE(r.estimate.memory_bytes, o.memory_limit) << r.report(o.memory_limit);
  for (int i = 0; i < 4; ++i) EXPECT_NE(r.specs.at("w" + std::to_string(i)), "R R") << r.report(o.memory_limit);
  EXPECT_GE(r.estimate.collectives, 1);
  std::string rep = r.report(o.memory_limit);
  EXPECT_NE(rep.find("# data: "), std::string::npos) << rep;
  EXPECT_NE(rep.find("over the limit"), std::string::npos) << rep;
}

TEST(DistAutoShard, ALimitNoPlanMeetsSaysTheLeastMemory) {
  Graph g = chain(64, 1024, 4);
  AutoShardOptions o;
  o.memory_limit = 1 << 20;
  try {
    auto_shard(g, Mesh({{"data", 2}, {"model", 2}}), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("fits the memory limit of 1.05 MB"), std::string::npos) << m;
    EXPECT_NE(m.find("the least any plan needs is"), std::string::npos) << m;
  }
  AutoShardOptions bad;
  bad.cost.link_bytes_per_s = 0;
  EXPECT_THROW(auto_shard(g, Mesh({{"data", 2}}), bad), Error);
}

TEST(DistAutoShard, LargeSearchesDescendFromTheNamedStrategies) {
  Graph g = chain(64, 512, 6);  // 5^6 x 4 combinations: over max_plans
  AutoShardOptions o;
  o.max_plans = 256;
  o.memory_limit = 4 << 20;     // 6 MB of weights: data parallel does not fit
  AutoShardResult r = auto_shard(g, Mesh({{"data", 2}, {"model", 2}}), o);
  EXPECT_FALSE(r.exhaustive);
  EXPECT_LE(r.estimate.memory_bytes, o.memory_limit) << r.report(o.memory_limit);
  EXPECT_LT(r.plans_evaluated, 5 * 5 * 5 * 5 * 5 * 5 * 4);
}

TEST(DistAutoShard, EachMeshAxisMovesAtItsOwnLink) {
  // The Megatron plan's one all-reduce runs over "model": its level's rate and latency, not the default's.
  Graph g = chain(64, 256, 2);
  Mesh mesh({{"data", 1}, {"model", 2}});
  ShardedGraph sg = shard_graph(g, mesh, megatron_specs(g, mesh, "model"));
  CostParams c;
  c.axis_links["model"] = {c.link_bytes_per_s * 100, 1e-6};
  EXPECT_NEAR(estimate_plan(sg, c).comm_s, 64 * 256 * 4 / (c.link_bytes_per_s * 100) + 2 * 1e-6 + c.collective_s, 1e-12);
  c.axis_links.clear();
  c.axis_links["data"] = {1.0, 1.0};  // another axis's link changes nothing here
  EXPECT_NEAR(estimate_plan(sg, c).comm_s, 64 * 256 * 4 / c.link_bytes_per_s + 2 * c.latency_s + c.collective_s, 1e-12);
}

TEST(DistAutoShard, RepeatedLayersShareOneDecision) {
  // 8 layers of one pattern (w0..w7): tied, the search has 2 choices (the weights' and x's), not 9,
  // and every weight takes the same spec (each pass scores every option of every choice once).
  Graph g = chain(64, 256, 8);
  AutoShardOptions o;
  o.tie_repeated = true;
  o.max_plans = 1;  // coordinate descent: its evaluations count the choices' options
  AutoShardResult tied = auto_shard(g, Mesh({{"model", 2}}), o);
  o.tie_repeated = false;
  AutoShardResult each = auto_shard(g, Mesh({{"model", 2}}), o);
  EXPECT_LT(2 * tied.plans_evaluated, each.plans_evaluated) << tied.report() << each.report();
  for (int i = 1; i < 8; ++i) EXPECT_EQ(tied.specs.at("w" + std::to_string(i)), tied.specs.at("w0")) << tied.report();
}

TEST(DistAutoShard, EachCollectiveWaitsForDescheduledPeers) {
  // Ranks sharing cores: every collective adds peer_wait_s, compute does not change.
  Graph g = chain(64, 256, 2);
  Mesh mesh({{"model", 2}});
  ShardedGraph sg = shard_graph(g, mesh, megatron_specs(g, mesh, "model"));
  CostParams c;
  PlanEstimate own = estimate_plan(sg, c);
  c.peer_wait_s = 3e-3;
  PlanEstimate shared = estimate_plan(sg, c);
  ASSERT_GE(own.collectives, 1);
  EXPECT_NEAR(shared.comm_s - own.comm_s, own.collectives * 3e-3, 1e-12);
  EXPECT_EQ(shared.compute_s, own.compute_s);
}
