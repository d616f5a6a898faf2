// bfloat16 pair dot products (kiln/ops/bf16_pairs.h): pack_bf16x2 rounds
// as numpy's bfloat16 does, dot_bf16x2 is lo*lo + hi*hi, and the pair-packed
// matmul under the tuner's default schedule matches a naive double loop over
// the rounded inputs, in the interpreter and compiled for AVX2 and AVX-512
// targets. Where the target has AVX-512 BF16 the kernel is vdpbf16ps, and
// where it has not, the same kernel is the unpacked float32 form.
#include <gtest/gtest.h>

#include <cstring>
#include <regex>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/op.h"
#include "kiln/ops/bf16_pairs.h"
#include "kiln/ops/broadcast.h"
#include "kiln/te/lower.h"
#include "kiln/tuner/schedule_rules.h"
#include "target_params.h"
#include "test_util.h"
#ifdef KILN_WITH_LLVM
#include "kiln/codegen/llvm.h"
#endif

namespace kiln {
namespace {

// Round to nearest even at bit 16, as numpy's bfloat16 (and Cast) do.
float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// One pair op over scalars through the interpreter: out[0] = f(in[0], in[1]).
template <typename In, typename Out>
Out interpret_pair(Expr (*f)(Expr, Expr), DataType in_t, In a, In b) {
  Buffer in = Buffer::make("in", in_t, {2}), out = Buffer::make("out", f == &dot_bf16x2 ? DataType::Float(32) : DataType::UInt(32), {1});
  Expr x = BufferLoad::make(in, {ops::index_imm(0)}), y = BufferLoad::make(in, {ops::index_imm(1)});
  PrimFunc fn = PrimFunc::make("pair", {Param{in->data, in}, Param{out->data, out}}, BufferStore::make(out, f(x, y), {ops::index_imm(0)}));
  In ins[2] = {a, b};
  Out result{};
  interpret(fn, {ins, &result});
  return result;
}

TEST(Bf16Dot, PackRoundsToNearestEvenAndDotAddsBothHalves) {
  // 1 + 2^-8 lies halfway between bfloat16 1 and 1 + 2^-7: it rounds to even (1).
  float tie = 1.0f + 1.0f / 256, up = 1.0f + 3.0f / 512;
  uint32_t p = interpret_pair<float, uint32_t>(&pack_bf16x2, DataType::Float(32), tie, -2.0f);
  EXPECT_EQ(p, 0x3F80u | (0xC000u << 16));
  EXPECT_EQ((interpret_pair<float, uint32_t>(&pack_bf16x2, DataType::Float(32), up, 0.0f)), 0x3F81u);
  // (1.5, 3) . (-2, 0.25) = -3 + 0.75.
  uint32_t a = 0x3FC0u | (0x4040u << 16), b = 0xC000u | (0x3E80u << 16);
  EXPECT_EQ((interpret_pair<uint32_t, float>(&dot_bf16x2, DataType::UInt(32), a, b)), -2.25f);
  EXPECT_TRUE(testing::throws_with([] { dot_bf16x2(make_const(DataType::Float(32), 1.0), make_const(DataType::Float(32), 2.0)); }, "two uint32 values"));
}

struct PairCase {
  te::Tensor A, B, C;
  int64_t M, K, N, batch;
  bool ta, tb;
};

// C = A' B' with A' = A or A^T (likewise B'), A batched when batch > 1.
PairCase pair_case(int64_t M, int64_t K, int64_t N, bool ta, bool tb, int64_t batch = 1) {
  PairCase c{{}, {}, {}, M, K, N, batch, ta, tb};
  std::vector<int64_t> as = ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K};
  if (batch > 1) as.insert(as.begin(), batch);
  c.A = te::placeholder(ops::shape_exprs(as), DataType::Float(32), "A");
  c.B = te::placeholder(ops::shape_exprs(tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}), DataType::Float(32), "B");
  te::Tensor A2 = ops::pack_bf16_pairs(c.A, ta ? 0 : -1, "A2"), B2 = ops::pack_bf16_pairs(c.B, tb ? 1 : 0, "B2");
  c.C = ops::matmul_bf16_pairs(A2, B2, ta, tb);
  return c;
}

std::vector<float> reference(const PairCase& c, const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out(c.batch * c.M * c.N);
  for (int64_t p = 0; p < c.batch; ++p)
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          float x = a[p * c.M * c.K + (c.ta ? k * c.M + i : i * c.K + k)], y = b[c.tb ? j * c.K + k : k * c.N + j];
          s += static_cast<double>(round_bf16(x)) * round_bf16(y);
        }
        out[(p * c.M + i) * c.N + j] = static_cast<float>(s);
      }
  return out;
}

class Bf16DotTarget : public ::testing::TestWithParam<std::string> {};

TEST_P(Bf16DotTarget, DefaultScheduleComputesThePairMatmul) {
  Target t = Target::parse(GetParam());
  const PairCase cases[] = {pair_case(12, 64, 48, false, false), pair_case(7, 37, 33, false, false), pair_case(10, 40, 32, true, false),
                            pair_case(9, 38, 32, false, true), pair_case(8, 30, 32, true, true), pair_case(6, 32, 32, false, false, 3), pair_case(5, 20, 24, false, false)};
  for (const PairCase& c : cases) {
    SCOPED_TRACE("M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) + " transA=" + std::to_string(c.ta) +
                 " transB=" + std::to_string(c.tb) + " batch=" + std::to_string(c.batch));
    tuner::Task task = tuner::make_task({c.A, c.B, c.C}, t, "bf16_pairs");
    tuner::SearchSpace space(task);
    tuner::Candidate cand = space.default_candidate();
    PrimFunc f = te::lower(space.materialize(&cand), {c.A, c.B, c.C}, "bf16_pairs");
    std::vector<float> a = testing::random_vector(c.batch * c.M * c.K, 1, -2.f, 2.f), b = testing::random_vector(c.K * c.N, 2, -2.f, 2.f);
    std::vector<float> want = reference(c, a, b), out(want.size(), 0.f);
    interpret(f, {a.data(), b.data(), out.data()});
    EXPECT_TRUE(testing::all_close(out, want, 1e-5f)) << "interpreter";
#ifdef KILN_WITH_LLVM
    std::string assembly = codegen::emit_assembly({f}, t);
    EXPECT_EQ(assembly.find("vdpbf16ps") != std::string::npos, t.has_feature("avx512bf16")) << space.describe_candidate(cand);
    if (!testing::host_can_run(t)) continue;
    codegen::JitModule jit = codegen::jit_compile({f}, t);
    std::vector<float> compiled(want.size(), 0.f);
    std::vector<void*> args = {a.data(), b.data(), compiled.data()};
    ASSERT_EQ(jit.get_function("bf16_pairs")(args.data()), 0);
    // vdpbf16ps rounds after each of its two adds: within a few float32 ulps of the sum.
    EXPECT_TRUE(testing::all_close(compiled, want, 1e-5f)) << "compiled for " << GetParam();
#endif
  }
}

// vdpbf16ps does twice an FMA's products: where the registers allow, the
// default register tile is four vectors wide (6 rows x 4 vectors on AVX-512:
// 580 GFLOP/s for 1024x768x3072 on Zen 5, against 400 two vectors wide).
TEST_P(Bf16DotTarget, DefaultTileIsFourVectorsWideWhereItFits) {
  Target t = Target::parse(GetParam());
  PairCase c = pair_case(96, 128, 256, false, false);
  tuner::SearchSpace space(tuner::make_task({c.A, c.B, c.C}, t, "bf16_pairs"));
  std::string text = space.describe_candidate(space.default_candidate());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("matmul_bf16\\.j=[0-9]+x[0-9]+x[0-9]+x([0-9]+)"))) << text;
  int lanes = t.natural_lanes(DataType::Float(32));
  EXPECT_EQ(std::stoi(m[1]), (t.num_vector_registers() >= 32 ? 4 : 2) * lanes) << text;
}

INSTANTIATE_TEST_SUITE_P(Targets, Bf16DotTarget, ::testing::ValuesIn(testing::cpu_targets()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return testing::target_test_name(p.param); });

TEST(Bf16Dot, OperandsMustBePairs) {
  te::Tensor A = te::placeholder(ops::shape_exprs({4, 8}), DataType::Float(32), "A");
  EXPECT_TRUE(testing::throws_with([&] { ops::matmul_bf16_pairs(A, A, false, false); }, "must be uint32 bfloat16 pairs (pack_bf16_pairs)"));
  te::Tensor I = te::placeholder(ops::shape_exprs({4, 8}), DataType::Int(32), "I");
  EXPECT_TRUE(testing::throws_with([&] { ops::pack_bf16_pairs(I, 0); }, "packs float32 or bfloat16 values, got int32"));
}

}  // namespace
}  // namespace kiln
