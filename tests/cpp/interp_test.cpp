// Tests of the reference interpreter: hand-built PrimFuncs run on small
// arrays and compared with naive C++ loops written independently here.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/op.h"
#include "kiln/support/error.h"

namespace kiln {
namespace {

const DataType f16 = DataType::Float(16);
const DataType f32 = DataType::Float(32);
const DataType f64 = DataType::Float(64);
const DataType i8 = DataType::Int(8);
const DataType i32 = DataType::Int(32);
const DataType u8 = DataType::UInt(8);

Expr ld(const Buffer& b, std::vector<Expr> idx) { return BufferLoad::make(b, std::move(idx)); }
Stmt st(const Buffer& b, Expr v, std::vector<Expr> idx) { return BufferStore::make(b, std::move(v), std::move(idx)); }
Stmt loop(const Var& v, Expr min, Expr extent, Stmt body, ForKind kind = ForKind::Serial) { return For::make(v, std::move(min), std::move(extent), kind, std::move(body)); }
Param arg(const Buffer& b) { return Param{b->data, b}; }
Param scalar(const Var& v) { return Param{v, Buffer()}; }

// A 1-D view sharing b's data variable, as storage flattening makes it.
Buffer flat(const Buffer& b) { return Buffer(new BufferNode(b.name(), b.dtype(), {b.num_elements()}, {}, b->data, b.scope())); }

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -2, float hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The message of the kiln::Error that interpreting f raises, or "" if none.
std::string error_of(const PrimFunc& f, const std::vector<void*>& args) {
  try {
    interpret(f, args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// -------------------------------------------------------------- arithmetic

TEST(Interp, MatmulWithReductionLoop) {
  const int M = 7, N = 5, K = 9;
  Buffer A = Buffer::make("A", f32, {M, K}), B = Buffer::make("B", f32, {K, N}), C = Buffer::make("C", f32, {M, N});
  Var i("i"), j("j"), k("k");
  Stmt update = loop(k, 0, K, st(C, ld(C, {i, j}) + ld(A, {i, k}) * ld(B, {k, j}), {i, j}));
  Stmt body = loop(i, 0, M, loop(j, 0, N, Seq::make({st(C, 0.0f, {i, j}), update})));
  PrimFunc f = PrimFunc::make("matmul", {arg(A), arg(B), arg(C)}, body);

  std::vector<float> a = random_floats(M * K, 1), b = random_floats(K * N, 2), c(M * N, NAN);
  interpret(f, {a.data(), b.data(), c.data()});
  for (int x = 0; x < M; ++x) {
    for (int y = 0; y < N; ++y) {
      float acc = 0;
      for (int z = 0; z < K; ++z) acc += a[x * K + z] * b[z * N + y];
      // Same float operations in the same order: bit-exact.
      EXPECT_EQ(c[x * N + y], acc) << x << "," << y;
    }
  }
}

TEST(Interp, FlattenedBuffersShareParamStorage) {
  // The body uses new 1-D Buffer nodes that share `data` with the params.
  const int M = 4, K = 6;
  Buffer A = Buffer::make("A", f32, {M, K}), B = Buffer::make("B", f32, {M, K});
  Buffer fa = flat(A), fb = flat(B);
  Var i("i"), k("k");
  Stmt body = loop(i, 0, M, loop(k, 0, K, st(fb, ld(fa, {i * K + k}) * 3.0f, {i * K + k})));
  PrimFunc f = PrimFunc::make("flat", {arg(A), arg(B)}, body);
  std::vector<float> a = random_floats(M * K, 3), b(M * K);
  interpret(f, {a.data(), b.data()});
  for (int x = 0; x < M * K; ++x) EXPECT_EQ(b[x], a[x] * 3.0f);
  // The flat extent is the original's element count.
  Stmt over = st(fb, 1.0f, {M * K});
  EXPECT_TRUE(contains(error_of(PrimFunc::make("over", {arg(A), arg(B)}, over), {a.data(), b.data()}), "[0, 24)"));
}

TEST(Interp, ElementwiseTranscendentalChain) {
  const int n = 257;
  Buffer A = Buffer::make("A", f32, {n}), B = Buffer::make("B", f32, {n});
  Var i("i");
  Expr x = ld(A, {i});
  Stmt body = loop(i, 0, n, st(B, sigmoid(tanh(exp(x * 0.25f)) + erf(x)), {i}));
  PrimFunc f = PrimFunc::make("chain", {arg(A), arg(B)}, body);
  std::vector<float> a = random_floats(n, 4, -4, 4), b(n);
  interpret(f, {a.data(), b.data()});
  for (int k = 0; k < n; ++k) {
    float s = std::tanh(std::exp(a[k] * 0.25f)) + std::erf(a[k]);
    EXPECT_FLOAT_EQ(b[k], 1.0f / (1.0f + std::exp(-s))) << a[k];
  }
}

TEST(Interp, EveryMathIntrinsicInFloat64) {
  const int n = 9;
  const std::vector<double> xs = {-2.5, -1.5, -0.5, 0.25, 0.5, 1.5, 2.5, 3.7, 10.0};
  using Fn = Expr (*)(Expr);
  struct Case {
    Fn build;
    double (*ref)(double);
  };
  // Reference lambdas in plain std:: (round: half to even, as numpy).
  std::vector<Case> cases = {
      {kiln::fabs, [](double v) { return std::fabs(v); }},   {kiln::abs, [](double v) { return std::fabs(v); }},
      {kiln::floor, [](double v) { return std::floor(v); }}, {kiln::ceil, [](double v) { return std::ceil(v); }},
      {kiln::trunc, [](double v) { return std::trunc(v); }}, {kiln::round, [](double v) { return std::nearbyint(v); }},
      {kiln::sin, [](double v) { return std::sin(v); }},     {kiln::cos, [](double v) { return std::cos(v); }},
      {kiln::exp, [](double v) { return std::exp(v); }},     {kiln::tanh, [](double v) { return std::tanh(v); }},
      {kiln::erf, [](double v) { return std::erf(v); }},     {kiln::sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {kiln::log, [](double v) { return std::log(std::fabs(v)); }},
      {kiln::sqrt, [](double v) { return std::sqrt(std::fabs(v)); }},
      {kiln::rsqrt, [](double v) { return 1 / std::sqrt(std::fabs(v)); }},
  };
  const int m = static_cast<int>(cases.size());
  Buffer A = Buffer::make("A", f64, {n}), B = Buffer::make("B", f64, {m + 1, n});
  Var i("i");
  std::vector<Stmt> stores;
  for (int c = 0; c < m; ++c) {
    bool needs_positive = c >= m - 3;  // log, sqrt, rsqrt
    Expr x = needs_positive ? kiln::fabs(ld(A, {i})) : ld(A, {i});
    stores.push_back(st(B, cases[c].build(x), {c, i}));
  }
  stores.push_back(st(B, kiln::pow(ld(A, {i}), Expr(2.0)), {m, i}));
  PrimFunc f = PrimFunc::make("math", {arg(A), arg(B)}, loop(i, 0, n, Seq::make(stores)));
  std::vector<double> b((m + 1) * n);
  interpret(f, {const_cast<double*>(xs.data()), b.data()});
  for (int c = 0; c < m; ++c)
    for (int k = 0; k < n; ++k) EXPECT_DOUBLE_EQ(b[c * n + k], cases[c].ref(xs[k])) << "case " << c << " x=" << xs[k];
  for (int k = 0; k < n; ++k) EXPECT_DOUBLE_EQ(b[m * n + k], xs[k] * xs[k]);
  EXPECT_EQ(b[5 * n + 0], -2.0) << "round(-2.5) is -2 (half to even)";
  EXPECT_EQ(b[5 * n + 6], 2.0) << "round(2.5) is 2 (half to even)";
}

TEST(Interp, Float32RoundsAfterEveryOp) {
  // 1e6 iterations: also keeps the interpreter's speed honest.
  const int n = 1000000;
  Buffer S = Buffer::make("S", f32, {1});
  Var i("i");
  PrimFunc f = PrimFunc::make("sum", {arg(S)}, loop(i, 0, n, st(S, ld(S, {0}) + 0.1f, {0})));
  float s = 0;
  auto start = std::chrono::steady_clock::now();
  interpret(f, {&s});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  float ref = 0;
  for (int k = 0; k < n; ++k) ref += 0.1f;
  EXPECT_EQ(s, ref);
  EXPECT_GT(std::fabs(s - 100000.0f), 1.0f) << "a double accumulator would land near 100000";
  EXPECT_LT(seconds, 10.0) << "1e6 loop iterations took " << seconds << " s";
}

TEST(Interp, FloorAndTruncDivisionWithNegatives) {
  std::vector<int32_t> as, bs;
  for (int a = -9; a <= 9; ++a)
    for (int b : {-4, -3, -2, -1, 1, 2, 3, 4}) as.push_back(a), bs.push_back(b);
  const int n = static_cast<int>(as.size());
  Buffer A = Buffer::make("A", i32, {n}), B = Buffer::make("B", i32, {n}), Q = Buffer::make("Q", i32, {4, n});
  Var i("i");
  Expr a = ld(A, {i}), b = ld(B, {i});
  Stmt body = loop(i, 0, n, Seq::make({st(Q, floordiv(a, b), {0, i}), st(Q, floormod(a, b), {1, i}), st(Q, a / b, {2, i}), st(Q, a % b, {3, i})}));
  PrimFunc f = PrimFunc::make("divs", {arg(A), arg(B), arg(Q)}, body);
  std::vector<int32_t> q(4 * n);
  interpret(f, {as.data(), bs.data(), q.data()});
  for (int k = 0; k < n; ++k) {
    int fd = static_cast<int>(std::floor(static_cast<double>(as[k]) / bs[k]));
    EXPECT_EQ(q[k], fd) << as[k] << " // " << bs[k];
    EXPECT_EQ(q[n + k], as[k] - fd * bs[k]) << as[k] << " mod " << bs[k];
    EXPECT_EQ(q[2 * n + k], static_cast<int>(std::trunc(static_cast<double>(as[k]) / bs[k]))) << as[k] << " / " << bs[k];
    EXPECT_EQ(q[3 * n + k], as[k] - q[2 * n + k] * bs[k]) << as[k] << " % " << bs[k];
  }
}

TEST(Interp, IntegerDivisionByZeroRaises) {
  Buffer A = Buffer::make("A", i32, {2});
  PrimFunc f = PrimFunc::make("div0", {arg(A)}, st(A, floordiv(ld(A, {0}), ld(A, {1})), {0}));
  std::vector<int32_t> a = {7, 0};
  EXPECT_TRUE(contains(error_of(f, {a.data()}), "division by zero"));
  // Float division by zero is IEEE: no error.
  Buffer F = Buffer::make("F", f32, {2});
  std::vector<float> x = {1, 0};
  interpret(PrimFunc::make("fdiv0", {arg(F)}, st(F, ld(F, {0}) / ld(F, {1}), {0})), {x.data()});
  EXPECT_TRUE(std::isinf(x[0]));
}

TEST(Interp, IntegerWraparound) {
  Buffer A8 = Buffer::make("A8", i8, {4}), B8 = Buffer::make("B8", i8, {4});
  Buffer A32 = Buffer::make("A32", i32, {4}), B32 = Buffer::make("B32", i32, {4});
  Buffer U = Buffer::make("U", u8, {4});
  Var i("i");
  Stmt body = loop(i, 0, 4,
                   Seq::make({st(B8, ld(A8, {i}) + ld(A8, {i}), {i}), st(B32, ld(A32, {i}) * 65536 + 2147483647, {i}),
                              st(U, ld(U, {i}) - cast(u8, 1), {i})}));
  PrimFunc f = PrimFunc::make("wrap", {arg(A8), arg(B8), arg(A32), arg(B32), arg(U)}, body);
  std::vector<int8_t> a8 = {100, -100, 127, -128}, b8(4);
  std::vector<int32_t> a32 = {65536, -65536, 1, 32768}, b32(4);
  std::vector<uint8_t> u = {0, 1, 255, 128};
  std::vector<uint8_t> u0 = u;
  interpret(f, {a8.data(), b8.data(), a32.data(), b32.data(), u.data()});
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(b8[k], static_cast<int8_t>(static_cast<uint8_t>(a8[k] * 2))) << k;
    uint32_t ref = static_cast<uint32_t>(a32[k]) * 65536u + 2147483647u;
    EXPECT_EQ(b32[k], static_cast<int32_t>(ref)) << k;
    EXPECT_EQ(u[k], static_cast<uint8_t>(u0[k] - 1)) << k;
  }
}

TEST(Interp, Casts) {
  const std::vector<float> xs = {-2.7f, 2.7f, -0.5f, 300.9f, 0.0f, 1e-3f};
  const int n = static_cast<int>(xs.size());
  Buffer X = Buffer::make("X", f32, {n}), I = Buffer::make("I", i32, {n}), N = Buffer::make("N", i8, {n});
  Buffer W = Buffer::make("W", i32, {n}), U = Buffer::make("U", u8, {n}), F = Buffer::make("F", f32, {n});
  Buffer H = Buffer::make("H", f16, {n}), Bo = Buffer::make("Bo", DataType::Bool(), {n});
  Var i("i");
  Expr as_int = cast(i32, ld(X, {i}));
  Stmt body = loop(i, 0, n,
                   Seq::make({st(I, as_int, {i}),                             // float -> int truncates
                              st(N, cast(i8, as_int), {i}),                   // narrowing keeps the low bits
                              st(W, cast(i32, cast(i8, as_int)), {i}),        // widening sign-extends
                              st(U, cast(u8, as_int), {i}),                   // to unsigned: modulo 256
                              st(F, cast(f32, as_int * 3) / 2.0f, {i}),       // int -> float
                              st(H, cast(f16, ld(X, {i})), {i}),              // float -> half rounds
                              st(Bo, cast(DataType::Bool(), ld(X, {i})), {i})}));
  PrimFunc f = PrimFunc::make("casts", {arg(X), arg(I), arg(N), arg(W), arg(U), arg(F), arg(H), arg(Bo)}, body);
  std::vector<int32_t> ii(n), w(n);
  std::vector<int8_t> nn(n);
  std::vector<uint8_t> uu(n), bo(n);
  std::vector<float> ff(n);
  std::vector<uint16_t> hh(n);
  interpret(f, {const_cast<float*>(xs.data()), ii.data(), nn.data(), w.data(), uu.data(), ff.data(), hh.data(), bo.data()});
  const std::vector<uint16_t> half_bits = {0xC166, 0x4166, 0xB800, 0x5CB4, 0x0000, 0x1419};  // Python: struct.pack("<e", x)
  for (int k = 0; k < n; ++k) {
    int t = static_cast<int>(xs[k]);
    EXPECT_EQ(ii[k], t) << xs[k];
    EXPECT_EQ(nn[k], static_cast<int8_t>(t)) << xs[k];
    EXPECT_EQ(w[k], static_cast<int8_t>(t)) << xs[k];
    EXPECT_EQ(uu[k], static_cast<uint8_t>(t)) << xs[k];
    EXPECT_EQ(ff[k], static_cast<float>(t * 3) / 2.0f) << xs[k];
    EXPECT_EQ(hh[k], half_bits[k]) << xs[k];
    EXPECT_EQ(bo[k], xs[k] != 0 ? 1 : 0) << xs[k];
  }
  EXPECT_EQ(nn[3], 44) << "300 as int8 is 300 - 256";
}

// ------------------------------------------------------------------ vectors

TEST(Interp, VectorRampLoadsAndStores) {
  const int n = 64, L = 8;
  Buffer A = Buffer::make("A", f32, {n}), B = Buffer::make("B", f32, {n}), R = Buffer::make("R", f32, {n});
  Buffer M = Buffer::make("M", f32, {n / L, L});
  Var io("io");
  Expr idx = Ramp::make(io * L, 1, L);
  Expr lane = cast(DataType::Float(32, L), Ramp::make(0, 1, L));
  Expr va = ld(A, {idx});
  Stmt body = loop(io, 0, n / L,
                   Seq::make({st(B, va * 2.0f + lane, {idx}),
                              st(R, ld(A, {Ramp::make((n - 1) - io * L, -1, L)}), {idx}),  // reversed gather
                              st(M, select(va > 0.0f, va, -va), {io, Ramp::make(0, 1, L)})}));  // 2-D with a vector index
  PrimFunc f = PrimFunc::make("vec", {arg(A), arg(B), arg(R), arg(M)}, body);
  std::vector<float> a = random_floats(n, 5), b(n), r(n), m(n);
  interpret(f, {a.data(), b.data(), r.data(), m.data()});
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(b[k], a[k] * 2.0f + static_cast<float>(k % L)) << k;
    EXPECT_EQ(r[k], a[n - 1 - k]) << k;
    EXPECT_EQ(m[k], std::fabs(a[k])) << k;
  }
}

TEST(Interp, VectorStoreOutOfBoundsNamesLane) {
  Buffer A = Buffer::make("A", f32, {10});
  Var io("io");
  PrimFunc f = PrimFunc::make("vec_oob", {arg(A)}, loop(io, 0, 2, st(A, Broadcast::make(1.0f, 8), {Ramp::make(io * 8, 1, 8)})));
  std::vector<float> a(10);
  std::string msg = error_of(f, {a.data()});
  EXPECT_TRUE(contains(msg, "'A'") && contains(msg, "index 10") && contains(msg, "[0, 10)")) << msg;
}

// ---------------------------------------------------------- memory, control

TEST(Interp, AllocatedTemporary) {
  const int n = 16;
  Buffer A = Buffer::make("A", f32, {n}), B = Buffer::make("B", f32, {n});
  Buffer T = Buffer::make("T", f32, {n}, "local");
  Var i("i"), j("j");
  Stmt body = Allocate::make(T, Seq::make({loop(i, 0, n, st(T, ld(A, {i}) * 2.0f, {i})), loop(j, 0, n, st(B, ld(T, {n - 1 - j}) + 1.0f, {j}))}));
  PrimFunc f = PrimFunc::make("temp", {arg(A), arg(B)}, body);
  std::vector<float> a = random_floats(n, 6), b(n);
  interpret(f, {a.data(), b.data()});
  for (int k = 0; k < n; ++k) EXPECT_EQ(b[k], a[n - 1 - k] * 2.0f + 1.0f);
  // An allocation is gone after its Allocate: using it outside is an error.
  PrimFunc g = PrimFunc::make("escape", {arg(A), arg(B)}, Seq::make({Allocate::make(T, make_nop()), st(T, 1.0f, {0})}));
  EXPECT_TRUE(contains(error_of(g, {a.data(), b.data()}), "'T'"));
}

TEST(Interp, UninitialisedAllocationReadsAsNaN) {
  Buffer B = Buffer::make("B", f32, {4});
  Buffer T = Buffer::make("T", f32, {4}, "local");
  Var i("i");
  PrimFunc f = PrimFunc::make("uninit", {arg(B)}, Allocate::make(T, loop(i, 0, 4, st(B, ld(T, {i}) + 1.0f, {i}))));
  std::vector<float> b(4, 0);
  interpret(f, {b.data()});
  for (float x : b) EXPECT_TRUE(std::isnan(x));
}

TEST(Interp, IfThenElsePaddingSkipsUntakenBranch) {
  const int n = 12, pad = 2, total = n + 2 * pad;
  Buffer A = Buffer::make("A", f32, {n}), B = Buffer::make("B", f32, {total});
  Var i("i");
  Expr inside = i >= pad && i < n + pad;
  PrimFunc f = PrimFunc::make("pad", {arg(A), arg(B)}, loop(i, 0, total, st(B, if_then_else(inside, ld(A, {i - pad}), -1.0f), {i})));
  std::vector<float> a = random_floats(n, 7), b(total);
  interpret(f, {a.data(), b.data()});
  for (int k = 0; k < total; ++k) EXPECT_EQ(b[k], (k >= pad && k < n + pad) ? a[k - pad] : -1.0f) << k;
  // Select evaluates both sides, so the same padding with select reads out of bounds.
  PrimFunc g = PrimFunc::make("pad_select", {arg(A), arg(B)}, loop(i, 0, total, st(B, select(inside, ld(A, {i - pad}), -1.0f), {i})));
  std::string msg = error_of(g, {a.data(), b.data()});
  EXPECT_TRUE(contains(msg, "'A'") && contains(msg, "index -2")) << msg;
}

TEST(Interp, VectorIfThenElseMasksLoads) {
  const int n = 12, pad = 2, L = 8, total = 16;
  Buffer A = Buffer::make("A", f32, {n}), B = Buffer::make("B", f32, {total});
  Var io("io");
  Expr idx = Ramp::make(io * L, 1, L);
  Expr cond = idx >= pad && idx < n + pad;
  Expr v = Call::make(DataType::Float(32, L), Intrinsic::IfThenElse, {cond, ld(A, {idx - pad}), Broadcast::make(-1.0f, L)});
  PrimFunc f = PrimFunc::make("vpad", {arg(A), arg(B)}, loop(io, 0, total / L, st(B, v, {idx})));
  std::vector<float> a = random_floats(n, 8), b(total);
  interpret(f, {a.data(), b.data()});
  for (int k = 0; k < total; ++k) EXPECT_EQ(b[k], (k >= pad && k < n + pad) ? a[k - pad] : -1.0f) << k;
}

TEST(Interp, ControlFlowLetsAndLoopKinds) {
  const int n = 20;
  Buffer B = Buffer::make("B", i32, {n});
  Var i("i"), t("t"), u("u");
  Stmt then_case = st(B, Let::make(u, t + 1, u * u), {i});
  Stmt else_case = st(B, -t, {i});
  Stmt body = AttrStmt::make("pragma_unroll", 0, LetStmt::make(t, i * 3, IfThenElse::make(floormod(t, 2) == 0, then_case, else_case)));
  for (ForKind kind : {ForKind::Serial, ForKind::Parallel, ForKind::Vectorized, ForKind::Unrolled}) {
    PrimFunc f = PrimFunc::make("ctl", {arg(B)}, Seq::make({Evaluate::make(0), loop(i, 0, n, body, kind)}));
    std::vector<int32_t> b(n, 0);
    interpret(f, {b.data()});
    for (int k = 0; k < n; ++k) EXPECT_EQ(b[k], (3 * k) % 2 == 0 ? (3 * k + 1) * (3 * k + 1) : -3 * k) << for_kind_name(kind) << " " << k;
  }
}

TEST(Interp, SymbolicShapesAndScalarParams) {
  Var n("n"), alpha("alpha", f64);
  Buffer A = Buffer::make("A", f64, {n}), B = Buffer::make("B", f64, {n});
  Var i("i");
  Stmt body = loop(i, 0, n, st(B, ld(A, {i}) * alpha + cast(f64, n), {i}));
  PrimFunc f = PrimFunc::make("axpn", {scalar(n), scalar(alpha), arg(A), arg(B)}, body);
  int32_t nv = 5;
  double av = 1.5;
  std::vector<double> a = {1, 2, 3, 4, 5}, b(5);
  interpret(f, {&nv, &av, a.data(), b.data()});
  for (int k = 0; k < 5; ++k) EXPECT_EQ(b[k], a[k] * 1.5 + 5);
  // The extent of A comes from n: one element past it is caught.
  PrimFunc g = PrimFunc::make("over", {scalar(n), scalar(alpha), arg(A), arg(B)}, loop(i, 0, n + 1, st(B, ld(A, {i}), {i})));
  std::string msg = error_of(g, {&nv, &av, a.data(), b.data()});
  EXPECT_TRUE(contains(msg, "'A'") && contains(msg, "index 5") && contains(msg, "[0, 5)")) << msg;
}

// ------------------------------------------------------------------ errors

TEST(Interp, FailedAssertRaisesItsMessage) {
  Var n("n");
  Buffer B = Buffer::make("B", i32, {4});
  PrimFunc f = PrimFunc::make("checked", {scalar(n), arg(B)}, AssertStmt::make(n > 0, "n must be positive", st(B, n, {0})));
  std::vector<int32_t> b(4, 0);
  int32_t ok = 3, bad = 0;
  interpret(f, {&ok, b.data()});
  EXPECT_EQ(b[0], 3);
  std::string msg = error_of(f, {&bad, b.data()});
  EXPECT_TRUE(contains(msg, "n must be positive") && contains(msg, "checked")) << msg;
}

TEST(Interp, OutOfBoundsStoreNamesBuffer) {
  Buffer B = Buffer::make("Bout", f32, {4});
  Var i("i");
  PrimFunc f = PrimFunc::make("oob", {arg(B)}, loop(i, 0, 5, st(B, 1.0f, {i})));
  std::vector<float> b(4, 0);
  std::string msg = error_of(f, {b.data()});
  EXPECT_TRUE(contains(msg, "'Bout'") && contains(msg, "index 4") && contains(msg, "[0, 4)")) << msg;
  EXPECT_EQ(b[3], 1.0f) << "stores before the bad one happened";
}

TEST(Interp, MultiDimensionalIndexCheckedPerDimension) {
  // [0, 5] of a 2x3 buffer is flat offset 5, inside the storage, but column 5 does not exist.
  Buffer A = Buffer::make("A2", f32, {2, 3});
  PrimFunc f = PrimFunc::make("dim", {arg(A)}, st(A, 1.0f, {0, 5}));
  std::vector<float> a(6);
  std::string msg = error_of(f, {a.data()});
  EXPECT_TRUE(contains(msg, "'A2'") && contains(msg, "dimension 1") && contains(msg, "[0, 3)")) << msg;
}

// A stand-in for a te Tensor, to build a TensorLoad.
struct FakeTensor : public ProducerNode {
  FakeTensor(std::string n, std::vector<Expr> s) : name(std::move(n)), shape(std::move(s)) {}
  const std::string& producer_name() const override { return name; }
  DataType producer_dtype() const override { return DataType::Float(32); }
  const std::vector<Expr>& producer_shape() const override { return shape; }
  std::string name;
  std::vector<Expr> shape;
};

TEST(Interp, UnloweredFunctionsAreRejected) {
  Buffer B = Buffer::make("B", f32, {1});
  std::vector<float> b(1);
  Expr tload = TensorLoad::make(new FakeTensor("T", {4}), {0});
  std::string msg = error_of(PrimFunc::make("tl", {arg(B)}, st(B, tload, {0})), {b.data()});
  EXPECT_TRUE(contains(msg, "not lowered") && contains(msg, "'T'")) << msg;
  IterVar k(Var("k"), Range(0, 4), IterVarKind::Reduce);
  Expr red = Reduce::make(ReduceKind::Sum, cast(f32, k.var()), {k});
  msg = error_of(PrimFunc::make("red", {arg(B)}, st(B, red, {0})), {b.data()});
  EXPECT_TRUE(contains(msg, "not lowered")) << msg;
}

TEST(Interp, UnboundVariableAndBadArguments) {
  Buffer B = Buffer::make("B", i32, {1});
  Var q("q");
  PrimFunc f = PrimFunc::make("unbound", {arg(B)}, st(B, q + 1, {0}));
  std::vector<int32_t> b(1);
  EXPECT_TRUE(contains(error_of(f, {b.data()}), "'q'"));
  EXPECT_TRUE(contains(error_of(f, {}), "1 arguments"));
  EXPECT_TRUE(contains(error_of(f, {nullptr}), "null"));
}

}  // namespace
}  // namespace kiln
