// Property test: random valid schedules of matmul and conv2d compute the
// same results as the unscheduled function (through the interpreter).
#include <gtest/gtest.h>

#include <functional>

#include "kiln/ir/op.h"
#include "kiln/ops/nn.h"
#include "kiln/te/lower.h"
#include "random_schedule.h"
#include "reference_ops.h"
#include "test_util.h"

namespace kiln {
namespace {

using te::Schedule;
using te::Tensor;

TEST(RandomTrace, MatmulMatchesReference) {
  const int m = 11, n = 13, k = 7;
  Tensor A = te::placeholder({m, k}, DataType::Float(32), "A"), B = te::placeholder({k, n}, DataType::Float(32), "B");
  Tensor C = ops::matmul(A, B);
  auto a = testing::random_vector(m * k, 1), b = testing::random_vector(k * n, 2);
  auto want = testing::ref::matmul(a, b, m, n, k);
  for (uint32_t seed = 0; seed < 200; ++seed) {
    Schedule s = te::create_schedule({C});
    testing::random_schedule(s, C, {}, seed);
    // The trace replays to the same schedule.
    Schedule r = Schedule::from_trace({C}, te::Trace::from_json(s.trace().to_json()));
    std::vector<float> c(m * n, 99.f);
    testing::run_backends(te::lower(r, {A, B, C}), {&a, &b, &c});
    ASSERT_TRUE(testing::all_close(c, want)) << "seed " << seed << "\n" << s.trace().str();
  }
}

TEST(RandomTrace, Conv2dMatchesReference) {
  testing::ref::ConvShape cs{1, 2, 7, 6, 3, 3, 3, 1, 1, 1};
  Tensor X = te::placeholder({cs.N, cs.C, cs.H, cs.W}, DataType::Float(32), "X");
  Tensor W = te::placeholder({cs.K, cs.C, cs.KH, cs.KW}, DataType::Float(32), "W");
  Tensor P;
  Tensor O = ops::conv2d_nchw(X, W, 1, 1, 1, "conv", &P);
  auto x = testing::random_vector(cs.N * cs.C * cs.H * cs.W, 3), w = testing::random_vector(cs.K * cs.C * 9, 4);
  auto want = testing::ref::conv2d(x, w, cs);
  for (uint32_t seed = 0; seed < 200; ++seed) {
    Schedule s = te::create_schedule({O});
    testing::random_schedule(s, O, {P}, seed + 1000);
    std::vector<float> o(want.size(), 99.f);
    testing::run_backends(te::lower(s, {X, W, O}), {&x, &w, &o});
    ASSERT_TRUE(testing::all_close(o, want)) << "seed " << seed << "\n" << s.trace().str();
  }
}

// compute_at names an axis; a later split, tile or fuse of that axis moves the
// attachment to the innermost loop derived from it (found by random schedules:
// the producer used to be dropped from the loop nest).
TEST(ComputeAt, FollowsLaterSplitsTilesAndFuses) {
  const int m = 11, n = 13, k = 7;
  Tensor A = te::placeholder({m, k}, DataType::Float(32), "A"), B = te::placeholder({k, n}, DataType::Float(32), "B");
  Tensor P = te::compute({m, k}, [&](const std::vector<Var>& i) { return A(i[0], i[1]) * FloatImm::make(DataType::Float(32), 2.0) + FloatImm::make(DataType::Float(32), 1.0); }, "P");
  Tensor C = ops::matmul(P, B);
  auto a = testing::random_vector(m * k, 5), b = testing::random_vector(k * n, 6);
  std::vector<float> p(a.size());
  for (size_t i = 0; i < a.size(); ++i) p[i] = a[i] * 2.0f + 1.0f;
  auto want = testing::ref::matmul(p, b, m, n, k);
  struct Case {
    const char* name;
    const char* attach_at;  // C's axis given to compute_at
    std::function<void(te::Stage&)> later;
    const char* attached_leaf;  // where P ends up
  };
  std::vector<Case> cases = {
      {"split j", "j", [](te::Stage& c) { c.split(c.axis("j"), 4); }, "j.inner"},
      {"split_nparts i", "i", [](te::Stage& c) { c.split_nparts(c.axis("i"), 3); }, "i.inner"},
      {"split twice", "j", [](te::Stage& c) { auto [o, i] = c.split(c.axis("j"), 4); c.split(o, 2); }, "j.inner"},
      {"tile", "i", [](te::Stage& c) { c.tile(c.axis("i"), c.axis("j"), 4, 5); }, "i.inner"},
      {"fuse", "j", [](te::Stage& c) { c.fuse(c.axis("i"), c.axis("j")); }, "i.j.fused"},
      {"split then fuse", "i", [](te::Stage& c) { auto [o, i] = c.split(c.axis("i"), 4); c.fuse(i, c.axis("j")); }, "i.inner.j.fused"},
      {"split, inner moved out", "i", [](te::Stage& c) { auto [o, i] = c.split(c.axis("i"), 4); c.reorder({i, o}); }, "i.outer"},
  };
  for (const Case& cs : cases) {
    Schedule s = te::create_schedule({C});
    s[P].compute_at(s[C], s[C].axis(cs.attach_at));
    cs.later(s[C]);
    EXPECT_EQ(s[P].attach_ivar().name(), cs.attached_leaf) << cs.name;
    std::vector<float> c(m * n, 99.f);
    testing::run_backends(te::lower(s, {A, B, C}), {&a, &b, &c});
    EXPECT_TRUE(testing::all_close(c, want)) << cs.name << "\n" << s.trace().str();
    // The trace replays to the same attachment.
    Schedule r = Schedule::from_trace({C}, te::Trace::from_json(s.trace().to_json()));
    EXPECT_EQ(r[P].attach_ivar().name(), cs.attached_leaf) << cs.name;
  }
}

// Primitives that replace a stage's loops are refused while a stage is attached to them.
TEST(ComputeAt, LoopReplacingPrimitivesAfterItAreRefused) {
  Tensor A = te::placeholder({8, 6}, DataType::Float(32), "A"), B = te::placeholder({6, 4}, DataType::Float(32), "B");
  Tensor P = te::compute({8, 6}, [&](const std::vector<Var>& i) { return A(i[0], i[1]) + FloatImm::make(DataType::Float(32), 1.0); }, "P");
  Tensor C = ops::matmul(P, B);
  Schedule s = te::create_schedule({C});
  s[P].compute_at(s[C], s[C].axis("i"));
  EXPECT_TRUE(testing::throws_with([&] { s.rfactor(C, s[C].axis("k")); }, "stage 'P' is computed at one of them; apply rfactor before compute_at of 'P'"));
  EXPECT_TRUE(testing::throws_with([&] { s.cache_write(C, "local"); }, "apply cache_write before compute_at of 'P'"));
}

// Past the tail of a split, the region a consumer's iteration needs is empty:
// its extent was negative, and after a fuse of the producer's loops two
// negative extents multiplied to a positive trip count of out-of-bounds reads
// (found by schedule_fuzz_test).
TEST(ComputeAt, FusedProducerPastASplitTailRunsNothing) {
  const int h = 12, w = 20;
  Tensor A = te::placeholder({h, w}, DataType::Float(32), "A");
  Tensor B = te::compute({h, w}, [&](const std::vector<Var>& i) { return A(i[0], i[1]) + FloatImm::make(DataType::Float(32), 1.0); }, "B");
  Tensor C = te::compute({h, w}, [&](const std::vector<Var>& i) { return B(i[0], i[1]) * FloatImm::make(DataType::Float(32), 2.0); }, "C");
  Schedule s = te::create_schedule({C});
  s[C].split(s[C].axis("i"), 9);  // i runs to 17
  auto [jo, ji] = s[C].split(s[C].axis("j"), 7);  // j runs to 20
  IterVar f = s[C].fuse(jo, ji);
  auto [fo, fi] = s[C].split(f, 5);  // j runs to 24
  s[B].compute_at(s[C], fi);
  s[B].fuse(s[B].axis("i"), s[B].axis("j"));
  auto a = testing::random_vector(h * w, 12);
  std::vector<float> c(h * w, 99.f), want(h * w);
  for (int k = 0; k < h * w; ++k) want[k] = (a[k] + 1.f) * 2.f;
  testing::run_backends(te::lower(s, {A, C}), {&a, &c});
  EXPECT_TRUE(testing::all_close(c, want)) << s.trace().str();
}

// A loop whose body allocates an attached stage's buffer and that is copied
// (unrolled, or partitioned into a main part and a tail) must give each copy
// its own buffer: storage_reuse merged the copies' Allocates of one data
// variable into one that enclosed the others, and LLVM codegen raised
// "buffer B is allocated twice" (issue 47; found again by schedule_fuzz_test).
TEST(AttachedAllocation, UnrolledCopiesRunRight) {
  auto elementwise = [](int h, int w, int factor, bool unroll_outer) {
    Tensor A = te::placeholder({h, w}, DataType::Float(32), "A");
    Tensor B = te::compute({h, w}, [&](const std::vector<Var>& i) { return A(i[0], i[1]) + FloatImm::make(DataType::Float(32), 1.0); }, "B");
    Tensor C = te::compute({h, w}, [&](const std::vector<Var>& i) { return B(i[0], i[1]) * FloatImm::make(DataType::Float(32), 2.0); }, "C");
    Schedule s = te::create_schedule({C});
    auto [io, ii] = s[C].split(s[C].axis("i"), factor);
    auto [jo, ji] = s[C].split(s[C].axis("j"), factor);
    if (unroll_outer) {  // issue 47's schedule
      s[C].reorder({jo, io, ii, ji});
      s[B].compute_at(s[C], ii);
      s[C].unroll(jo);
    } else {  // j's tail is partitioned off, then every i is unrolled
      s[C].reorder({io, ii, jo, ji});
      s[B].compute_at(s[C], jo);
      s[C].unroll(ii);
    }
    auto a = testing::random_vector(h * w, 7);
    std::vector<float> c(h * w, 99.f), want(h * w);
    for (int k = 0; k < h * w; ++k) want[k] = (a[k] + 1.f) * 2.f;
    testing::run_backends(te::lower(s, {A, C}), {&a, &c});
    EXPECT_TRUE(testing::all_close(c, want)) << h << "x" << w << " by " << factor << "\n" << s.trace().str();
  };
  elementwise(64, 64, 8, true);
  elementwise(12, 20, 8, false);
  elementwise(3, 64, 3, false);
}

// The first iteration of the loop P is attached to is partitioned off (the
// others are guarded), so two copies of P's Allocate sat side by side.
TEST(AttachedAllocation, PartitionedCopiesRunRight) {
  const int m = 11, n = 13, k = 7;
  Tensor A = te::placeholder({m, k}, DataType::Float(32), "A"), B = te::placeholder({k, n}, DataType::Float(32), "B");
  Tensor P = te::compute({m, k}, [&](const std::vector<Var>& i) { return A(i[0], i[1]) * FloatImm::make(DataType::Float(32), 2.0) + FloatImm::make(DataType::Float(32), 1.0); }, "P");
  Tensor C = ops::matmul(P, B);
  Schedule s = te::create_schedule({C});
  auto [io, ii] = s[C].split(s[C].axis("i"), 9);
  auto [ioo, ioi] = s[C].split_nparts(io, 5);
  s[P].compute_at(s[C], ioo);
  auto a = testing::random_vector(m * k, 8), b = testing::random_vector(k * n, 9);
  std::vector<float> p(a.size());
  for (size_t i = 0; i < a.size(); ++i) p[i] = a[i] * 2.0f + 1.0f;
  std::vector<float> c(m * n, 99.f);
  testing::run_backends(te::lower(s, {A, B, C}), {&a, &b, &c});
  EXPECT_TRUE(testing::all_close(c, testing::ref::matmul(p, b, m, n, k)));
}

// P computed at M's reduce loop, M at the inner part of C's split row loop:
// P's region starts at a row given by M's loop variable i, which (i being
// unsplit) is also M's root variable; reads of P replaced that variable by
// its value a second time, so the offset into P counted M's row twice
// (out-of-bounds reads; found by schedule_fuzz_test).
TEST(ComputeAt, NestedAttachmentUnderAnUnsplitAxisReadsRight) {
  const int m = 11, n = 13, k = 7;
  Tensor A = te::placeholder({m, k}, DataType::Float(32), "A"), B = te::placeholder({k, n}, DataType::Float(32), "B");
  Tensor P = te::compute({m, k}, [&](const std::vector<Var>& i) { return A(i[0], i[1]) * FloatImm::make(DataType::Float(32), 2.0) + FloatImm::make(DataType::Float(32), 1.0); }, "P");
  Tensor M = ops::matmul(P, B, "M");
  Tensor C = te::compute({m, n}, [&](const std::vector<Var>& i) { return M(i[0], i[1]) * FloatImm::make(DataType::Float(32), 0.5); }, "C");
  auto a = testing::random_vector(m * k, 10), b = testing::random_vector(k * n, 11);
  std::vector<float> p(a.size());
  for (size_t i = 0; i < a.size(); ++i) p[i] = a[i] * 2.0f + 1.0f;
  auto want = testing::ref::matmul(p, b, m, n, k);
  for (float& x : want) x *= 0.5f;
  for (bool split_first : {false, true}) {
    Schedule s = te::create_schedule({C});
    if (split_first) {
      auto [o, i] = s[C].split(s[C].axis("i"), 3);
      s[M].compute_at(s[C], i);
    } else {
      s[M].compute_at(s[C], s[C].axis("i"));
      s[C].split(s[C].axis("i"), 3);
    }
    s[P].compute_at(s[M], s[M].axis("k"));
    std::vector<float> c(m * n, 99.f);
    testing::run_backends(te::lower(s, {A, B, C}), {&a, &b, &c});
    EXPECT_TRUE(testing::all_close(c, want)) << s.trace().str();
  }
}

}  // namespace
}  // namespace kiln
