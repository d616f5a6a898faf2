// The grouped conv's hand schedule (ops/src/cpu_grouped_conv.cpp) on AVX2
// and AVX-512 targets: which tasks it takes (a blocked conv reducing over
// part of its input's channels; not a dense or depthwise conv, nor a
// symbolic batch), the register tiles it picks for ResNeXt's and RegNet's
// shapes, and that those tiles' kernels keep their accumulators in
// registers (no vector spill in the assembly). Results against PyTorch:
// tests/python/test_grouped_conv_schedule.py.
#include <gtest/gtest.h>

#include "kiln/codegen/target.h"
#include "kiln/ir/op.h"
#include "kiln/ops/cpu_grouped_conv.h"
#include "kiln/ops/default_schedule.h"
#include "kiln/ops/layout.h"
#include "kiln/ops/register_tile.h"
#include "kiln/te/lower.h"
#include "target_params.h"
#ifdef KILN_WITH_LLVM
#include "kiln/codegen/llvm.h"
#endif

namespace kiln {
namespace {

Expr dim(int64_t v) { return Expr(static_cast<int>(v)); }

struct GroupedCase {
  int64_t channels, per_group, block, hw, stride;
};

// A blocked 3x3 grouped conv + bias + ReLU as the graph's layout pass builds
// it: blocks of `block` channels inside a group (R input blocks each) or
// spanning whole groups (one block, block-diagonal weights).
struct GroupedConv {
  te::Tensor X, W, B, Y, conv;
};

GroupedConv grouped_conv(const GroupedCase& c, Expr batch = dim(1), bool bias = true) {
  const int64_t b = c.block, blocks = c.channels / b, R = c.per_group % b == 0 ? c.per_group / b : 1;
  GroupedConv g;
  g.X = te::placeholder({batch, dim(blocks), dim(c.hw), dim(c.hw), dim(b)}, DataType::Float(32), "X");
  g.W = te::placeholder({dim(blocks), dim(R), dim(3), dim(3), dim(b), dim(b)}, DataType::Float(32), "W");
  g.B = te::placeholder({dim(blocks), dim(b)}, DataType::Float(32), "B");
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = static_cast<int>(c.stride);
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
  g.conv = ops::conv2d_nchwc_general(g.X, g.W, p, "conv", R);
  g.Y = te::compute(g.conv.shape(), [&](const std::vector<Var>& i) {
    Expr y = g.conv(std::vector<Expr>{i[0], i[1], i[2], i[3], i[4]});
    return max(bias ? y + g.B(std::vector<Expr>{i[1], i[4]}) : y, make_zero(DataType::Float(32)));
  }, "Y", {"n", "ko", "y", "x", "ki"});
  return g;
}

class GroupedConvTargets : public ::testing::TestWithParam<std::string> {};

TEST_P(GroupedConvTargets, TakesResNeXtConvsAndTheirTilesDoNotSpill) {
  const Target t = Target::parse(GetParam());
  const int lanes = ops::register_budget(t).lanes, registers = ops::register_budget(t).registers;
  // ResNeXt-50's grouped convs (32 groups) in the blocks the layout pass gives them, and RegNet-like ones (groups of 8).
  std::vector<GroupedCase> cases = {{128, 4, lanes, 13, 1}, {256, 8, lanes, 27, 2}, {512, 16, 16, 14, 1},
                                    {512, 16, 16, 28, 2}, {1024, 32, 2 * lanes, 14, 2}, {1024, 32, lanes, 7, 1}, {104, 8, 8, 14, 2}};
  for (const GroupedCase& c : cases) {
    SCOPED_TRACE(std::to_string(c.channels) + " channels, " + std::to_string(c.per_group) + " a group, block " + std::to_string(c.block) + ", " +
                 std::to_string(c.hw) + "x" + std::to_string(c.hw) + " stride " + std::to_string(c.stride));
    // ReLU only: a bias's vectors LLVM hoists out of the tile loop and may spill there, once a tile
    // (harmless, and not the accumulators this checks).
    GroupedConv g = grouped_conv(c, dim(1), false);
    ops::Task task = ops::make_task({g.X, g.W, g.Y}, t);
    std::string why;
    ops::GroupedConvTile tile;
    auto sch = ops::grouped_conv_schedule(task, &why, &tile);
    ASSERT_TRUE(sch.has_value()) << why;
    EXPECT_EQ(ops::default_schedule(task).kind, ops::DefaultKind::GroupedConv);
    // The tile fits: accumulators, its weight vectors and a broadcast, one register spare.
    const int64_t oh = (c.hw - 1) / c.stride + 1, vectors = tile.blocks * ((c.block + lanes - 1) / lanes);
    EXPECT_EQ(oh % tile.rows, 0);
    EXPECT_LE(vectors * tile.rows * tile.cols + vectors + 2, registers);  // (two spare of 16)
#ifdef KILN_WITH_LLVM
    std::string assembly = codegen::emit_assembly({te::lower(*sch, task.args, "grouped")}, t);
    testing::SpillCount s = testing::count_vector_spills(assembly, t.vector_bits / 8);
    EXPECT_EQ(s.total(), 0) << s.spills << " spills, " << s.reloads << " reloads, first: " << s.first;
#endif
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, GroupedConvTargets, ::testing::ValuesIn(testing::cpu_targets()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return testing::target_test_name(i.param); });

TEST(GroupedConvTile, FromTheTargetsRegisters) {
  const Target avx512 = Target::parse("llvm -mcpu=skylake-avx512"), avx2 = Target::parse("llvm -mcpu=znver3");
  auto tile = [](const Target& t, int64_t oh, int64_t ow, int vectors, int64_t per_group, int64_t blocks = 32) {
    ops::GroupedConvTile g = ops::grouped_conv_tile(t, oh, ow, vectors, blocks, per_group);
    return std::to_string(g.blocks) + "x" + std::to_string(g.rows) + "x" + std::to_string(g.cols);
  };
  // AVX-512: one vector a block, 2 rows of 14 (28 accumulators of 32); two vectors, a row of 7;
  // two one-vector blocks of a group share the broadcasts.
  EXPECT_EQ(tile(avx512, 14, 14, 1, 1), "1x2x14");
  EXPECT_EQ(tile(avx512, 28, 28, 1, 1), "1x1x28");
  EXPECT_EQ(tile(avx512, 7, 7, 2, 1), "1x1x7");
  EXPECT_EQ(tile(avx512, 7, 7, 1, 2), "2x1x7");
  // RegNet's 7 x 7 blocks of one group each: two blocks a tile (14 accumulators, not 7).
  EXPECT_EQ(tile(avx512, 7, 7, 1, 1, 28), "2x1x7");
  // AVX2: two-vector blocks keep their weights in registers, 2 x 2 pixels (not 1 x 7 with the weights reread).
  EXPECT_EQ(tile(avx2, 14, 14, 2, 1), "1x2x2");
  // A prime width takes a tail tile rather than one pixel a tile: 5 + 5 + 3 (a tail of 1 would run at its latency).
  EXPECT_EQ(tile(avx2, 13, 13, 2, 1), "1x1x5");
}

TEST(GroupedConvSchedule, LeavesOtherConvsToTheRules) {
  const Target t = Target::parse("llvm -mcpu=skylake-avx512");
  std::string why;
  // A dense blocked conv reduces over all its input's channels.
  te::Tensor X = te::placeholder({1, 4, 14, 14, 16}, DataType::Float(32), "X");
  te::Tensor W = te::placeholder({4, 4, 3, 3, 16, 16}, DataType::Float(32), "W");
  ops::Conv2dParams p;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
  te::Tensor Y = ops::conv2d_nchwc_general(X, W, p, "conv");
  EXPECT_FALSE(ops::grouped_conv_schedule(ops::make_task({X, W, Y}, t), &why).has_value());
  EXPECT_NE(why.find("not grouped"), std::string::npos) << why;
  // A symbolic batch: the rules tile it with a remainder.
  GroupedConv g = grouped_conv({512, 16, 16, 14, 1}, Var{"n"});
  EXPECT_FALSE(ops::grouped_conv_schedule(ops::make_task({g.X, g.W, g.B, g.Y}, t), &why).has_value());
  EXPECT_NE(why.find("symbolic"), std::string::npos) << why;
  // Not a CPU target.
  g = grouped_conv({512, 16, 16, 14, 1});
  EXPECT_FALSE(ops::grouped_conv_schedule(ops::make_task({g.X, g.W, g.B, g.Y}, Target::parse("cuda -arch=sm_90")), &why).has_value());
}

}  // namespace
}  // namespace kiln
