// Lowering: schedules of the common ops, run through the reference
// interpreter, against naive loops.
#include <gtest/gtest.h>

#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/nn.h"
#include "kiln/te/lower.h"
#include "reference_ops.h"
#include "test_util.h"

namespace kiln {
namespace {

using te::Schedule;
using te::Tensor;
using testing::all_close;
using testing::run_backends;
using testing::random_vector;
namespace ref = testing::ref;

constexpr int M = 37, N = 29, K = 23;

struct Matmul {
  Tensor A = te::placeholder({M, K}, DataType::Float(32), "A");
  Tensor B = te::placeholder({K, N}, DataType::Float(32), "B");
  Tensor C = ops::matmul(A, B);
  std::vector<float> a = random_vector(M * K, 1), b = random_vector(K * N, 2), want = ref::matmul(a, b, M, N, K);

  ::testing::AssertionResult check(const Schedule& s) {
    PrimFunc f = te::lower(s, {A, B, C}, "matmul");
    std::vector<float> c(M * N, 12345.f);
    run_backends(f, {&a, &b, &c});
    return all_close(c, want);
  }
};

TEST(LowerMatmul, Default) {
  Matmul mm;
  EXPECT_TRUE(mm.check(te::create_schedule({mm.C})));
}

TEST(LowerMatmul, NonDividingSplitsVectorizeUnroll) {
  Matmul mm;
  Schedule s = te::create_schedule({mm.C});
  auto& st = s[mm.C];
  auto [io, ii] = st.split(st.axis("i"), 8);
  auto [jo, ji] = st.split(st.axis("j"), 4);
  auto [ko, ki] = st.split(st.axis("k"), 5);
  st.reorder({io, jo, ko, ki, ii, ji});
  st.vectorize(ji);
  st.unroll(ii);
  st.parallel(io);
  EXPECT_TRUE(mm.check(s));
}

TEST(LowerMatmul, SplitNpartsFuse) {
  Matmul mm;
  Schedule s = te::create_schedule({mm.C});
  auto& st = s[mm.C];
  auto [jo, ji] = st.split_nparts(st.axis("j"), 3);
  IterVar f = st.fuse(st.axis("i"), jo);
  st.parallel(f);
  (void)ji;
  EXPECT_TRUE(mm.check(s));
}

TEST(LowerMatmul, CacheWriteComputeAt) {
  Matmul mm;
  Schedule s = te::create_schedule({mm.C});
  Tensor CL = s.cache_write(mm.C, "local");
  auto& st = s[mm.C];
  auto tiles = st.tile(st.axis("i"), st.axis("j"), 8, 8);
  s[CL].compute_at(st, tiles[1]);
  auto& cl = s[CL];
  auto [ko, ki] = cl.split(cl.axis("k"), 4);
  cl.reorder({ko, ki, cl.axis("i"), cl.axis("j")});
  cl.vectorize(cl.axis("j"));
  EXPECT_TRUE(mm.check(s));
}

TEST(LowerMatmul, CacheReadComputeAt) {
  Matmul mm;
  Schedule s = te::create_schedule({mm.C});
  Tensor AL = s.cache_read(mm.A, "local", {mm.C});
  Tensor BL = s.cache_read(mm.B, "local", {mm.C});
  auto& st = s[mm.C];
  auto [io, ii] = st.split(st.axis("i"), 4);
  auto [ko, ki] = st.split(st.axis("k"), 6);
  st.reorder({io, ko, ii, st.axis("j"), ki});
  s[AL].compute_at(st, ko);
  s[BL].compute_at(st, ko);
  EXPECT_TRUE(mm.check(s));
}

TEST(LowerMatmul, Rfactor) {
  Matmul mm;
  Schedule s = te::create_schedule({mm.C});
  auto& st = s[mm.C];
  auto [ko, ki] = st.split(st.axis("k"), 4);
  Tensor CF = s.rfactor(mm.C, ki);
  EXPECT_EQ(CF.ndim(), 3);
  auto& rf = s[CF];
  rf.vectorize(rf.axis("j"));
  EXPECT_TRUE(mm.check(s));
  // Factor axis last, on the outer part of the split.
  Matmul mm2;
  Schedule s2 = te::create_schedule({mm2.C});
  auto& st2 = s2[mm2.C];
  auto [ko2, ki2] = st2.split(st2.axis("k"), 4);
  (void)ki2;
  s2.rfactor(mm2.C, ko2, 2);
  EXPECT_TRUE(mm2.check(s2));
}

TEST(LowerMatmul, PackedOperandRegisterTile) {
  // The cpu_gemm structure on the plain matmul DAG: B packed into panels of 8
  // columns, an accumulator tile in a local stage, vector loads from the panel.
  const int m = 20, n = 24, k = 9;
  Tensor A = te::placeholder({m, k}, DataType::Float(32), "A"), B = te::placeholder({k, n}, DataType::Float(32), "B");
  Tensor C = ops::matmul(A, B);
  auto a = random_vector(m * k, 21), b = random_vector(k * n, 22);
  auto want = ref::matmul(a, b, m, n, k);
  Schedule s = te::create_schedule({C});
  Tensor BP = s.pack(B, {C}, 1, 8);
  EXPECT_EQ(to_string(BP.shape()[0]) + "," + to_string(BP.shape()[1]) + "," + to_string(BP.shape()[2]), "3,9,8");
  Tensor CL = s.cache_write(C, "local");
  auto& st = s[C];
  auto t = st.tile(st.axis("i"), st.axis("j"), 4, 8);
  st.reorder({t[1], t[0], t[2], t[3]});
  IterVar block = st.fuse(t[1], t[0]);
  st.parallel(block);
  st.vectorize(t[3]);
  s[CL].compute_at(st, block);
  auto& cl = s[CL];
  cl.reorder({cl.axis("k"), cl.axis("i"), cl.axis("j")});
  cl.unroll(cl.axis("i"));
  cl.vectorize(cl.axis("j"));
  s[BP].vectorize(s[BP].axis("ax2"));
  std::vector<float> c(m * n);
  run_backends(te::lower(s, {A, B, C}), {&a, &b, &c});
  EXPECT_TRUE(all_close(c, want));
  // The trace replays, pack included.
  Schedule r = Schedule::from_trace({C}, te::Trace::from_json(s.trace().to_json()));
  std::vector<float> c2(m * n);
  run_backends(te::lower(r, {A, B, C}), {&a, &b, &c2});
  EXPECT_TRUE(all_close(c2, want));
}

TEST(LowerOps, BatchMatmul) {
  const int Bn = 3, m = 9, n = 10, k = 7;
  Tensor A = te::placeholder({Bn, m, k}, DataType::Float(32), "A"), B = te::placeholder({Bn, k, n}, DataType::Float(32), "B");
  Tensor C = ops::batch_matmul(A, B);
  auto a = random_vector(Bn * m * k, 3), b = random_vector(Bn * k * n, 4);
  auto want = ref::batch_matmul(a, b, Bn, m, n, k);
  Schedule s = te::create_schedule({C});
  auto& st = s[C];
  IterVar bi = st.fuse(st.axis("b"), st.axis("i"));
  auto [jo, ji] = st.split(st.axis("j"), 4);
  st.reorder({bi, jo, st.axis("k"), ji});
  st.parallel(bi);
  st.vectorize(ji);
  std::vector<float> c(Bn * m * n);
  run_backends(te::lower(s, {A, B, C}), {&a, &b, &c});
  EXPECT_TRUE(all_close(c, want));
}

struct Conv {
  ref::ConvShape cs;
  Tensor X, W, P, O;
  std::vector<float> x, w, want;
  explicit Conv(ref::ConvShape shape) : cs(shape) {
    X = te::placeholder({cs.N, cs.C, cs.H, cs.W}, DataType::Float(32), "X");
    W = te::placeholder({cs.K, cs.C, cs.KH, cs.KW}, DataType::Float(32), "W");
    O = ops::conv2d_nchw(X, W, cs.stride, cs.pad, cs.dilation, "conv", &P);
    x = random_vector(cs.N * cs.C * cs.H * cs.W, 5);
    w = random_vector(cs.K * cs.C * cs.KH * cs.KW, 6);
    want = ref::conv2d(x, w, cs);
  }
  ::testing::AssertionResult check(const Schedule& s) {
    std::vector<float> o(want.size(), -777.f);
    run_backends(te::lower(s, {X, W, O}, "conv"), {&x, &w, &o});
    return all_close(o, want);
  }
};

TEST(LowerConv, InlinedPadding) {
  for (ref::ConvShape cs : {ref::ConvShape{1, 3, 9, 9, 4, 3, 3, 1, 1, 1}, ref::ConvShape{2, 2, 10, 11, 3, 3, 3, 2, 1, 1}, ref::ConvShape{1, 2, 12, 12, 2, 3, 3, 1, 2, 2}}) {
    Conv cv(cs);
    Schedule s = te::create_schedule({cv.O});
    s[cv.P].compute_inline();
    auto& st = s[cv.O];
    auto [xo, xi] = st.split(st.axis("x"), 4);
    st.reorder({st.axis("n"), st.axis("f"), st.axis("y"), xo, st.axis("rc"), st.axis("ry"), st.axis("rx"), xi});
    st.vectorize(xi);
    EXPECT_TRUE(cv.check(s)) << "stride " << cs.stride << " dilation " << cs.dilation;
  }
}

TEST(LowerConv, PaddingComputeAtAndRoot) {
  Conv cv({1, 3, 9, 9, 4, 3, 3, 1, 1, 1});
  Schedule s = te::create_schedule({cv.O});
  auto& st = s[cv.O];
  auto [yo, yi] = st.split(st.axis("y"), 3);
  (void)yi;
  s[cv.P].compute_at(st, yo);
  EXPECT_TRUE(cv.check(s));
  Schedule root = te::create_schedule({cv.O});
  EXPECT_TRUE(cv.check(root));
}

TEST(LowerConv, CacheWriteTiled) {
  Conv cv({1, 4, 8, 8, 8, 3, 3, 1, 1, 1});
  Schedule s = te::create_schedule({cv.O});
  Tensor OL = s.cache_write(cv.O, "local");
  s[cv.P].compute_inline();
  auto& st = s[cv.O];
  auto [fo, fi] = st.split(st.axis("f"), 4);
  auto [xo, xi] = st.split(st.axis("x"), 4);
  st.reorder({st.axis("n"), fo, st.axis("y"), xo, fi, xi});
  s[OL].compute_at(st, xo);
  auto& ol = s[OL];
  ol.reorder({ol.axis("n"), ol.axis("rc"), ol.axis("ry"), ol.axis("rx"), ol.axis("f"), ol.axis("y"), ol.axis("x")});
  ol.vectorize(ol.axis("x"));
  EXPECT_TRUE(cv.check(s));
}

TEST(LowerOps, DepthwiseConv) {
  const int n = 1, c = 3, h = 10, w = 9;
  Tensor X = te::placeholder({n, c, h, w}, DataType::Float(32), "X"), W = te::placeholder({c, 1, 3, 3}, DataType::Float(32), "W");
  Tensor P;
  Tensor O = ops::depthwise_conv2d_nchw(X, W, 2, 1, "dw", &P);
  auto x = random_vector(n * c * h * w, 7), wt = random_vector(c * 9, 8);
  auto want = ref::depthwise_conv2d(x, wt, n, c, h, w, 3, 3, 2, 1);
  Schedule s = te::create_schedule({O});
  s[P].compute_inline();
  auto& st = s[O];
  st.fuse(st.axis("n"), st.axis("c"));
  std::vector<float> o(want.size());
  run_backends(te::lower(s, {X, W, O}), {&x, &wt, &o});
  EXPECT_TRUE(all_close(o, want));
}

TEST(LowerOps, Pooling) {
  const int n = 2, c = 2, h = 9, w = 8;
  Tensor X = te::placeholder({n, c, h, w}, DataType::Float(32), "X");
  Tensor MP = ops::max_pool2d(X, 3, 2, 1);
  Tensor AP = ops::avg_pool2d(X, 2, 2);
  auto x = random_vector(n * c * h * w, 9);
  auto want_m = ref::max_pool2d(x, n, c, h, w, 3, 2, 1), want_a = ref::avg_pool2d(x, n, c, h, w, 2, 2);
  Schedule s = te::create_schedule({MP, AP});
  auto& sm = s[MP];
  auto [xo, xi] = sm.split(sm.axis("x"), 2);
  (void)xo;
  sm.unroll(xi);
  s[AP.op()->input_tensors()[0]].compute_at(s[AP], s[AP].axis("y"));
  std::vector<float> om(want_m.size()), oa(want_a.size());
  run_backends(te::lower(s, {X, MP, AP}), {&x, &om, &oa});
  EXPECT_TRUE(all_close(om, want_m));
  EXPECT_TRUE(all_close(oa, want_a));
}

TEST(LowerOps, Softmax) {
  const int m = 5, n = 19;
  Tensor X = te::placeholder({m, n}, DataType::Float(32), "X");
  Tensor S = ops::softmax(X);
  auto x = random_vector(m * n, 10, -3, 3);
  auto want = ref::softmax(x, m, n);
  // Default, then every stage computed inside the row loop of the output.
  for (int variant = 0; variant < 2; ++variant) {
    Schedule s = te::create_schedule({S});
    if (variant == 1) {
      auto& out = s[S];
      for (int st = 0; st < s.num_stages(); ++st) {
        te::Stage& stage = s.stage(st);
        if (stage.is_placeholder() || &stage == &out) continue;
        stage.compute_at(out, out.axis("i"));
      }
      auto [jo, ji] = out.split(out.axis("j"), 8);
      (void)jo;
      out.vectorize(ji);
    }
    std::vector<float> o(m * n);
    run_backends(te::lower(s, {X, S}), {&x, &o});
    EXPECT_TRUE(all_close(o, want, 1e-5f)) << "variant " << variant;
  }
}

TEST(LowerOps, LayerNorm) {
  const int m = 6, n = 21;
  Tensor X = te::placeholder({m, n}, DataType::Float(32), "X"), G = te::placeholder({n}, DataType::Float(32), "G"), Bt = te::placeholder({n}, DataType::Float(32), "Bt");
  Tensor L = ops::layer_norm(X, G, Bt, 1e-5f);
  auto x = random_vector(m * n, 11), g = random_vector(n, 12), b = random_vector(n, 13);
  auto want = ref::layer_norm(x, g, b, m, n, 1e-5f);
  Schedule s = te::create_schedule({L});
  auto& out = s[L];
  auto [io, ii] = out.split(out.axis("i"), 4);
  (void)ii;
  out.parallel(io);
  std::vector<float> o(m * n);
  run_backends(te::lower(s, {X, G, Bt, L}), {&x, &g, &b, &o});
  EXPECT_TRUE(all_close(o, want, 1e-4f));
}

TEST(LowerOps, TransposeTiled) {
  const int m = 13, n = 17;
  Tensor X = te::placeholder({m, n}, DataType::Float(32), "X");
  Tensor T = ops::transpose(X);
  auto x = random_vector(m * n, 14);
  auto want = ref::transpose(x, m, n);
  Schedule s = te::create_schedule({T});
  auto& st = s[T];
  st.tile(st.axis("i"), st.axis("j"), 4, 8);
  std::vector<float> o(m * n);
  run_backends(te::lower(s, {X, T}), {&x, &o});
  EXPECT_TRUE(all_close(o, want, 0));
}

TEST(LowerOps, ElementwiseChain) {
  const int m = 7, n = 33;
  Tensor X = te::placeholder({m, n}, DataType::Float(32), "X"), Bias = te::placeholder({n}, DataType::Float(32), "bias");
  Tensor A = ops::bias_add(X, Bias), G = ops::gelu(A), R = ops::relu(G);
  Tensor E = te::compute({m, n}, [&](const std::vector<Var>& i) { return kiln::exp(R(i[0], i[1])) * kiln::tanh(R(i[0], i[1])) + kiln::sigmoid(A(i[0], i[1])); }, "E");
  auto x = random_vector(m * n, 15), bias = random_vector(n, 16);
  std::vector<float> want(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double a = x[i * n + j] + bias[j];
      double g = a * 0.5 * (1 + std::erf(a * 0.70710678));
      double r = std::max(g, 0.0);
      want[i * n + j] = float(std::exp(r) * std::tanh(r) + 1 / (1 + std::exp(-a)));
    }
  for (int variant = 0; variant < 3; ++variant) {
    Schedule s = te::create_schedule({E});
    if (variant == 1) {
      s[A].compute_inline();
      s[G].compute_inline();
      s[R].compute_inline();
    } else if (variant == 2) {
      auto& e = s[E];
      auto [jo, ji] = e.split(e.axis("j"), 8);
      s[R].compute_at(e, jo);
      s[G].compute_inline();
      e.vectorize(ji);
    }
    std::vector<float> o(m * n);
    run_backends(te::lower(s, {X, Bias, E}), {&x, &bias, &o});
    EXPECT_TRUE(all_close(o, want, 1e-5f)) << "variant " << variant;
  }
}

// A Hillis-Steele scan step as kiln.GatherGrad writes it: each element adds
// the one `step` back when a condition holds, its index clamped at 0. With
// the 2-long sum unrolled, the simplifier knows `2 <= i` in the added value;
// the vector select still loads every lane, so the clamp must stay (it was
// dropped: lanes 0 and 1 loaded A[-2] and A[-1], and LLVM, free to assume an
// in-bounds load, miscompiled the whole row).
TEST(LowerSelect, ClampedLoadUnderUnrolledConditionStaysInBounds) {
  constexpr int n = 32, step = 2;
  Tensor A = te::placeholder({n}, DataType::Float(32), "A");
  Tensor B = te::compute({n}, [&](const std::vector<Var>& i) {
    IterVar t = te::reduce_axis(Range(0, 2), "t");
    Expr tv = t.var(), iv = i[0];
    Expr take = tv == 0 || (iv >= step && A(max(iv - step, 0)) > 0.f);
    return te::sum(select(take, A(max(iv - tv * step, 0)), make_zero(DataType::Float(32))), {t});
  }, "B");
  Schedule s = te::create_schedule({B});
  auto& st = s[B];
  st.reorder({st.axis("t"), st.axis("i")});
  st.unroll(st.axis("t"));
  st.vectorize(st.axis("i"));
  std::vector<float> a = random_vector(n, 7), b(n), want(n);
  for (int i = 0; i < n; ++i) want[i] = a[i] + (i >= step && a[i - step] > 0.f ? a[i - step] : 0.f);
  run_backends(te::lower(s, {A, B}), {&a, &b});
  EXPECT_TRUE(all_close(b, want));
}

}  // namespace
}  // namespace kiln
