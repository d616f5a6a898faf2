// The hand-written GEMM schedule (ops/src/cpu_gemm.cpp, cpu_gemv.cpp) for
// AVX2 and AVX-512 targets: its form, blocks and parallel axis follow the
// shape, its register tile fits the target's register file (no vector spill
// in the kernel's assembly), and the kernel, run where the host can execute
// the target's code, matches a naive double-precision loop.
#include <gtest/gtest.h>

#include "kiln/ops/cpu_gemm.h"
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

using ops::GemmTiling;
using testing::ref::Vec;

class CpuGemmTarget : public ::testing::TestWithParam<std::string> {
 protected:
  Target target() const { return Target::parse(GetParam()); }
};

// The default tile: two vectors wide, as many rows as the registers hold, and not one more.
TEST_P(CpuGemmTarget, DefaultTileFillsTheRegisterFile) {
  Target t = target();
  const int lanes = t.natural_lanes(DataType::Float(32)), regs = t.num_vector_registers();
  GemmTiling g = ops::default_gemm_tiling(t);
  EXPECT_EQ(g.NR, 2 * lanes);
  EXPECT_LE(ops::tile_registers(g.MR, 2), regs);
  EXPECT_GT(ops::tile_registers(g.MR + 1, 2), regs);
  // Resolved for a shape: NR divides N and MR divides M where a tile that fits allows it.
  GemmTiling r = ops::resolve_gemm_tiling({}, t, 1024, 1024);
  EXPECT_EQ(1024 % r.NR, 0);
  EXPECT_EQ(1024 % r.MR, 0);
  EXPECT_LE(ops::tile_registers(r.MR, r.NR / lanes), regs);
  // Given sizes are kept.
  GemmTiling fixed = ops::resolve_gemm_tiling(GemmTiling{3, 40, 2, false, false}, t, 1024, 1024);
  EXPECT_EQ(fixed.MR, 3);
  EXPECT_EQ(fixed.NR, 40);
  EXPECT_EQ(fixed.KU, 2);
}

// The form and blocks by shape: a GEMV for one row; K blocks only where a
// K x NR panel of B outgrows the cache, dividing K, with the slice in it;
// rows split over the cores when A is the larger operand, columns when it
// is the smaller (BERT's 128 x 768 x 3072: one row block).
TEST_P(CpuGemmTarget, FormAndBlocksFollowTheShape) {
  Target t = target();
  const int lanes = t.natural_lanes(DataType::Float(32));
  EXPECT_EQ(ops::gemm_form(1, 4096, ops::resolve_gemm_tiling({}, t, 1, 4096)), ops::GemmForm::Gemv);
  EXPECT_EQ(ops::gemm_form(1024, 1024, ops::resolve_gemm_tiling({}, t, 1024, 1024)), ops::GemmForm::Packed);
  EXPECT_EQ(ops::gemm_form(127, 769, ops::resolve_gemm_tiling({}, t, 127, 769)), ops::GemmForm::Streaming);

  GemmTiling bert = ops::cpu_matmul(128, 768, 3072, t).tiling;
  EXPECT_EQ(bert.NR % lanes, 0);
  EXPECT_EQ(bert.MC, 128) << "one row block: the threads split the panels";
  ASSERT_GT(bert.KC, 0) << "a 3072 x " << bert.NR << " panel is " << 3072 * bert.NR * 4 / 1024 << " KiB";
  EXPECT_EQ(3072 % bert.KC, 0);
  EXPECT_EQ(bert.KC % bert.KU, 0);
  EXPECT_LE(bert.KC * bert.NR * 4, 256 << 10);

  GemmTiling square = ops::cpu_matmul(1024, 1024, 1024, t).tiling;
  EXPECT_EQ(square.KC, 0) << "a 1024 x " << square.NR << " panel fits";
  EXPECT_EQ(square.MC, 512) << "two cores: a row block each";
  GemmTiling serial;
  serial.parallel = false;
  EXPECT_EQ(ops::cpu_matmul(1024, 1024, 1024, serial, t).tiling.MC, 1024);
  GemmTiling tall = ops::cpu_matmul(4096, 64, 8192, t).tiling;
  EXPECT_GT(tall.KC, 0);
  EXPECT_LT(tall.MC, 4096);
}

#ifdef KILN_WITH_LLVM
std::string gemm_assembly(const ops::CpuGemm& g, const Target& t) { return codegen::emit_assembly({te::lower(g.schedule, {g.A, g.B, g.C}, "gemm")}, t); }

// The packed form (square; BERT's MLP shape, whose NR is three vectors on
// AVX-512, K-blocked), the streaming form (few rows) and the GEMV keep
// their tiles in registers.
TEST_P(CpuGemmTarget, NoVectorSpills) {
  Target t = target();
  for (auto [M, N, K] : {std::tuple{1024, 1024, 1024}, std::tuple{96, 768, 256}, std::tuple{128, 768, 3072}, std::tuple{4, 512, 512}, std::tuple{1, 4096, 4096}}) {
    ops::CpuGemm g = ops::cpu_matmul(M, N, K, t);
    testing::SpillCount c = testing::count_vector_spills(gemm_assembly(g, t), t.vector_bits / 8);
    EXPECT_EQ(c.total(), 0) << M << "x" << N << "x" << K << " with MR=" << g.tiling.MR << " NR=" << g.tiling.NR << ": " << c.spills << " spills, " << c.reloads
                            << " reloads, first: " << c.first;
  }
}

// The check can fail: a tile of twice the register file spills on every target.
TEST_P(CpuGemmTarget, OversizedTileSpills) {
  Target t = target();
  const int lanes = t.natural_lanes(DataType::Float(32));
  GemmTiling big{t.num_vector_registers() / 2, 4 * lanes, 4, false, true};
  ops::CpuGemm g = ops::cpu_matmul(256, 256, 256, big, t);
  EXPECT_GT(testing::count_vector_spills(gemm_assembly(g, t), t.vector_bits / 8).total(), 0);
}

Vec run_gemm(const ops::CpuGemm& g, const Target& t, int M, int N, int K, const Vec& a, const Vec& b) {
  Module mod = build(g.schedule, {g.A, g.B, g.C}, t, "gemm");
  Vec A = a, B = b, C(size_t(M) * N, -7.f);
  NDArray na = NDArray::wrap(A.data(), {M, K}, DataType::Float(32)), nb = NDArray::wrap(B.data(), {K, N}, DataType::Float(32)),
          nc = NDArray::wrap(C.data(), {M, N}, DataType::Float(32));
  mod.call("gemm", {na, nb, nc});
  return C;
}

// Packed with and without a tail block, with and without K blocks, one row
// block and row blocks with a tail, serial and parallel; the streaming
// form (N no multiple of a vector); the GEMV, with odd N and K.
TEST_P(CpuGemmTarget, MatchesNaiveLoop) {
  Target t = target();
  if (!testing::host_can_run(t)) GTEST_SKIP() << "this host cannot run code for " << t.str() << " (compiled and spill-checked above)";
  struct Shape {
    int M, N, K;
    bool parallel;
    int KC = -1, MC = 0, MR = 0;
  };
  const int lanes = t.natural_lanes(DataType::Float(32));
  for (Shape s : {Shape{64, 96, 40, true}, Shape{100, 64, 33, true}, Shape{50, 48, 17, false}, Shape{3, 80, 64, true}, Shape{64, 96, 512, true, 64},
                  Shape{100, 2 * lanes, 128, true, 64, 24, 6}, Shape{27, 2 * lanes, 96, false, 48},
                  Shape{100, 2 * lanes, 40, true, 0, 0, 6},
                  Shape{128, 768, 3072, true}, Shape{127, 769, 3071, true}, Shape{1, 4095, 4097, true}, Shape{1, 4096, 4096, false}, Shape{1, 17, 5, true}}) {
    GemmTiling tiling;
    tiling.parallel = s.parallel;
    tiling.KC = s.KC;
    tiling.MC = s.MC;
    tiling.MR = s.MR;
    ops::CpuGemm g = ops::cpu_matmul(s.M, s.N, s.K, tiling, t);
    Vec a = testing::random_vector(size_t(s.M) * s.K, 1), b = testing::random_vector(size_t(s.K) * s.N, 2);
    EXPECT_TRUE(testing::all_close(run_gemm(g, t, s.M, s.N, s.K, a, b), testing::ref::matmul(a, b, s.M, s.N, s.K), 1e-4f))
        << s.M << "x" << s.N << "x" << s.K << " MR=" << g.tiling.MR << " NR=" << g.tiling.NR << " KC=" << g.tiling.KC << " MC=" << g.tiling.MC;
  }
}
#endif  // KILN_WITH_LLVM

INSTANTIATE_TEST_SUITE_P(Targets, CpuGemmTarget, ::testing::ValuesIn(testing::cpu_targets()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return testing::target_test_name(info.param); });

TEST(CpuGemm, RejectsBadSizes) {
  EXPECT_TRUE(testing::throws_with([] { ops::cpu_matmul(0, 4, 4); }, "sizes must be positive"));
  EXPECT_TRUE(testing::throws_with([] { ops::cpu_matmul(4, 4, 4, GemmTiling{-1, 0, 4, true, true}); }, "MR and NR must be positive"));
  EXPECT_TRUE(testing::throws_with([] { ops::cpu_matmul(4, 4, 4, Target::parse("cuda -arch=sm_90")); }, "need a CPU target"));
  GemmTiling bad_kc;
  bad_kc.KC = 100;
  EXPECT_TRUE(testing::throws_with([&] { ops::cpu_matmul(64, 64, 256, bad_kc, Target::parse("llvm -mcpu=haswell")); }, "must divide K"));
}

}  // namespace
}  // namespace kiln
