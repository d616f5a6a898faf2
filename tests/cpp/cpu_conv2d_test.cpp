// The hand-written conv2d schedules (ops/src/cpu_conv2d.cpp) for AVX2 and
// AVX-512 targets: each form (blocked NCHWc with NCHW or blocked output, the
// pointwise GEMM) compiled through kiln::build for the target, its weight
// packing kernel run first, and the result compared with a naive
// double-precision loop (reference_ops.h) where the host can run the
// target's code; the default tiles of ResNet layers do not spill.
#include <gtest/gtest.h>

#include "kiln/interp/interpreter.h"
#include "kiln/ops/cpu_conv2d.h"
#include "kiln/ops/nn.h"
#include "kiln/te/lower.h"
#include "reference_ops.h"
#include "target_params.h"
#include "test_util.h"
#ifdef KILN_WITH_LLVM
#include "kiln/codegen/llvm.h"
#include "kiln/driver/build.h"
#endif

namespace kiln {
namespace {

using ops::Conv2dShape;
using ops::Conv2dTiling;
using testing::ref::Vec;

int64_t numel(const te::Tensor& t) {
  int64_t n = 1;
  for (const Expr& e : t.shape()) n *= *as_const_int(e);
  return n;
}

// kiln's output in NCHW whatever layout the kernel wrote.
Vec to_nchw(const Vec& y, const ops::CpuConv2d& cv) {
  const Conv2dShape& s = cv.shape;
  if (cv.tiling.nchw_out) return y;
  const int KB = cv.tiling.KB, OH = s.OH(), OW = s.OW();
  Vec out(y.size());
  for (int n = 0; n < s.N; ++n)
    for (int k = 0; k < s.K; ++k)
      for (int i = 0; i < OH * OW; ++i) out[(int64_t(n) * s.K + k) * OH * OW + i] = y[((int64_t(n) * (s.K / KB) + k / KB) * OH * OW + i) * KB + k % KB];
  return out;
}

Vec reference(const Vec& x, const Vec& w, const Conv2dShape& s) {
  testing::ref::ConvShape r{s.N, s.C, s.H, s.W, s.K, s.KH, s.KW, s.stride, s.pad, 1};
  return testing::ref::conv2d(x, w, r);
}

#ifdef KILN_WITH_LLVM
// Packs the weights with the weight kernel, runs the conv kernel, returns NCHW.
Vec run_compiled(const ops::CpuConv2d& cv, const Target& target, Vec x, Vec w) {
  auto shape_of = [](const te::Tensor& t) {
    std::vector<int64_t> v;
    for (const Expr& e : t.shape()) v.push_back(*as_const_int(e));
    return v;
  };
  Module wmod = build(cv.weight_schedule, {cv.W, cv.packed_W_out}, target, "pack_weights");
  Module mod = build(cv.schedule, {cv.X, cv.packed_W, cv.Y}, target, "conv2d");
  Vec pw(numel(cv.packed_W)), y(numel(cv.Y), -7.f);
  NDArray W = NDArray::wrap(w.data(), shape_of(cv.W), DataType::Float(32)), PW = NDArray::wrap(pw.data(), shape_of(cv.packed_W), DataType::Float(32));
  NDArray X = NDArray::wrap(x.data(), shape_of(cv.X), DataType::Float(32)), Y = NDArray::wrap(y.data(), shape_of(cv.Y), DataType::Float(32));
  wmod.call("pack_weights", {W, PW});
  mod.call("conv2d", {X, PW, Y});
  return to_nchw(y, cv);
}

struct Case {
  const char* name;
  Conv2dShape shape;
  Conv2dTiling tiling;
};

Conv2dShape conv_shape(int n, int c, int h, int w, int k, int r, int stride, int pad) {
  Conv2dShape s;
  s.N = n, s.C = c, s.H = h, s.W = w, s.K = k, s.KH = s.KW = r, s.stride = stride, s.pad = pad;
  return s;
}

Conv2dTiling tiling_with(void (*edit)(Conv2dTiling&)) {
  Conv2dTiling t;
  edit(t);
  return t;
}

class CpuConv2dCompiled : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(CpuConv2dCompiled, MatchesNaiveLoop) {
  Target target = Target::parse(std::get<0>(GetParam()));
  const Case& c = std::get<1>(GetParam());
  ops::CpuConv2d cv = ops::cpu_conv2d(c.shape, c.tiling, target);
  if (!testing::host_can_run(target)) GTEST_SKIP() << "this host cannot run code for " << target.str() << " (CpuConv2dTarget checks that it compiles)";
  const Conv2dShape& s = c.shape;
  Vec x = testing::random_vector(size_t(s.N) * s.C * s.H * s.W, 1), w = testing::random_vector(size_t(s.K) * s.C * s.KH * s.KW, 2);
  Vec got = run_compiled(cv, target, x, w);
  EXPECT_TRUE(testing::all_close(got, reference(x, w, s), 1e-4f)) << c.name << " CB=" << cv.tiling.CB << " KB=" << cv.tiling.KB << " OWB=" << cv.tiling.OWB;
}

INSTANTIATE_TEST_SUITE_P(
    Forms, CpuConv2dCompiled,
    ::testing::Combine(::testing::ValuesIn(testing::cpu_targets()), ::testing::Values(
        Case{"resnet_like_3x3_nchw", conv_shape(1, 32, 14, 14, 64, 3, 1, 1), {}},
        Case{"3x3_blocked_out", conv_shape(1, 32, 14, 14, 64, 3, 1, 1), tiling_with([](Conv2dTiling& t) { t.nchw_out = false; })},
        Case{"3x3_serial", conv_shape(1, 16, 12, 12, 32, 3, 1, 1), tiling_with([](Conv2dTiling& t) { t.parallel = false; })},
        Case{"3x3_stride2", conv_shape(1, 16, 15, 15, 32, 3, 2, 1), {}},
        Case{"batch2_rect_two_rows", conv_shape(2, 16, 10, 12, 32, 3, 1, 1), tiling_with([](Conv2dTiling& t) { t.OHB = 2; })},
        Case{"5x5_pad2_kb16", conv_shape(1, 16, 9, 9, 48, 5, 1, 2), tiling_with([](Conv2dTiling& t) { t.KB = 16; })},
        Case{"prime_width", conv_shape(1, 16, 5, 17, 32, 3, 1, 1), {}},
        Case{"tile_tail", conv_shape(1, 16, 6, 12, 32, 3, 1, 1), tiling_with([](Conv2dTiling& t) { t.OWB = 5; t.OHB = 4; })},
        Case{"pointwise_gemm", conv_shape(2, 32, 8, 8, 64, 1, 1, 0), {}},
        Case{"pointwise_blocked", conv_shape(1, 32, 8, 8, 64, 1, 1, 0), tiling_with([](Conv2dTiling& t) { t.pointwise_as_gemm = false; })},
        Case{"pointwise_blocked_out", conv_shape(1, 32, 8, 8, 64, 1, 1, 0), tiling_with([](Conv2dTiling& t) { t.nchw_out = false; })},
        Case{"1x1_stride2", conv_shape(1, 16, 8, 8, 32, 1, 2, 0), {}},
        Case{"3_input_channels", conv_shape(1, 3, 9, 9, 32, 3, 1, 1), {}})),
    [](const ::testing::TestParamInfo<std::tuple<std::string, Case>>& info) {
      return testing::target_test_name(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
    });

class CpuConv2dTarget : public ::testing::TestWithParam<std::string> {
 protected:
  Target target() const { return Target::parse(GetParam()); }
};

// The default tile on ResNet layers: within the register file, KB one or
// two vectors, CB one vector; and the kernel's assembly has no vector
// spill. Blocked output: the NCHW output's transposing copy-out (once per
// tile, after the whole reduction) is left out of the count.
TEST_P(CpuConv2dTarget, DefaultTilesFitTheRegistersAndDoNotSpill) {
  Target t = target();
  const int lanes = t.natural_lanes(DataType::Float(32)), regs = t.num_vector_registers();
  for (const Conv2dShape& s : {conv_shape(1, 64, 56, 56, 64, 3, 1, 1), conv_shape(1, 256, 14, 14, 256, 3, 1, 1), conv_shape(1, 64, 56, 56, 256, 1, 1, 0)}) {
    Conv2dTiling blocked_out;
    blocked_out.nchw_out = s.KH == 1;  // the 1x1 layer in its GEMM form, which writes NCHW directly
    ops::CpuConv2d cv = ops::cpu_conv2d(s, blocked_out, t);
    const Conv2dTiling& g = cv.tiling;
    SCOPED_TRACE(std::to_string(s.C) + "x" + std::to_string(s.K) + " " + std::to_string(s.KH) + "x" + std::to_string(s.KW) + " on " + std::to_string(s.H) + "x" +
                 std::to_string(s.W) + ": CB=" + std::to_string(g.CB) + " KB=" + std::to_string(g.KB) + " OWB=" + std::to_string(g.OWB) + " MR=" + std::to_string(g.MR) +
                 " NR=" + std::to_string(g.NR));
    if (cv.pointwise) {
      EXPECT_LE(ops::tile_registers(g.MR, g.NR / lanes), regs);
    } else {
      EXPECT_EQ(g.CB, lanes);
      EXPECT_TRUE(g.KB == lanes || g.KB == 2 * lanes);
      EXPECT_LE(ops::tile_registers(g.OHB * g.OWB, g.KB / lanes), regs);
      EXPECT_EQ(s.OW() % g.OWB, 0);
    }
    std::string assembly = codegen::emit_assembly({te::lower(cv.schedule, {cv.X, cv.packed_W, cv.Y}, "conv2d")}, t);
    testing::SpillCount c = testing::count_vector_spills(assembly, t.vector_bits / 8);
    EXPECT_EQ(c.total(), 0) << c.spills << " spills, " << c.reloads << " reloads, first: " << c.first;
  }
}

// The check can fail: a tile of 28 pixels x two vectors overflows even 32 registers.
TEST_P(CpuConv2dTarget, OversizedTileSpills) {
  Target t = target();
  Conv2dTiling big;
  big.OWB = 14, big.OHB = 2, big.KB = 2 * t.natural_lanes(DataType::Float(32));
  ops::CpuConv2d cv = ops::cpu_conv2d(conv_shape(1, 64, 28, 28, 64, 3, 1, 1), big, t);
  EXPECT_GT(testing::count_vector_spills(codegen::emit_assembly({te::lower(cv.schedule, {cv.X, cv.packed_W, cv.Y}, "conv2d")}, t), t.vector_bits / 8).total(), 0);
}

INSTANTIATE_TEST_SUITE_P(Targets, CpuConv2dTarget, ::testing::ValuesIn(testing::cpu_targets()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return testing::target_test_name(info.param); });

// Channel blocks follow the target's lanes: one vector of inputs, two of outputs.
TEST(CpuConv2d, NchwcBlocksFollowTheTarget) {
  for (const std::string& s : testing::cpu_targets()) {
    Target t = Target::parse(s);
    const int lanes = t.natural_lanes(DataType::Float(32));
    ops::NchwcBlocks b = ops::nchwc_blocks(64, 256, t);
    EXPECT_EQ(b.cb, lanes) << s;
    EXPECT_EQ(b.kb, 2 * lanes) << s;
    EXPECT_EQ(ops::nchwc_blocks(3, 24, t).cb, 3) << s;
    EXPECT_EQ(ops::nchwc_blocks(3, 24, t).kb, lanes == 8 ? 12 : 24) << s;
  }
}

TEST(CpuConv2d, PointwiseTakesTheGemmFormOnlyWhenItFits) {
  Conv2dTiling t;
  EXPECT_TRUE(ops::cpu_conv2d(conv_shape(1, 64, 56, 56, 256, 1, 1, 0), t).pointwise);
  EXPECT_FALSE(ops::cpu_conv2d(conv_shape(1, 64, 7, 7, 256, 1, 1, 0), t).pointwise);  // 49 pixels: no tile of whole vectors
  EXPECT_FALSE(ops::cpu_conv2d(conv_shape(1, 64, 56, 56, 64, 3, 1, 1), t).pointwise);
  t.nchw_out = false;
  EXPECT_FALSE(ops::cpu_conv2d(conv_shape(1, 64, 56, 56, 256, 1, 1, 0), t).pointwise);
}
#endif  // KILN_WITH_LLVM

// The same schedule through the reference interpreter, so the lowering of the
// schedule is checked on builds without the LLVM backend too.
TEST(CpuConv2d, InterpretedScheduleMatchesNaiveLoop) {
  Conv2dShape s;
  s.C = 16, s.K = 32, s.H = s.W = 6;
  ops::CpuConv2d cv = ops::cpu_conv2d(s, Conv2dTiling{});
  Vec x = testing::random_vector(size_t(s.C) * s.H * s.W, 3), w = testing::random_vector(size_t(s.K) * s.C * 9, 4);
  Vec pw(numel(cv.packed_W)), y(numel(cv.Y));
  interpret(te::lower(cv.weight_schedule, {cv.W, cv.packed_W_out}, "pack_weights"), {w.data(), pw.data()});
  interpret(te::lower(cv.schedule, {cv.X, cv.packed_W, cv.Y}, "conv2d"), {x.data(), pw.data(), y.data()});
  EXPECT_TRUE(testing::all_close(to_nchw(y, cv), reference(x, w, s), 1e-4f));
}

TEST(CpuConv2d, TileWidthDividesTheOutputWidth) {
  EXPECT_EQ(ops::pick_conv_tile_width(56, 14), 14);
  EXPECT_EQ(ops::pick_conv_tile_width(14, 14), 14);
  EXPECT_EQ(ops::pick_conv_tile_width(7, 14), 7);
  EXPECT_EQ(ops::pick_conv_tile_width(112, 14), 14);
  EXPECT_EQ(ops::pick_conv_tile_width(24, 14), 12);
  EXPECT_EQ(ops::pick_conv_tile_width(56, 6), 4);
  EXPECT_EQ(ops::pick_conv_tile_width(17, 14), 1);
}

TEST(CpuConv2d, RejectsChannelsThatDoNotFillABlock) {
  Conv2dShape s;
  Conv2dTiling t;
  t.CB = 16, t.KB = 32;
  s.C = 24;
  EXPECT_TRUE(testing::throws_with([&] { ops::cpu_conv2d(s, t); }, "multiple of the channel block CB = 16"));
  s.C = 64, s.K = 48;
  EXPECT_TRUE(testing::throws_with([&] { ops::cpu_conv2d(s, t); }, "multiple of the output channel block KB = 32"));
  s.K = 64, s.KH = s.KW = 61;
  EXPECT_TRUE(testing::throws_with([&] { ops::cpu_conv2d(s, Conv2dTiling{}); }, "larger than the padded"));
  EXPECT_TRUE(testing::throws_with([&] { ops::cpu_conv2d(s, Target::parse("cuda -arch=sm_90")); }, "need a CPU target"));
}

}  // namespace
}  // namespace kiln
