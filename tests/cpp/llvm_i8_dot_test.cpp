// int8 quad dot products (kiln/ops/i8_dot.h, Intrinsic::DotI8x4): the
// interpreter's byte products for every signedness, and the quad-packed
// matmul under the default schedule equal to a naive integer loop, in the
// interpreter and compiled. The kernel is vpdpbusd where the target has
// AVX-512 VNNI or AVX-VNNI (u8 x s8), sdot on AArch64 with dotprod (s8 x s8),
// and widening integer code elsewhere (AVX2).
#include <gtest/gtest.h>

#include <random>

#include "kiln/codegen/llvm.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"
#include "kiln/ops/i8_dot.h"
#include "kiln/ops/search_space.h"
#include "kiln/ops/task.h"
#include "kiln/te/lower.h"
#include "target_params.h"
#include "test_util.h"

namespace kiln {
namespace {

// dot_i8x4 of two words through the interpreter, each signed or not.
int32_t interpret_dot(uint32_t a, bool sa, uint32_t b, bool sb) {
  DataType ta = sa ? DataType::Int(32) : DataType::UInt(32), tb = sb ? DataType::Int(32) : DataType::UInt(32);
  Buffer ia = Buffer::make("a", ta, {1}), ib = Buffer::make("b", tb, {1}), out = Buffer::make("out", DataType::Int(32), {1});
  Expr zero = ops::index_imm(0);
  Expr dot = dot_i8x4(BufferLoad::make(ia, {zero}), BufferLoad::make(ib, {zero}));
  PrimFunc fn = PrimFunc::make("dot", {Param{ia->data, ia}, Param{ib->data, ib}, Param{out->data, out}}, BufferStore::make(out, dot, {zero}));
  int32_t r = 0;
  interpret(fn, {&a, &b, &r});
  return r;
}

TEST(I8Dot, InterpreterMultipliesBytesWithTheirOperandsSignedness) {
  uint32_t a = 0xFF02807Fu, b = 0x80FF0203u;  // bytes, low first: a 7F 80 02 FF, b 03 02 FF 80
  // unsigned a x signed b: 127*3 + 128*2 + 2*(-1) + 255*(-128)
  EXPECT_EQ(interpret_dot(a, false, b, true), 381 + 256 - 2 - 32640);
  EXPECT_EQ(interpret_dot(a, true, b, true), 381 - 256 - 2 + 128);
  EXPECT_EQ(interpret_dot(a, false, b, false), 381 + 256 + 2 * 255 + 255 * 128);
  EXPECT_TRUE(testing::throws_with([] { dot_i8x4(make_const(DataType::Float(32), 1.0), make_const(DataType::Int(32), 2.0)); }, "int32 (signed bytes)"));
}

struct QuadCase {
  te::Tensor A, B, C;
  int64_t M, K, N;
  bool a_signed;
};

QuadCase quad_case(int64_t M, int64_t K, int64_t N, bool a_signed) {
  QuadCase c{{}, {}, {}, M, K, N, a_signed};
  c.A = te::placeholder(ops::shape_exprs({M, K}), a_signed ? DataType::Int(8) : DataType::UInt(8), "A");
  c.B = te::placeholder(ops::shape_exprs({K, N}), DataType::Int(8), "B");
  c.C = ops::matmul_i8x4(ops::pack_i8x4(c.A, -1, 0, "A4"), ops::pack_i8x4(c.B, 0, 0, "B4"));
  return c;
}

PrimFunc lower_default(const QuadCase& c, const Target& t, std::string* describe) {
  ops::SearchSpace space(ops::make_task({c.A, c.B, c.C}, t, "i8_quads"));
  ops::Candidate cand = space.default_candidate();
  *describe = space.describe_candidate(cand);
  return te::lower(space.materialize(&cand), {c.A, c.B, c.C}, "i8_quads");
}

bool arm(const Target& t) { return t.triple.rfind("aarch64", 0) == 0; }

std::vector<std::string> quad_targets() {
  std::vector<std::string> t = testing::cpu_targets();
  for (const char* more : {"llvm -mcpu=sapphirerapids -num-cores=2", "llvm -mcpu=alderlake -num-cores=2", "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76",
                           "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a53"})
    t.push_back(more);
  return t;
}

class I8DotTarget : public ::testing::TestWithParam<std::string> {};

TEST_P(I8DotTarget, DefaultScheduleComputesTheQuadMatmulOnTheDotInstruction) {
  Target t = Target::parse(GetParam());
  static const Target host = Target::host();
  // AArch64's dot instruction takes signed bytes on both sides, x86's unsigned activations.
  bool a_signed = arm(t);
  for (const QuadCase& c : {quad_case(12, 64, 48, a_signed), quad_case(7, 37, 33, a_signed), quad_case(5, 20, 24, a_signed)}) {
    SCOPED_TRACE("M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N));
    std::string describe;
    PrimFunc f = lower_default(c, t, &describe);
    std::mt19937 rng(static_cast<uint32_t>(c.M * c.K));
    std::vector<uint8_t> a(c.M * c.K), b(c.K * c.N);
    for (auto& v : a) v = static_cast<uint8_t>(rng());
    for (auto& v : b) v = static_cast<uint8_t>(rng());
    std::vector<int32_t> want(c.M * c.N, 0), out(want.size(), -1);
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j)
        for (int64_t k = 0; k < c.K; ++k) {
          int32_t x = c.a_signed ? static_cast<int8_t>(a[i * c.K + k]) : a[i * c.K + k];
          want[i * c.N + j] += x * static_cast<int8_t>(b[k * c.N + j]);
        }
    interpret(f, {a.data(), b.data(), out.data()});
    EXPECT_EQ(out, want) << "interpreter";
    std::string assembly = codegen::emit_assembly({f}, t);
    bool vnni = t.has_feature("avx512vnni") || t.has_feature("avxvnni");
    EXPECT_EQ(assembly.find("vpdpbusd") != std::string::npos, vnni) << describe;
    if (arm(t)) EXPECT_EQ(assembly.find("sdot") != std::string::npos, t.has_feature("dotprod")) << describe;
    bool runs = !t.is_cross() && testing::host_can_run(t) && (!t.has_feature("avxvnni") || host.has_feature("avxvnni"));
    if (!runs) continue;
    codegen::JitModule jit = codegen::jit_compile({f}, t);
    std::vector<int32_t> compiled(want.size(), -1);
    std::vector<void*> args = {a.data(), b.data(), compiled.data()};
    ASSERT_EQ(jit.get_function("i8_quads")(args.data()), 0);
    EXPECT_EQ(compiled, want) << "compiled for " << GetParam() << "\n" << describe;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, I8DotTarget, ::testing::ValuesIn(quad_targets()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return testing::target_test_name(p.param); });

TEST(I8Dot, PackingRefusesShiftsThatFitNoByte) {
  te::Tensor A = te::placeholder(ops::shape_exprs({4, 8}), DataType::UInt(8), "A");
  EXPECT_TRUE(testing::throws_with([&] { ops::pack_i8x4(A, 1, 128); }, "uint8 shifted by 128 fits no byte type"));
  te::Tensor F = te::placeholder(ops::shape_exprs({4, 8}), DataType::Float(32), "F");
  EXPECT_TRUE(testing::throws_with([&] { ops::matmul_i8x4(F, F); }, "must be int32/uint32 byte quads"));
}

}  // namespace
}  // namespace kiln
