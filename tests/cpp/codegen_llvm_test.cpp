// Tests of the LLVM backend: hand-built flattened PrimFuncs, JIT-compiled and
// called through the C ABI, each checked against a naive C++ loop.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>

#include "kiln/codegen/llvm.h"
#include "kiln/codegen/target.h"
#include "kiln/ir/op.h"
#include "kiln/support/error.h"

namespace kiln {
namespace {

using codegen::jit_compile;
using codegen::JitOptions;

const Target& host() {
  static const Target t = Target::parse("llvm");
  return t;
}

Buffer buffer(const std::string& name, DataType t, Expr n) { return Buffer::make(name, t, {std::move(n)}); }
Param bparam(const Buffer& b) { return Param{b->data, b}; }
Param sparam(const Var& v) { return Param{v, Buffer()}; }
Expr load(const Buffer& b, Expr i) { return BufferLoad::make(b, {std::move(i)}); }
Stmt store(const Buffer& b, Expr v, Expr i) { return BufferStore::make(b, std::move(v), {std::move(i)}); }
Stmt loop(const Var& v, Expr extent, Stmt body, ForKind kind = ForKind::Serial) { return For::make(v, 0, std::move(extent), kind, std::move(body)); }

// One function, compiled and called with an args array.
struct Kernel {
  codegen::JitModule mod;
  KilnKernel fn = nullptr;
  int32_t operator()(std::vector<void*> args) const { return fn(args.data()); }
};

Kernel compile(const PrimFunc& f, const JitOptions& options = {}, const Target& target = host()) {
  Kernel k;
  k.mod = jit_compile({f}, target, options);
  k.fn = k.mod.get_function(f.name());
  return k;
}

// ------------------------------------------------------------------ target

TEST(Target, ParsesHostNamedCpuAndFeatures) {
  Target h = Target::parse("llvm");
  EXPECT_EQ(h.kind, Target::Kind::LLVM);
  EXPECT_FALSE(h.mcpu.empty());
  EXPECT_GE(h.num_cores, 1);
  EXPECT_EQ(Target::parse(h.str()).str(), h.str());

  // The host's string names its CPU; parsed back it must not gain what the
  // CPU's name implies and the host lacks (a VM's Sapphire Rapids without AMX).
  Target back = Target::parse(h.str());
  for (const char* f : {"amx-tile", "amx-bf16", "amx-int8", "avx512f", "avx512bf16", "avx512fp16", "avx512vnni", "avxvnni", "avx2", "fma"})
    EXPECT_EQ(back.has_feature(f), h.has_feature(f)) << f << " in " << h.str();
  EXPECT_EQ(back, h);

  Target z = Target::parse("llvm -mcpu=znver3 -num-cores=2");
  EXPECT_EQ(z.mcpu, "znver3");
  EXPECT_EQ(z.num_cores, 2);
  EXPECT_TRUE(z.has_feature("avx2"));
  EXPECT_TRUE(z.has_feature("fma"));
  EXPECT_FALSE(z.has_feature("avx512f"));
  EXPECT_EQ(z.vector_bits, 256);
  EXPECT_EQ(z.natural_lanes(DataType::Float(32)), 8);
  EXPECT_EQ(z.str(), "llvm -mcpu=znver3 -num-cores=2");

  Target x = Target::parse("llvm -mcpu=x86-64 -mattr=+avx2,+fma -fast-math");
  EXPECT_TRUE(x.fast_math);
  EXPECT_TRUE(x.has_feature("avx2"));
  EXPECT_EQ(x.vector_bits, 256);
  EXPECT_EQ(Target::parse(x.str()).str(), x.str());

  EXPECT_EQ(Target::parse("llvm -mcpu=x86-64").vector_bits, 128);
  EXPECT_EQ(Target::parse("llvm -mcpu=skylake-avx512").vector_bits, 512);
  EXPECT_EQ(Target::parse("llvm -mcpu=skylake-avx512 -mattr=-avx512f").vector_bits, 256);

  // Register files: 16 ymm without AVX-512, 32 zmm with it (and v0-v31 on AArch64).
  EXPECT_EQ(z.num_vector_registers(), 16);
  EXPECT_EQ(Target::parse("llvm -mcpu=haswell").num_vector_registers(), 16);
  EXPECT_EQ(Target::parse("llvm -mcpu=x86-64").num_vector_registers(), 16);
  EXPECT_EQ(Target::parse("llvm -mcpu=skylake-avx512").num_vector_registers(), 32);
  EXPECT_EQ(Target::parse("llvm -mcpu=znver4").num_vector_registers(), 32);
  EXPECT_EQ(Target::parse("llvm -mcpu=skylake-avx512 -mattr=-avx512f").num_vector_registers(), 16);
  EXPECT_EQ(h.num_vector_registers(), h.has_feature("avx512f") ? 32 : 16);
  Target arm;  // built by hand: only the host's LLVM backend is initialised here
  arm.triple = "aarch64-unknown-linux-gnu";
  arm.features = {"neon"};
  EXPECT_EQ(arm.num_vector_registers(), 32);
  // Another architecture's code is compiled here, never run (kiln.compile keeps no runner for it).
  EXPECT_TRUE(arm.is_cross());
  EXPECT_FALSE(h.is_cross());
  EXPECT_FALSE(z.is_cross());  // another x86 CPU: the host's architecture
  EXPECT_FALSE(Target::parse("cuda -arch=sm_90").is_cross());

  Target c = Target::parse("cuda -arch=sm_90");
  EXPECT_EQ(c.kind, Target::Kind::CUDA);
  EXPECT_EQ(c.num_vector_registers(), 0);
  EXPECT_EQ(c.arch, "sm_90");
  EXPECT_EQ(c.str(), "cuda -arch=sm_90");
}

TEST(Target, RejectsBadInputNamingTheKnownOnes) {
  auto message = [](const std::string& s) {
    try {
      Target::parse(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("llvm -mcpu=znver3 -vectorize").find("-mcpu=, -mattr="), std::string::npos);
  EXPECT_NE(message("opencl").find("known kinds: llvm, cuda"), std::string::npos);
  EXPECT_NE(message("llvm -mcpu=nosuchcpu").find("known CPUs"), std::string::npos);
  EXPECT_NE(message("llvm -mattr=+nosuchfeature").find("nosuchfeature"), std::string::npos);
  EXPECT_NE(message("llvm -num-cores=two").find("-num-cores"), std::string::npos);
  EXPECT_NE(message("cuda -mcpu=znver3").find("-arch="), std::string::npos);
  EXPECT_THROW(jit_compile({}, Target::parse("cuda -arch=sm_90")), Error);
}

// ------------------------------------------------------------ elementwise

// C = A * B + 1.5 over n elements: 8-lane Ramp loads and stores, then a scalar tail.
PrimFunc elementwise(const std::string& name) {
  Var n("n");
  Buffer A = buffer("A", DataType::Float(32), n), B = buffer("B", DataType::Float(32), n), C = buffer("C", DataType::Float(32), n);
  Var i("i"), j("j");
  Expr idx = Ramp::make(i * 8, 1, 8);
  Stmt vec = loop(i, floordiv(n, 8), store(C, load(A, idx) * load(B, idx) + 1.5f, idx));
  Stmt tail = For::make(j, floordiv(n, 8) * 8, floormod(n, 8), ForKind::Serial, store(C, load(A, j) * load(B, j) + 1.5f, j));
  return PrimFunc::make(name, {bparam(A), bparam(B), bparam(C), sparam(n)}, Seq::make({vec, tail}));
}

TEST(CodegenLLVM, ElementwiseWithRampVectors) {
  PrimFunc f = elementwise("ew");
  std::string ir = codegen::emit_llvm_ir({f}, host(), false);
  EXPECT_NE(ir.find("load <8 x float>"), std::string::npos);
  EXPECT_NE(ir.find("store <8 x float>"), std::string::npos);
  EXPECT_NE(ir.find("define i32 @ew(ptr"), std::string::npos);
  Kernel k = compile(f);
  for (int32_t n : {0, 1, 7, 8, 1003, 4096}) {
    std::vector<float> a(n), b(n), c(n + 1, -7.f);
    for (int i = 0; i < n; ++i) {
      a[i] = 0.25f * i - 3;
      b[i] = std::sin(0.1f * i);
    }
    ASSERT_EQ(k({a.data(), b.data(), c.data(), &n}), 0);
    for (int i = 0; i < n; ++i) ASSERT_NEAR(c[i], a[i] * b[i] + 1.5f, 1e-5f * (1 + std::fabs(c[i]))) << "n=" << n << " i=" << i;
    EXPECT_EQ(c[n], -7.f) << "wrote past the end";
  }
}

TEST(CodegenLLVM, MatmulWithReductionLoop) {
  const int M = 37, N = 29, K = 53;
  Buffer A = buffer("A", DataType::Float(32), M * K), B = buffer("B", DataType::Float(32), K * N), C = buffer("C", DataType::Float(32), M * N);
  Var i("i"), j("j"), k("k");
  Expr c_idx = i * N + j;
  Stmt body = Seq::make({store(C, 0.f, c_idx), loop(k, K, store(C, load(C, c_idx) + load(A, i * K + k) * load(B, k * N + j), c_idx))});
  PrimFunc f = PrimFunc::make("matmul", {bparam(A), bparam(B), bparam(C)}, loop(i, M, loop(j, N, body)));
  Kernel kern = compile(f);
  std::vector<float> a(M * K), b(K * N), c(M * N);
  for (int x = 0; x < M * K; ++x) a[x] = static_cast<float>((x * 7) % 13) - 6;
  for (int x = 0; x < K * N; ++x) b[x] = static_cast<float>((x * 5) % 11) * 0.5f - 2;
  ASSERT_EQ(kern({a.data(), b.data(), c.data()}), 0);
  for (int y = 0; y < M; ++y) {
    for (int x = 0; x < N; ++x) {
      double ref = 0;
      for (int z = 0; z < K; ++z) ref += static_cast<double>(a[y * K + z]) * b[z * N + x];
      ASSERT_NEAR(c[y * N + x], ref, 1e-3) << y << "," << x;
    }
  }
}

// ------------------------------------------------------------------ dtypes

// Out[i] = cast(to, In[i]) for 8 elements, scalar and with 4-lane vectors.
template <typename From, typename To>
void expect_cast(DataType from, DataType to, const std::vector<From>& in, const std::vector<To>& expected) {
  ASSERT_EQ(in.size(), 8u);
  ASSERT_EQ(expected.size(), 8u);
  for (int lanes : {1, 4}) {
    Buffer I = buffer("In", from, 8), O = buffer("Out", to, 8);
    Var i("i");
    Expr idx = lanes == 1 ? Expr(i) : Ramp::make(i * lanes, 1, lanes);
    PrimFunc f = PrimFunc::make("cast_fn", {bparam(I), bparam(O)}, loop(i, 8 / lanes, store(O, cast(to.with_lanes(lanes), load(I, idx)), idx)));
    Kernel k = compile(f);
    std::vector<From> src = in;
    std::vector<To> out(8);
    ASSERT_EQ(k({src.data(), out.data()}), 0);
    for (int x = 0; x < 8; ++x) EXPECT_EQ(std::memcmp(&out[x], &expected[x], sizeof(To)), 0) << from.str() << " -> " << to.str() << " lanes " << lanes << " element " << x;
  }
}

TEST(CodegenLLVM, EveryDtypeRoundTripsThroughCasts) {
  using DT = DataType;
  // Integers widen by their own signedness and narrow by keeping the low bits.
  expect_cast<int8_t, int32_t>(DT::Int(8), DT::Int(32), {-128, -1, 0, 1, 127, 5, -5, 64}, {-128, -1, 0, 1, 127, 5, -5, 64});
  expect_cast<uint8_t, int32_t>(DT::UInt(8), DT::Int(32), {0, 1, 200, 255, 7, 128, 127, 3}, {0, 1, 200, 255, 7, 128, 127, 3});
  expect_cast<int32_t, uint8_t>(DT::Int(32), DT::UInt(8), {-1, 300, 65541, 0, 255, 256, 7, -256}, {255, 44, 5, 0, 255, 0, 7, 0});
  expect_cast<int16_t, int64_t>(DT::Int(16), DT::Int(64), {-32768, 32767, -1, 0, 1, 2, 3, 4}, {-32768, 32767, -1, 0, 1, 2, 3, 4});
  expect_cast<uint32_t, uint64_t>(DT::UInt(32), DT::UInt(64), {4000000000u, 1, 0, 7, 8, 9, 10, 11}, {4000000000u, 1, 0, 7, 8, 9, 10, 11});
  expect_cast<int64_t, int16_t>(DT::Int(64), DT::Int(16), {(int64_t(1) << 40) + 5, -70000, 0, 1, -1, 32768, 3, 4}, {5, -4464, 0, 1, -1, -32768, 3, 4});
  expect_cast<uint16_t, int8_t>(DT::UInt(16), DT::Int(8), {65535, 128, 127, 0, 1, 2, 3, 4}, {-1, -128, 127, 0, 1, 2, 3, 4});
  // Float to int truncates toward zero; int to float rounds.
  expect_cast<float, int32_t>(DT::Float(32), DT::Int(32), {-2.7f, 2.7f, 1000.f, -0.5f, 0.f, 1e6f, -1e6f, 3.99f}, {-2, 2, 1000, 0, 0, 1000000, -1000000, 3});
  expect_cast<double, uint8_t>(DT::Float(64), DT::UInt(8), {3.9, 0, 255, 128.5, 1, 2, 3, 4}, {3, 0, 255, 128, 1, 2, 3, 4});
  expect_cast<uint32_t, double>(DT::UInt(32), DT::Float(64), {4000000000u, 1, 0, 7, 8, 9, 10, 11}, {4e9, 1, 0, 7, 8, 9, 10, 11});
  expect_cast<int64_t, float>(DT::Int(64), DT::Float(32), {-3, int64_t(1) << 40, 0, 1, 2, 3, 4, 5}, {-3.f, 1099511627776.f, 0, 1, 2, 3, 4, 5});
  expect_cast<float, double>(DT::Float(32), DT::Float(64), {0.1f, -2.f, 1e30f, 0, 1, 2, 3, 4}, {static_cast<double>(0.1f), -2, static_cast<double>(1e30f), 0, 1, 2, 3, 4});
  // float16 and bfloat16 as bit patterns: 1, -2, 0.5, 65504 / 3 and 1/3 rounded to nearest even.
  expect_cast<uint16_t, float>(DT::Float(16), DT::Float(32), {0x3C00, 0xC000, 0x3800, 0x7BFF, 0, 0x3555, 0x8000, 0x4200}, {1, -2, 0.5f, 65504, 0, 0.333251953125f, -0.f, 3});
  expect_cast<float, uint16_t>(DT::Float(32), DT::Float(16), {1, -2, 0.5f, 65504, 0, 1.f / 3, 1e6f, 3}, {0x3C00, 0xC000, 0x3800, 0x7BFF, 0, 0x3555, 0x7C00, 0x4200});
  expect_cast<uint16_t, double>(DT::BFloat16(), DT::Float(64), {0x3F80, 0xC000, 0x3F00, 0x4040, 0, 0x3EAB, 0x8000, 0x7F80}, {1, -2, 0.5, 3, 0, 0.333984375, -0.0, INFINITY});
  expect_cast<float, uint16_t>(DT::Float(32), DT::BFloat16(), {1, -2, 0.5f, 3, 0, 1.f / 3, -0.f, INFINITY}, {0x3F80, 0xC000, 0x3F00, 0x4040, 0, 0x3EAB, 0x8000, 0x7F80});
  expect_cast<uint16_t, uint16_t>(DT::Float(16), DT::BFloat16(), {0x3C00, 0xC000, 0x3800, 0x4200, 0, 0x3555, 0x8000, 0x4400}, {0x3F80, 0xC000, 0x3F00, 0x4040, 0, 0x3EAB, 0x8000, 0x4080});
  // bool is one byte in memory.
  expect_cast<float, uint8_t>(DT::Float(32), DT::Bool(), {0, 0.5f, -1, NAN, 0, 2, -0.f, 1e-30f}, {0, 1, 1, 1, 0, 1, 0, 1});
  expect_cast<uint8_t, int32_t>(DT::Bool(), DT::Int(32), {0, 1, 1, 0, 1, 0, 0, 1}, {0, 1, 1, 0, 1, 0, 0, 1});
  expect_cast<int8_t, uint8_t>(DT::Int(8), DT::Bool(), {0, 1, -1, 0, 2, 0, 0, -128}, {0, 1, 1, 0, 1, 0, 0, 1});
}

// Out[i] = op(A[i], B[i]) in dtype t, compared bit for bit with expected.
template <typename T>
void expect_binary(DataType t, std::function<Expr(Expr, Expr)> op, std::vector<T> a, std::vector<T> b, std::vector<T> expected) {
  Buffer A = buffer("A", t, 4), B = buffer("B", t, 4), O = buffer("O", t, 4);
  Var i("i");
  for (int lanes : {1, 4}) {
    Expr idx = lanes == 1 ? Expr(i) : Ramp::make(i * 4, 1, 4);
    PrimFunc f = PrimFunc::make("binary", {bparam(A), bparam(B), bparam(O)}, loop(i, lanes == 1 ? 4 : 1, store(O, op(load(A, idx), load(B, idx)), idx)));
    Kernel k = compile(f);
    std::vector<T> out(4);
    ASSERT_EQ(k({a.data(), b.data(), out.data()}), 0);
    for (int x = 0; x < 4; ++x) EXPECT_EQ(std::memcmp(&out[x], &expected[x], sizeof(T)), 0) << t.str() << " lanes " << lanes << " element " << x;
  }
}

TEST(CodegenLLVM, ArithmeticInNarrowAndUnusualTypes) {
  using DT = DataType;
  auto mul = [](Expr a, Expr b) { return a * b; };
  auto sub = [](Expr a, Expr b) { return a - b; };
  auto mx = [](Expr a, Expr b) { return max(a, b); };
  auto add = [](Expr a, Expr b) { return a + b; };
  auto lt = [](Expr a, Expr b) { return select(a < b, a, b); };
  expect_binary<int8_t>(DT::Int(8), mul, {100, -128, 3, -7}, {3, -1, 5, 9}, {44, -128, 15, -63});
  expect_binary<uint16_t>(DT::UInt(16), sub, {0, 5, 65535, 1000}, {1, 5, 65535, 2000}, {65535, 0, 0, 64536});
  expect_binary<uint32_t>(DT::UInt(32), mx, {0xFFFFFFFFu, 1, 7, 0}, {1, 0x80000000u, 7, 3}, {0xFFFFFFFFu, 0x80000000u, 7, 3});
  expect_binary<int64_t>(DT::Int(64), mul, {int64_t(1) << 33, -3, 5, 0}, {1 << 20, 1 << 30, -7, 9}, {int64_t(1) << 53, -(int64_t(3) << 30), -35, 0});
  expect_binary<uint16_t>(DT::Float(16), add, {0x3E00, 0x3C00, 0xC000, 0x7BFF}, {0x3400, 0x3C00, 0x3C00, 0x7BFF}, {0x3F00, 0x4000, 0xBC00, 0x7C00});
  expect_binary<uint16_t>(DT::BFloat16(), mul, {0x4040, 0x3F00, 0xC000, 0x4000}, {0x3F00, 0x3F00, 0x4040, 0x4000}, {0x3FC0, 0x3E80, 0xC0C0, 0x4080});
  expect_binary<double>(DT::Float(64), lt, {1.5, -2, 3, 1e300}, {2, -3, 3, -1e300}, {1.5, -3, 3, -1e300});
}

TEST(CodegenLLVM, FloorAndTruncDivisionWithNegatives) {
  const int n = 48;
  std::vector<int32_t> a(n), b(n);
  for (int x = 0; x < n; ++x) {
    a[x] = x - 24;
    b[x] = (x % 7) - 3 == 0 ? 5 : (x % 7) - 3;
  }
  auto floor_div = [](int32_t p, int32_t q) { return static_cast<int32_t>(std::floor(static_cast<double>(p) / q)); };
  for (int divisor : {-7, -3, -1, 1, 2, 3, 4, 7, 8, 0 /* variable */}) {
    for (int lanes : {1, 4}) {
      Buffer A = buffer("A", DataType::Int(32), n), B = buffer("B", DataType::Int(32), n);
      Buffer Q = buffer("Q", DataType::Int(32), n), R = buffer("R", DataType::Int(32), n), TQ = buffer("TQ", DataType::Int(32), n), TR = buffer("TR", DataType::Int(32), n);
      Var i("i");
      Expr idx = lanes == 1 ? Expr(i) : Ramp::make(i * lanes, 1, lanes);
      Expr x = load(A, idx);
      Expr d = divisor == 0 ? load(B, idx) : cast(DataType::Int(32, lanes), Expr(divisor));
      Stmt body = Seq::make({store(Q, floordiv(x, d), idx), store(R, floormod(x, d), idx), store(TQ, truncdiv(x, d), idx), store(TR, truncmod(x, d), idx)});
      PrimFunc f = PrimFunc::make("divmod", {bparam(A), bparam(B), bparam(Q), bparam(R), bparam(TQ), bparam(TR)}, loop(i, n / lanes, body));
      Kernel k = compile(f);
      std::vector<int32_t> q(n), r(n), tq(n), tr(n);
      ASSERT_EQ(k({a.data(), b.data(), q.data(), r.data(), tq.data(), tr.data()}), 0);
      for (int e = 0; e < n; ++e) {
        int32_t dv = divisor == 0 ? b[e] : divisor;
        ASSERT_EQ(q[e], floor_div(a[e], dv)) << a[e] << " // " << dv << " lanes " << lanes;
        ASSERT_EQ(r[e], a[e] - floor_div(a[e], dv) * dv) << a[e] << " % " << dv << " lanes " << lanes;
        ASSERT_EQ(tq[e], a[e] / dv);
        ASSERT_EQ(tr[e], a[e] % dv);
      }
    }
  }
}

// ------------------------------------------------------------------- math

// Out = fn(X) over `xs` with `lanes` lanes (xs.size() a multiple of lanes).
std::vector<float> run_math(Intrinsic fn, const std::vector<float>& xs, int lanes, const std::vector<float>& ys = {}) {
  int n = static_cast<int>(xs.size());
  Buffer X = buffer("X", DataType::Float(32), n), Y = buffer("Y", DataType::Float(32), n), O = buffer("O", DataType::Float(32), n);
  Var i("i");
  Expr idx = lanes == 1 ? Expr(i) : Ramp::make(i * lanes, 1, lanes);
  std::vector<Expr> args = {load(X, idx)};
  if (fn == Intrinsic::Pow) args.push_back(load(Y, idx));
  PrimFunc f = PrimFunc::make("math", {bparam(X), bparam(Y), bparam(O)}, loop(i, n / lanes, store(O, call_math(fn, args), idx)));
  Kernel k = compile(f);
  std::vector<float> x = xs, y = ys.empty() ? xs : ys, out(n);
  EXPECT_EQ(k({x.data(), y.data(), out.data()}), 0);
  return out;
}

std::vector<float> grid(double lo, double hi, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(lo + (hi - lo) * i / (n - 1));
  return v;
}

struct MathCase {
  Intrinsic fn;
  double lo, hi;
  std::function<double(double)> ref;
  double max_rel, max_abs;  // |err| <= max_abs + max_rel * |ref|
};

TEST(CodegenLLVM, VectorMathMatchesLibmOverWideRanges) {
  std::vector<MathCase> cases = {
      {Intrinsic::Exp, -87, 88.5, [](double x) { return std::exp(x); }, 3e-7, 0},
      {Intrinsic::Exp, -103, -87, [](double x) { return std::exp(x); }, 0, 1e-38},
      {Intrinsic::Tanh, -20, 20, [](double x) { return std::tanh(x); }, 3e-7, 1e-30},
      {Intrinsic::Tanh, -1, 1, [](double x) { return std::tanh(x); }, 3e-7, 1e-30},
      {Intrinsic::Erf, -6, 6, [](double x) { return std::erf(x); }, 0, 3e-7},
      {Intrinsic::Erf, -0.01, 0.01, [](double x) { return std::erf(x); }, 3e-7, 1e-30},
      {Intrinsic::Sigmoid, -80, 80, [](double x) { return 1 / (1 + std::exp(-x)); }, 5e-7, 0},
      {Intrinsic::Sigmoid, -104, -80, [](double x) { return 1 / (1 + std::exp(-x)); }, 0, 1e-38},
      {Intrinsic::Sin, -100, 100, [](double x) { return std::sin(x); }, 0, 3e-7},
      {Intrinsic::Cos, -100, 100, [](double x) { return std::cos(x); }, 0, 3e-7},
  };
  const int n = 20000;
  for (const MathCase& c : cases) {
    std::vector<float> xs = grid(c.lo, c.hi, n);
    std::vector<float> vec = run_math(c.fn, xs, 8), scalar = run_math(c.fn, xs, 1);
    double worst = 0;
    for (int i = 0; i < n; ++i) {
      double ref = c.ref(xs[i]);
      double err = std::fabs(vec[i] - ref);
      worst = std::max(worst, err / (c.max_abs + c.max_rel * std::fabs(ref)));
      ASSERT_LE(err, c.max_abs + c.max_rel * std::fabs(ref)) << intrinsic_name(c.fn) << "(" << xs[i] << ") = " << vec[i] << ", expected " << ref;
      // Scalar and vector code are the same polynomial.
      ASSERT_EQ(vec[i], scalar[i]) << intrinsic_name(c.fn) << "(" << xs[i] << ")";
    }
    std::printf("%-8s [%g, %g]: worst error %.2f of the bound\n", intrinsic_name(c.fn), c.lo, c.hi, worst);
  }
  // log over every binade, denormals included.
  std::vector<float> xs;
  for (int i = 0; i < 16000; ++i) xs.push_back(static_cast<float>(std::pow(10.0, -44.0 + 82.0 * i / 15999)));
  std::vector<float> out = run_math(Intrinsic::Log, xs, 8);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_NEAR(out[i], std::log(static_cast<double>(xs[i])), 2e-7 * std::max(1.0, std::fabs(std::log(static_cast<double>(xs[i]))))) << xs[i];
}

TEST(CodegenLLVM, VectorMathSpecialValues) {
  const float inf = INFINITY, nan = NAN;
  std::vector<float> xs = {inf, -inf, nan, 0.f, -0.f, 1.f, 200.f, -200.f};
  std::vector<float> e = run_math(Intrinsic::Exp, xs, 8);
  EXPECT_EQ(e[0], inf);
  EXPECT_EQ(e[1], 0.f);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], 1.f);
  EXPECT_EQ(e[6], inf);
  EXPECT_EQ(e[7], 0.f);
  std::vector<float> l = run_math(Intrinsic::Log, {inf, -1.f, nan, 0.f, 1.f, 2.f, 1e-45f, 3.4e38f}, 8);
  EXPECT_EQ(l[0], inf);
  EXPECT_TRUE(std::isnan(l[1]));
  EXPECT_TRUE(std::isnan(l[2]));
  EXPECT_EQ(l[3], -inf);
  EXPECT_EQ(l[4], 0.f);
  EXPECT_NEAR(l[6], std::log(static_cast<double>(1e-45f)), 1e-4);
  std::vector<float> t = run_math(Intrinsic::Tanh, xs, 8);
  EXPECT_EQ(t[0], 1.f);
  EXPECT_EQ(t[1], -1.f);
  EXPECT_TRUE(std::isnan(t[2]));
  std::vector<float> s = run_math(Intrinsic::Sigmoid, xs, 8);
  EXPECT_EQ(s[0], 1.f);
  EXPECT_EQ(s[1], 0.f);
  EXPECT_EQ(s[3], 0.5f);
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[6], 1.f);
  EXPECT_EQ(s[7], 0.f);
  std::vector<float> r = run_math(Intrinsic::Erf, xs, 8);
  EXPECT_EQ(r[0], 1.f);
  EXPECT_EQ(r[1], -1.f);
  EXPECT_TRUE(std::isnan(r[2]));
  std::vector<float> sn = run_math(Intrinsic::Sin, xs, 8);
  EXPECT_TRUE(std::isnan(sn[0]));
  EXPECT_TRUE(std::isnan(sn[2]));
}

TEST(CodegenLLVM, PowFloat32) {
  std::vector<float> xs, ys;
  for (int i = 0; i < 4000; ++i) {
    xs.push_back(static_cast<float>(std::pow(10.0, -2.0 + 4.0 * (i % 97) / 96)));
    ys.push_back(static_cast<float>(-9.0 + 18.0 * (i % 89) / 88));
  }
  // Negative bases with integral exponents, and the special cases.
  std::vector<float> sx = {-2.f, -2.f, -3.f, -2.f, 0.f, 0.f, 1.f, 5.f}, sy = {3.f, 2.f, -1.f, 0.5f, 2.f, -1.f, NAN, 0.f};
  xs.insert(xs.end(), sx.begin(), sx.end());
  ys.insert(ys.end(), sy.begin(), sy.end());
  std::vector<float> out = run_math(Intrinsic::Pow, xs, 8, ys);
  for (size_t i = 0; i < xs.size(); ++i) {
    double ref = std::pow(static_cast<double>(xs[i]), static_cast<double>(ys[i]));
    if (std::isnan(ref)) ASSERT_TRUE(std::isnan(out[i])) << xs[i] << "^" << ys[i];
    else if (std::isinf(ref)) ASSERT_EQ(out[i], static_cast<float>(ref)) << xs[i] << "^" << ys[i];
    else ASSERT_NEAR(out[i], ref, 1e-6 * std::fabs(ref) + 1e-37) << xs[i] << "^" << ys[i];
  }
}

TEST(CodegenLLVM, Float32VectorMathCallsNoLibm) {
  Buffer X = buffer("X", DataType::Float(32), 64), O = buffer("O", DataType::Float(32), 64);
  Var i("i");
  Expr idx = Ramp::make(i * 8, 1, 8), x = load(X, idx);
  Expr e = exp(x) + log(x) + tanh(x) + erf(x) + sigmoid(x) + sin(x) + cos(x) + pow(x, x);
  PrimFunc f = PrimFunc::make("allmath", {bparam(X), bparam(O)}, loop(i, 8, store(O, e, idx)));
  std::string ir = codegen::emit_llvm_ir({f}, host(), true);
  for (const char* fn : {"@expf", "@logf", "@tanhf", "@erff", "@sinf", "@cosf", "@powf", "@llvm.exp.", "@llvm.log.", "@llvm.pow.", "@llvm.sin.", "@llvm.cos."}) {
    EXPECT_EQ(ir.find(fn), std::string::npos) << fn << " in the optimised IR";
  }
}

TEST(CodegenLLVM, Float64AndHalfMath) {
  const int n = 64;
  Buffer X = buffer("X", DataType::Float(64), n), O = buffer("O", DataType::Float(64), n * 4);
  Buffer H = buffer("H", DataType::Float(16), n), HO = buffer("HO", DataType::Float(16), n);
  Var i("i"), j("j");
  Expr idx = Ramp::make(i * 4, 1, 4), x = load(X, idx);
  Stmt s = Seq::make({store(O, exp(x), idx), store(O, tanh(x), idx + Broadcast::make(n, 4)), store(O, erf(x), idx + Broadcast::make(2 * n, 4)),
                      store(O, sigmoid(x), idx + Broadcast::make(3 * n, 4))});
  Stmt h = loop(j, n, store(HO, exp(load(H, j)), j));
  PrimFunc f = PrimFunc::make("f64math", {bparam(X), bparam(O), bparam(H), bparam(HO)}, Seq::make({loop(i, n / 4, s), h}));
  Kernel k = compile(f);
  std::vector<double> xs(n), out(4 * n);
  std::vector<uint16_t> hx(n, 0x3C00 /* 1.0 */), ho(n);
  for (int q = 0; q < n; ++q) xs[q] = -4 + 8.0 * q / n;
  ASSERT_EQ(k({xs.data(), out.data(), hx.data(), ho.data()}), 0);
  for (int q = 0; q < n; ++q) {
    EXPECT_NEAR(out[q], std::exp(xs[q]), 1e-14 * std::exp(xs[q]));
    EXPECT_NEAR(out[n + q], std::tanh(xs[q]), 1e-15);
    EXPECT_NEAR(out[2 * n + q], std::erf(xs[q]), 1e-15);
    EXPECT_NEAR(out[3 * n + q], 1 / (1 + std::exp(-xs[q])), 1e-15);
    EXPECT_EQ(ho[q], 0x4170) << "exp(1) in float16 is 2.719 (0x4170)";
  }
}

// --------------------------------------------------------------- parallel

// A stand-in for kiln_parallel_launch with a chosen task count, run on real threads.
std::atomic<int> g_launches{0};
int g_num_tasks = 1;
int32_t g_asked_tasks = -1;  // the task count the last launch asked for (0: one per thread)
int32_t test_launch(KilnParallelBody body, void* closure, int32_t num_tasks) {
  ++g_launches;
  g_asked_tasks = num_tasks;
  int n = num_tasks > 0 ? num_tasks : g_num_tasks;
  std::vector<int32_t> rc(n, 0);
  if (n <= 16) {
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t) threads.emplace_back([&, t] { rc[t] = body(t, n, closure); });
    for (auto& th : threads) th.join();
  } else {
    for (int t = n - 1; t >= 0; --t) rc[t] = body(t, n, closure);
  }
  for (int32_t r : rc) {
    if (r != 0) return r;
  }
  return 0;
}

JitOptions with_test_launch() { return JitOptions{{{"kiln_parallel_launch", reinterpret_cast<void*>(&test_launch)}}}; }

// Out[i] = In[i] * 2 + i and Count[i] += 1 for i in parallel [0, n).
PrimFunc parallel_fn() {
  Var n("n");
  Buffer I = buffer("In", DataType::Float(32), n), O = buffer("Out", DataType::Float(32), n), C = buffer("Count", DataType::Int(32), n);
  Var i("i");
  Stmt body = Seq::make({store(O, load(I, i) * 2.f + cast(DataType::Float(32), i), i), store(C, load(C, i) + 1, i)});
  return PrimFunc::make("par", {bparam(I), bparam(O), bparam(C), sparam(n)}, loop(i, n, body, ForKind::Parallel));
}

void check_parallel(const Kernel& k, int32_t n) {
  std::vector<float> in(n), out(n, NAN);
  std::vector<int32_t> count(n, 0);
  for (int x = 0; x < n; ++x) in[x] = 0.5f * x;
  ASSERT_EQ(k({in.data(), out.data(), count.data(), &n}), 0);
  for (int x = 0; x < n; ++x) {
    ASSERT_EQ(count[x], 1) << "element " << x << " of " << n << " written " << count[x] << " times";
    ASSERT_EQ(out[x], in[x] * 2 + x);
  }
}

TEST(CodegenLLVM, ParallelLoopCoversEveryIterationOnce) {
  Kernel k = compile(parallel_fn(), with_test_launch());
  for (int tasks : {1, 2, 3, 7, 16, 64, 1000}) {
    g_num_tasks = tasks;
    for (int32_t n : {0, 1, 5, 999, 1024}) check_parallel(k, n);
  }
  EXPECT_GT(g_launches.load(), 0);
  // The real runtime's thread pool.
  Kernel real = compile(parallel_fn());
  for (int32_t n : {0, 3, 100000}) check_parallel(real, n);
}

TEST(CodegenLLVM, ParallelLoopOfOneIterationAsksForOneTask) {
  // One task runs on the calling thread: no worker woken for an empty chunk.
  Kernel k = compile(parallel_fn(), with_test_launch());
  g_num_tasks = 4;
  for (int32_t n : {0, 1}) {
    check_parallel(k, n);
    EXPECT_EQ(g_asked_tasks, 1) << "extent " << n;
  }
  for (int32_t n : {2, 3, 1000}) {
    check_parallel(k, n);
    EXPECT_EQ(g_asked_tasks, 0) << "extent " << n << ": one task per thread";
  }
}

TEST(CodegenLLVM, FailingAssertInParallelBodyReachesTheCaller) {
  Var n("n");
  Buffer O = buffer("O", DataType::Int(32), n);
  Var i("i");
  Stmt body = AssertStmt::make(i != 77, "iteration 77 fails", store(O, i, i));
  Kernel k = compile(PrimFunc::make("par_fail", {bparam(O), sparam(n)}, loop(i, n, body, ForKind::Parallel)));
  std::vector<int32_t> out(1000);
  int32_t len = 50;
  EXPECT_EQ(k({out.data(), &len}), 0);
  len = 1000;
  EXPECT_NE(k({out.data(), &len}), 0);
  EXPECT_STREQ(kiln_get_last_error(), "iteration 77 fails");
}

TEST(CodegenLLVM, NestedParallelLoopRunsSeriallyInside) {
  const int R = 13, C = 37;
  Buffer O = buffer("O", DataType::Int(32), R * C);
  Var i("i"), j("j");
  Stmt inner = loop(j, C, store(O, load(O, i * C + j) + i * 100 + j, i * C + j), ForKind::Parallel);
  PrimFunc f = PrimFunc::make("nested", {bparam(O)}, loop(i, R, inner, ForKind::Parallel));
  Kernel k = compile(f, with_test_launch());
  g_num_tasks = 4;
  g_launches = 0;
  std::vector<int32_t> out(R * C, 0);
  ASSERT_EQ(k({out.data()}), 0);
  EXPECT_EQ(g_launches.load(), 1) << "the inner parallel loop must not launch again";
  for (int y = 0; y < R; ++y) {
    for (int x = 0; x < C; ++x) ASSERT_EQ(out[y * C + x], y * 100 + x);
  }
}

// ------------------------------------------------- allocation, asserts, branches

std::atomic<int> g_allocs{0}, g_frees{0};
void* test_alloc(int64_t nbytes) {
  ++g_allocs;
  return std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
}
void test_free(void* p) {
  ++g_frees;
  std::free(p);
}
std::string g_last_error;
void test_set_error(const char* msg) { g_last_error = msg; }

JitOptions with_test_memory() {
  return JitOptions{{{"kiln_alloc_workspace", reinterpret_cast<void*>(&test_alloc)},
                     {"kiln_free_workspace", reinterpret_cast<void*>(&test_free)},
                     {"kiln_set_last_error", reinterpret_cast<void*>(&test_set_error)}}};
}

// Tmp[i] = In[i] * 2 then Out[i] = Tmp[size - 1 - i] + 1, through an Allocate of `size` elements.
PrimFunc alloc_fn(Expr size, Var n, bool with_assert) {
  Buffer I = buffer("In", DataType::Float(32), n), O = buffer("Out", DataType::Float(32), n), T = buffer("Tmp", DataType::Float(32), size);
  Var i("i"), j("j");
  Stmt body = Seq::make({loop(i, n, store(T, load(I, i) * 2.f, i)), loop(j, n, store(O, load(T, n - 1 - j) + 1.f, j))});
  if (with_assert) body = AssertStmt::make(load(I, 0) >= 0.f, "In[0] must not be negative", body);
  return PrimFunc::make("alloc", {bparam(I), bparam(O), sparam(n)}, Allocate::make(T, body));
}

void check_alloc(const Kernel& k, int32_t n) {
  std::vector<float> in(n), out(n);
  for (int x = 0; x < n; ++x) in[x] = static_cast<float>(x % 1000);
  ASSERT_EQ(k({in.data(), out.data(), &n}), 0);
  for (int x = 0; x < n; ++x) ASSERT_EQ(out[x], in[n - 1 - x] * 2 + 1) << x;
}

TEST(CodegenLLVM, AllocateOnStackAndHeap) {
  Var n("n");
  g_allocs = g_frees = 0;
  Kernel small = compile(alloc_fn(256, n, false), with_test_memory());
  check_alloc(small, 256);
  EXPECT_EQ(g_allocs.load(), 0) << "a 1 KiB buffer belongs on the stack";
  Kernel big = compile(alloc_fn(1 << 20, n, false), with_test_memory());
  check_alloc(big, 1 << 20);
  EXPECT_EQ(g_allocs.load(), 1) << "a 4 MiB buffer belongs on the heap";
  EXPECT_EQ(g_frees.load(), 1);
  Kernel symbolic = compile(alloc_fn(n, n, false), with_test_memory());
  check_alloc(symbolic, 5000);
  EXPECT_EQ(g_allocs.load(), 2);
  EXPECT_EQ(g_frees.load(), 2);
  // The real runtime's workspace.
  check_alloc(compile(alloc_fn(n, n, false)), 70000);
}

TEST(CodegenLLVM, FailingAssertReturnsErrorAndFreesWorkspace) {
  Var n("n");
  g_allocs = g_frees = 0;
  Kernel k = compile(alloc_fn(n, n, true), with_test_memory());
  int32_t len = 100;
  std::vector<float> in(len, -1.f), out(len, 0.f);
  g_last_error.clear();
  EXPECT_NE(k({in.data(), out.data(), &len}), 0);
  EXPECT_EQ(g_last_error, "In[0] must not be negative");
  EXPECT_EQ(g_allocs.load(), 1);
  EXPECT_EQ(g_frees.load(), 1) << "the workspace leaks on the error path";
  EXPECT_EQ(out[0], 0.f);
  // With the real runtime the message is readable through kiln_get_last_error.
  Kernel real = compile(alloc_fn(128, n, true));
  EXPECT_NE(real({in.data(), out.data(), &len}), 0);
  EXPECT_STREQ(kiln_get_last_error(), "In[0] must not be negative");
  in[0] = 1.f;
  EXPECT_EQ(real({in.data(), out.data(), &len}), 0);
}

TEST(CodegenLLVM, IfThenElseStatement) {
  Buffer O = buffer("O", DataType::Int(32), 20);
  Var i("i");
  Stmt s = IfThenElse::make(likely(i < 5), store(O, i * 10, i), IfThenElse::make(i % 2 == 0, store(O, -i, i), store(O, 7, i)));
  Kernel k = compile(PrimFunc::make("ite", {bparam(O)}, loop(i, 20, s)));
  std::vector<int32_t> out(20, 0);
  ASSERT_EQ(k({out.data()}), 0);
  for (int x = 0; x < 20; ++x) EXPECT_EQ(out[x], x < 5 ? x * 10 : x % 2 == 0 ? -x : 7) << x;
}

TEST(CodegenLLVM, IfThenElseIntrinsicSkipsTheUntakenLoad) {
  // In ends exactly where an inaccessible page begins: any read past it faults.
  long page = sysconf(_SC_PAGESIZE);
  char* mem = static_cast<char*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  ASSERT_EQ(mprotect(mem + page, page, PROT_NONE), 0);
  const int n = 100, pad = 28;
  float* in = reinterpret_cast<float*>(mem + page) - n;
  for (int x = 0; x < n; ++x) in[x] = static_cast<float>(x);
  Buffer I = buffer("In", DataType::Float(32), n), O = buffer("Out", DataType::Float(32), n + pad);
  Var i("i"), j("j");
  Stmt scalar = loop(i, n + pad, store(O, if_then_else(i < n, load(I, i), -1.f), i));
  Kernel k = compile(PrimFunc::make("pad", {bparam(I), bparam(O)}, scalar));
  std::vector<float> out(n + pad);
  ASSERT_EQ(k({in, out.data()}), 0);
  for (int x = 0; x < n + pad; ++x) ASSERT_EQ(out[x], x < n ? x : -1.f);
  // Also for whole vectors under a scalar condition.
  Expr idx = Ramp::make(j * 4, 1, 4);
  Stmt vec = loop(j, (n + pad) / 4, store(O, if_then_else(j * 4 < n, load(I, idx), Broadcast::make(-2.f, 4)), idx));
  Kernel kv = compile(PrimFunc::make("padv", {bparam(I), bparam(O)}, vec));
  ASSERT_EQ(kv({in, out.data()}), 0);
  for (int x = 0; x < n + pad; ++x) ASSERT_EQ(out[x], x < n ? x : -2.f);
  munmap(mem, 2 * page);
}

TEST(CodegenLLVM, GatherScatterUnrollAndVectorizedLoops) {
  const int n = 64;
  Buffer A = buffer("A", DataType::Float(32), 4 * n), B = buffer("B", DataType::Float(32), 2 * n), C = buffer("C", DataType::Int(64), n);
  Var i("i"), j("j"), u("u");
  // B[2i] = A[2i + 1] (stride-2 gather and scatter), 4 lanes.
  Stmt gather = loop(i, n / 4, store(B, load(A, Ramp::make(i * 8 + 1, 2, 4)), Ramp::make(i * 8, 2, 4)));
  // C[j] = j * j as int64 in a Vectorized loop, and an unrolled loop that adds u.
  Stmt vec = loop(j, n, store(C, cast(DataType::Int(64), j * j), j), ForKind::Vectorized);
  Stmt unr = loop(u, 4, store(C, load(C, u) + cast(DataType::Int(64), u), u), ForKind::Unrolled);
  // Too long to unroll by hand: a loop with llvm.loop.unroll.full.
  Var w("w");
  Stmt unr_long = loop(w, 200, store(A, load(A, w) + 1.f, w), ForKind::Unrolled);
  Kernel k = compile(PrimFunc::make("gsv", {bparam(A), bparam(B), bparam(C)}, Seq::make({gather, vec, unr, unr_long})));
  std::vector<float> a(4 * n), b(2 * n, -1.f);
  std::vector<int64_t> c(n);
  for (int x = 0; x < 4 * n; ++x) a[x] = static_cast<float>(x);
  ASSERT_EQ(k({a.data(), b.data(), c.data()}), 0);
  for (int x = 0; x < 2 * n; ++x) EXPECT_EQ(b[x], x % 2 == 0 ? x + 1.f : -1.f) << x;
  for (int x = 0; x < 4 * n; ++x) EXPECT_EQ(a[x], x < 200 ? x + 1.f : x) << x;
  for (int x = 0; x < n; ++x) EXPECT_EQ(c[x], int64_t(x) * x + (x < 4 ? x : 0)) << x;
}

TEST(CodegenLLVM, OtherCpuTargetsAndFastMath) {
  // Baseline x86-64 (SSE2 only): no F16C, no SSE4.1 rounding, so half
  // conversions and roundeven become calls that must resolve in the process.
  for (const char* spec : {"llvm -mcpu=x86-64", "llvm -mcpu=x86-64 -mattr=+avx2,+fma", "llvm -mcpu=x86-64 -mattr=+avx2,+fma -fast-math"}) {
    Target t = Target::parse(spec);
    Kernel k = compile(elementwise("ew_t"), {}, t);
    int32_t n = 100;
    std::vector<float> a(n, 2.f), b(n, 3.f), c(n);
    ASSERT_EQ(k({a.data(), b.data(), c.data(), &n}), 0);
    EXPECT_EQ(c[99], 7.5f) << spec;
    Buffer X = buffer("X", DataType::Float(32), 8), H = buffer("H", DataType::Float(16), 8), O = buffer("O", DataType::Float(32), 16);
    Var i("i");
    Expr idx = Ramp::make(i, 1, 8);
    Stmt s = Seq::make({store(O, exp(load(X, idx)) + round(load(X, idx)), idx), store(O, cast(DataType::Float(32, 8), load(H, idx) + load(H, idx)), idx + Broadcast::make(8, 8))});
    Kernel m = compile(PrimFunc::make("m_t", {bparam(X), bparam(H), bparam(O)}, loop(i, 1, s)), {}, t);
    std::vector<float> x = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 0.f, 1.f, 3.7f}, out(16);
    std::vector<uint16_t> h(8, 0x3E00 /* 1.5 */);
    ASSERT_EQ(m({x.data(), h.data(), out.data()}), 0);
    for (int q = 0; q < 8; ++q) EXPECT_NEAR(out[q], std::exp(x[q]) + std::nearbyint(x[q]), 1e-6 * std::exp(x[q]) + 1e-6) << spec << " x=" << x[q];
    for (int q = 8; q < 16; ++q) EXPECT_EQ(out[q], 3.f) << spec;
  }
  std::string ir = codegen::emit_llvm_ir({elementwise("ew_fast")}, Target::parse("llvm -fast-math"), false);
  EXPECT_NE(ir.find("fmul fast"), std::string::npos);
  ir = codegen::emit_llvm_ir({elementwise("ew_strict")}, host(), false);
  EXPECT_NE(ir.find("fmul contract"), std::string::npos);
  EXPECT_EQ(ir.find("fmul fast"), std::string::npos);
}

TEST(CodegenLLVM, ConcurrentBuilds) {
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Kernel k = compile(elementwise("ew_thread" + std::to_string(t)));
      int32_t n = 64;
      std::vector<float> a(n, static_cast<float>(t)), b(n, 2.f), c(n);
      if (k({a.data(), b.data(), c.data(), &n}) == 0 && c[63] == 2.f * t + 1.5f) ++good;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), 4);
}

// ----------------------------------------------------------- errors, output

TEST(CodegenLLVM, UnsupportedIrRaisesErrors) {
  Buffer A2 = Buffer::make("A2", DataType::Float(32), {4, 4});
  Var i("i");
  PrimFunc unflat = PrimFunc::make("unflat", {bparam(A2)}, loop(i, 4, BufferStore::make(A2, 1.f, {i, i})));
  // Unflattened storage breaks the pipeline's invariant (flatten runs first): a kiln bug, not misuse.
  EXPECT_THROW(jit_compile({unflat}, host()), InternalError);
  Buffer A = buffer("A", DataType::Float(32), 4);
  PrimFunc gpu = PrimFunc::make("gpu", {bparam(A)}, For::make(i, 0, 4, ForKind::ThreadBinding, store(A, 1.f, i), "threadIdx.x"));
  EXPECT_THROW(jit_compile({gpu}, host()), Error);
  Var free_var("m");
  PrimFunc unbound = PrimFunc::make("unbound", {bparam(A)}, loop(i, free_var, store(A, 1.f, i)));
  try {
    jit_compile({unbound}, host());
    FAIL() << "no error for an unbound variable";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'m'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(jit_compile({elementwise("twice"), elementwise("twice")}, host()), Error);
  EXPECT_THROW(codegen::emit_object_file({elementwise("x")}, host(), "/nonexistent-dir/x.o"), Error);
  codegen::JitModule m = jit_compile({elementwise("ew2")}, host());
  EXPECT_THROW(m.get_function("nope"), Error);
}

// Cross-compilation: objects for another machine, checked by their ELF header
// (e_machine: 183 AArch64, 62 x86-64); linking them needs that machine's linker.
TEST(CodegenLLVM, CrossCompilesForAArch64) {
  for (auto [target, machine] : {std::pair{"llvm -mtriple=aarch64-linux-gnu", 183}, {"llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1", 183},
                                 {"llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512", 62}}) {
    std::string path = (std::filesystem::temp_directory_path() / ("kiln_cross_" + std::to_string(getpid()) + ".o")).string();
    codegen::emit_object_file({elementwise("ew_cross"), parallel_fn()}, Target::parse(target), path);
    std::ifstream is(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(is)), std::istreambuf_iterator<char>());
    std::filesystem::remove(path);
    ASSERT_GT(bytes.size(), 64u) << target;
    EXPECT_EQ(bytes.substr(0, 4), "\x7f" "ELF") << target;
    EXPECT_EQ(bytes[4], 2) << target << ": ELFCLASS64";
    uint16_t e_type, e_machine;
    std::memcpy(&e_type, bytes.data() + 16, 2);
    std::memcpy(&e_machine, bytes.data() + 18, 2);
    EXPECT_EQ(e_type, 1) << target << ": ET_REL";
    EXPECT_EQ(e_machine, machine) << target;
    EXPECT_NE(bytes.find("ew_cross"), std::string::npos) << target;
  }
  // The host cannot run AArch64 code: building it for this process is refused with a pointer to emit_object_file.
  EXPECT_THROW(jit_compile({elementwise("ew_cross_jit")}, Target::parse("llvm -mtriple=aarch64-linux-gnu")), Error);
}

TEST(CodegenLLVM, EmitsRelocatableObjectFile) {
  std::string path = (std::filesystem::temp_directory_path() / ("kiln_codegen_test_" + std::to_string(getpid()) + ".o")).string();
  codegen::emit_object_file({elementwise("ew_obj"), parallel_fn()}, host(), path);
  std::ifstream is(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(is)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  ASSERT_GT(bytes.size(), 64u);
  EXPECT_EQ(bytes.substr(0, 4), "\x7f" "ELF");
  uint16_t e_type;
  std::memcpy(&e_type, bytes.data() + 16, 2);
  EXPECT_EQ(e_type, 1) << "ET_REL";
  EXPECT_NE(bytes.find("ew_obj"), std::string::npos);
  EXPECT_NE(bytes.find("kiln_parallel_launch"), std::string::npos);
  std::string asm_text = codegen::emit_assembly({elementwise("ew_asm")}, host());
  EXPECT_NE(asm_text.find("ew_asm:"), std::string::npos);
}

TEST(CodegenLLVM, RuntimeModuleChecksAndCalls) {
  Module mod = codegen::build_llvm({elementwise("ew_mod")}, host());
  const KernelInfo& info = mod.info("ew_mod");
  ASSERT_EQ(info.params.size(), 4u);
  EXPECT_TRUE(info.params[0].is_buffer);
  EXPECT_EQ(info.params[0].shape, std::vector<int64_t>{-1});
  EXPECT_FALSE(info.params[3].is_buffer);
  EXPECT_EQ(info.params[3].dtype, DataType::Int(32));
  const int64_t n = 100;
  NDArray a = NDArray::empty({n}, DataType::Float(32)), b = NDArray::empty({n}, DataType::Float(32)), c = NDArray::empty({n}, DataType::Float(32));
  for (int x = 0; x < n; ++x) {
    a.data_as<float>()[x] = static_cast<float>(x);
    b.data_as<float>()[x] = 2.f;
  }
  mod.call("ew_mod", {a, b, c, n});
  for (int x = 0; x < n; ++x) ASSERT_EQ(c.data_as<float>()[x], 2.f * x + 1.5f);
  mod.call("ew_mod", {a, b, c});  // n is inferred from the arrays
  EXPECT_THROW(mod.call("ew_mod", {a, b, c, n + 1}), Error);
}

// ------------------------------------------------------------ build time

TEST(CodegenLLVM, TiledGemmBuildTime) {
  // 256^3 GEMM as a schedule with cache_write would lower it: a 4 x 16 tile
  // accumulates in a local buffer (rows unrolled, two 8-lane vectors per row)
  // that LLVM keeps in registers, then is copied out.
  const int M = 256, N = 256, K = 256;
  Buffer A = buffer("A", DataType::Float(32), M * K), B = buffer("B", DataType::Float(32), K * N), C = buffer("C", DataType::Float(32), M * N);
  Buffer L = Buffer::make("C_local", DataType::Float(32), {64}, "local");
  Var io("io"), jo("jo"), k("k"), ii("ii"), jv("jv"), ii2("ii2"), jv2("jv2"), ii3("ii3"), jv3("jv3");
  auto l_idx = [&](const Var& r, const Var& v) { return Ramp::make(r * 16 + v * 8, 1, 8); };
  auto c_idx = [&](const Var& r, const Var& v) { return Ramp::make((io * 4 + r) * N + jo * 16 + v * 8, 1, 8); };
  auto tile = [](const Var& r, const Var& v, Stmt s) { return loop(r, 4, loop(v, 2, std::move(s), ForKind::Unrolled), ForKind::Unrolled); };
  Stmt init = tile(ii, jv, store(L, Broadcast::make(0.f, 8), l_idx(ii, jv)));
  Expr a = Broadcast::make(load(A, (io * 4 + ii2) * K + k), 8);
  Expr b = load(B, Ramp::make(k * N + jo * 16 + jv2 * 8, 1, 8));
  Stmt update = tile(ii2, jv2, store(L, load(L, l_idx(ii2, jv2)) + a * b, l_idx(ii2, jv2)));
  Stmt out = tile(ii3, jv3, store(C, load(L, l_idx(ii3, jv3)), c_idx(ii3, jv3)));
  Stmt body = loop(io, M / 4, loop(jo, N / 16, Allocate::make(L, Seq::make({init, loop(k, K, update), out}))), ForKind::Parallel);
  PrimFunc f = PrimFunc::make("gemm", {bparam(A), bparam(B), bparam(C)}, body);
  auto t0 = std::chrono::steady_clock::now();
  codegen::JitModule mod = jit_compile({f}, host());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const codegen::BuildTimings& t = mod.timings();
  std::printf("tiled GEMM build: %.1f ms (codegen %.1f, O3 %.1f, machine code %.1f, link %.1f)\n", ms, t.codegen_ms, t.optimize_ms, t.emit_ms, t.link_ms);

  std::vector<float> av(M * K), bv(K * N), cv(M * N);
  for (int x = 0; x < M * K; ++x) av[x] = static_cast<float>((x % 17) - 8) * 0.125f;
  for (int x = 0; x < K * N; ++x) bv[x] = static_cast<float>((x % 13) - 6) * 0.25f;
  KilnKernel fn = mod.get_function("gemm");
  void* args[] = {av.data(), bv.data(), cv.data()};
  ASSERT_EQ(fn(args), 0);
  auto r0 = std::chrono::steady_clock::now();
  const int reps = 10;
  for (int r = 0; r < reps; ++r) fn(args);
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count() / reps;
  std::printf("tiled GEMM run: %.3f ms, %.1f GFLOP/s on %d threads\n", sec * 1e3, 2.0 * M * N * K / sec * 1e-9, kiln_num_threads());
  for (int y = 0; y < M; y += 17) {
    for (int x = 0; x < N; x += 13) {
      double ref = 0;
      for (int z = 0; z < K; ++z) ref += static_cast<double>(av[y * K + z]) * bv[z * N + x];
      ASSERT_NEAR(cv[y * N + x], ref, 1e-3) << y << "," << x;
    }
  }
}

}  // namespace
}  // namespace kiln
