// Tests of the loop-level passes (core/include/kiln/pass/passes.h). Each pass is
// run on hand-built functions; the tests check the shape of the result and
// that the reference interpreter computes the same outputs before and after.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <set>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/pass/passes.h"
#include "kiln/support/error.h"

namespace kiln {
namespace {

const DataType f32 = DataType::Float(32);
const DataType i32 = DataType::Int(32);

Expr ld(const Buffer& b, std::vector<Expr> idx) { return BufferLoad::make(b, std::move(idx)); }
Stmt st(const Buffer& b, Expr v, std::vector<Expr> idx) { return BufferStore::make(b, std::move(v), std::move(idx)); }
Stmt loop(const Var& v, Expr min, Expr extent, Stmt body, ForKind kind = ForKind::Serial) { return For::make(v, std::move(min), std::move(extent), kind, std::move(body)); }
Param arg(const Buffer& b) { return Param{b->data, b}; }
Param scalar(const Var& v) { return Param{v, Buffer()}; }
Buffer buf(const std::string& name, std::vector<Expr> shape, DataType t = f32) { return Buffer::make(name, t, std::move(shape)); }

// ------------------------------------------------------------ IR queries

int count_stmts(const Stmt& s, const std::function<bool(const Stmt&)>& pred) {
  int n = 0;
  post_order_visit(s, nullptr, [&](const Stmt& x) { n += pred(x) ? 1 : 0; });
  return n;
}

int count_exprs(const Stmt& s, const std::function<bool(const Expr&)>& pred) {
  int n = 0;
  post_order_visit(s, [&](const Expr& x) { n += pred(x) ? 1 : 0; });
  return n;
}

int count_exprs(const Expr& e, const std::function<bool(const Expr&)>& pred) {
  int n = 0;
  post_order_visit(e, [&](const Expr& x) { n += pred(x) ? 1 : 0; });
  return n;
}

int count_loops(const Stmt& s, ForKind kind) {
  return count_stmts(s, [&](const Stmt& x) { return x.as<For>() && x.as<For>()->kind == kind; });
}
int count_fors(const Stmt& s) { return count_stmts(s, [](const Stmt& x) { return x.as<For>() != nullptr; }); }
int count_ifs(const Stmt& s) { return count_stmts(s, [](const Stmt& x) { return x.as<IfThenElse>() != nullptr; }); }
int count_allocs(const Stmt& s) { return count_stmts(s, [](const Stmt& x) { return x.as<Allocate>() != nullptr; }); }

// The top-level statements of a body (one if it is not a Seq).
std::vector<Stmt> top_level(const Stmt& s) {
  if (const Seq* q = s.as<Seq>()) return q->seq;
  return {s};
}

// ------------------------------------------------------------ running

// Element counts of f's parameters (buffers only; scalars are ints below).
int64_t elements(const Buffer& b) {
  int64_t n = 1;
  for (const Expr& d : b.shape()) {
    const int64_t* c = as_const_int(d);
    KILN_CHECK(c) << "test buffers need constant shapes";
    n *= *c;
  }
  return n;
}

// Arguments for f: every buffer filled with seeded random values (floats in
// [-2, 2], ints in [0, 50)), every scalar parameter set from `scalars`.
struct Args {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<void*> ptrs;
};

Args make_args(const PrimFunc& f, uint32_t seed, const std::vector<int32_t>& scalars = {}) {
  std::mt19937 rng(seed);
  Args a;
  size_t next_scalar = 0;
  for (const Param& p : f.params()) {
    if (!p.is_buffer()) {
      int32_t v = scalars.at(next_scalar++);
      a.storage.emplace_back(sizeof(v));
      std::memcpy(a.storage.back().data(), &v, sizeof(v));
      continue;
    }
    int64_t n = elements(p.buffer);
    a.storage.emplace_back(n * p.buffer.dtype().bytes());
    for (int64_t i = 0; i < n; ++i) {
      if (p.buffer.dtype() == f32) {
        float v = std::uniform_real_distribution<float>(-2, 2)(rng);
        std::memcpy(a.storage.back().data() + i * 4, &v, 4);
      } else {
        int32_t v = std::uniform_int_distribution<int32_t>(0, 49)(rng);
        std::memcpy(a.storage.back().data() + i * 4, &v, 4);
      }
    }
  }
  for (auto& s : a.storage) a.ptrs.push_back(s.data());
  return a;
}

// Runs before and after on the same random inputs and expects every buffer
// to end up bit-identical.
void expect_same_results(const PrimFunc& before, const PrimFunc& after, const std::vector<int32_t>& scalars = {}) {
  ASSERT_EQ(before.params().size(), after.params().size());
  for (uint32_t seed : {1u, 2u}) {
    Args a = make_args(before, seed, scalars), b = make_args(before, seed, scalars);
    interpret(before, a.ptrs);
    interpret(after, b.ptrs);
    for (size_t i = 0; i < a.storage.size(); ++i) {
      EXPECT_TRUE(a.storage[i] == b.storage[i]) << "argument " << i << " differs\nbefore:\n" << before << "\nafter:\n" << after;
    }
  }
}

// ------------------------------------------------------------ functions

// C[i, j] = A[i, j] * 2 + B[j] over [M, N], j split by 8 with a guard when 8
// does not divide N (as lowering emits for a non-dividing split).
PrimFunc split_elementwise(int M, int N, ForKind inner_kind = ForKind::Serial, int factor = 8) {
  Buffer A = buf("A", {M, N}), B = buf("B", {N}), C = buf("C", {M, N});
  Var i("i"), jo("j.outer"), ji("j.inner");
  Expr j = jo * factor + ji;
  Stmt store = st(C, ld(A, {i, j}) * 2.0f + ld(B, {j}), {i, j});
  if (N % factor) store = IfThenElse::make(likely(j < N), store);
  Stmt body = loop(i, 0, M, loop(jo, 0, (N + factor - 1) / factor, loop(ji, 0, factor, store, inner_kind)));
  return PrimFunc::make("split_elementwise", {arg(A), arg(B), arg(C)}, body);
}

// C = A x B with a reduction loop; A is [M, K], B is [K, N].
PrimFunc matmul(int M, int N, int K) {
  Buffer A = buf("A", {M, K}), B = buf("B", {K, N}), C = buf("C", {M, N});
  Var i("i"), j("j"), k("k");
  Stmt update = loop(k, 0, K, st(C, ld(C, {i, j}) + ld(A, {i, k}) * ld(B, {k, j}), {i, j}));
  Stmt body = loop(i, 0, M, loop(j, 0, N, Seq::make({st(C, 0.0f, {i, j}), update})));
  return PrimFunc::make("matmul", {arg(A), arg(B), arg(C)}, body);
}

// ============================================================ storage_flatten

TEST(StorageFlatten, MatmulBecomesOneDimensional) {
  PrimFunc f = matmul(6, 5, 7);
  PrimFunc g = pass::storage_flatten(f);
  // Parameters keep their logical buffers (the signature callers see).
  for (size_t p = 0; p < g.params().size(); ++p) EXPECT_TRUE(g.params()[p].buffer.same_as(f.params()[p].buffer));
  // Every access has one int32 index, into a flat view of a parameter: the
  // same data variable, sized to the parameter's element count.
  post_order_visit(g.body(), [&](const Expr& e) {
    if (const BufferLoad* l = e.as<BufferLoad>()) {
      ASSERT_EQ(l->indices.size(), 1u);
      EXPECT_EQ(l->indices[0].dtype(), i32);
      const Param* owner = nullptr;
      for (const Param& p : f.params())
        if (p.buffer->data.same_as(l->buffer->data)) owner = &p;
      ASSERT_NE(owner, nullptr) << "flattened buffer must keep the data variable";
      EXPECT_EQ(*as_const_int(l->buffer->shape[0]), elements(owner->buffer));
    }
  });
  EXPECT_EQ(count_stmts(g.body(), [](const Stmt& s) { return s.as<BufferStore>() && s.as<BufferStore>()->buffer.ndim() != 1; }), 0);
  expect_same_results(f, g);
}

TEST(StorageFlatten, IndexIsRowMajor) {
  Buffer A = buf("A", {4, 6}), C = buf("C", {4, 6});
  Var i("i"), j("j");
  PrimFunc f = PrimFunc::make("copy", {arg(A), arg(C)}, loop(i, 0, 4, loop(j, 0, 6, st(C, ld(A, {i, j}), {i, j}))));
  PrimFunc g = pass::storage_flatten(f);
  const BufferStore* s = g.body().as<For>()->body.as<For>()->body.as<BufferStore>();
  ASSERT_TRUE(s);
  EXPECT_EQ(to_string(s->indices[0]), to_string(i * 6 + j));
}

TEST(StorageFlatten, ExplicitStridesOfAnAllocation) {
  // A padded 4x16 scratch buffer with rows 20 elements apart (storage_align).
  Buffer A = buf("A", {4, 16}), C = buf("C", {4, 16});
  Buffer T = Buffer::make("T", f32, {4, 16}, "local", {20, 1});
  Var i("i"), j("j"), i2("i2"), j2("j2");
  Stmt fill = loop(i, 0, 4, loop(j, 0, 16, st(T, ld(A, {i, j}) + 1.0f, {i, j})));
  Stmt use = loop(i2, 0, 4, loop(j2, 0, 16, st(C, ld(T, {i2, j2}) * 3.0f, {i2, j2})));
  PrimFunc f = PrimFunc::make("strided", {arg(A), arg(C)}, Allocate::make(T, Seq::make({fill, use})));
  PrimFunc g = pass::storage_flatten(f);
  const Allocate* a = g.body().as<Allocate>();
  ASSERT_TRUE(a);
  ASSERT_EQ(a->buffer.ndim(), 1);
  EXPECT_TRUE(a->buffer->data.same_as(T->data));
  // One past the last reachable element: 3*20 + 15 + 1.
  EXPECT_EQ(*as_const_int(a->buffer.shape()[0]), 76);
  expect_same_results(f, g);
}

TEST(StorageFlatten, FlatFunctionIsReturnedUnchanged) {
  PrimFunc f = pass::storage_flatten(matmul(3, 3, 3));
  EXPECT_TRUE(pass::storage_flatten(f).same_as(f));
}

// ============================================================ simplify

TEST(Simplify, FoldsIndexArithmetic) {
  Buffer A = buf("A", {16}), C = buf("C", {16});
  Var i("i");
  Stmt body = loop(i, 0, 16, st(C, ld(A, {i + 0}), {i * 1 + (2 - 2)}));
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C)}, body);
  PrimFunc g = pass::simplify(f);
  const BufferStore* s = g.body().as<For>()->body.as<BufferStore>();
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->indices[0].same_as(i)) << to_string(s->indices[0]);
  const BufferLoad* l = s->value.as<BufferLoad>();
  ASSERT_TRUE(l);
  EXPECT_TRUE(l->indices[0].same_as(i)) << to_string(l->indices[0]);
  expect_same_results(f, g);
}

// ============================================================ remove_no_op

TEST(RemoveNoOp, DropsEmptyLoopsBranchesAndUnusedAllocations) {
  Buffer A = buf("A", {8}), C = buf("C", {8});
  Buffer unused = Buffer::make("U", f32, {8}, "local");
  Var i("i"), j("j"), k("k");
  Stmt real = loop(i, 0, 8, st(C, ld(A, {i}), {i}));
  Stmt body = Seq::make({
      Evaluate::make(0),
      loop(j, 0, 0, st(C, 1.0f, {j})),                     // zero extent
      loop(k, 0, 8, Seq::make({make_nop(), make_nop()})),  // empty body
      IfThenElse::make(ld(A, {0}) > 0.0f, make_nop(), make_nop()),
      Allocate::make(unused, real),
  });
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C)}, body);
  PrimFunc g = pass::remove_no_op(f);
  EXPECT_TRUE(g.body().same_as(real)) << g;
  expect_same_results(f, g);
}

TEST(RemoveNoOp, EmptyThenBranchNegatesCondition) {
  Buffer A = buf("A", {8}), C = buf("C", {8});
  Var i("i");
  Stmt body = loop(i, 0, 8, IfThenElse::make(ld(A, {i}) > 0.0f, make_nop(), st(C, ld(A, {i}), {i})));
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C)}, body);
  PrimFunc g = pass::remove_no_op(f);
  const IfThenElse* s = g.body().as<For>()->body.as<IfThenElse>();
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->condition.as<Not>());
  EXPECT_FALSE(s->else_case.defined());
  expect_same_results(f, g);
}

TEST(RemoveNoOp, KeepsUsefulCodeAsIs) {
  PrimFunc f = matmul(3, 4, 5);
  EXPECT_TRUE(pass::remove_no_op(f).same_as(f));
}

TEST(RemoveNoOp, EverythingEmptyLeavesANop) {
  Var i("i");
  PrimFunc f = PrimFunc::make("f", {}, loop(i, 0, 4, make_nop()));
  EXPECT_TRUE(is_nop(pass::remove_no_op(f).body()));
}

// ============================================================ loop_partition

// The loops at the top of the i loop's body in split_elementwise.
std::vector<Stmt> pieces_under_i(const PrimFunc& f) { return top_level(f.body().as<For>()->body); }

TEST(LoopPartition, SplitGuardLeavesGuardFreeMainLoop) {
  PrimFunc f = split_elementwise(3, 100);
  PrimFunc g = pass::loop_partition(f);
  std::vector<Stmt> pieces = pieces_under_i(g);
  ASSERT_EQ(pieces.size(), 2u) << g;
  // Main: j.outer in [0, 12) without any guard.
  const For* main = pieces[0].as<For>();
  ASSERT_TRUE(main);
  EXPECT_TRUE(is_const_int(main->min, 0));
  EXPECT_TRUE(is_const_int(main->extent, 12));
  EXPECT_EQ(count_ifs(pieces[0]), 0) << g;
  // Tail: j.outer = 12, whose inner loop is split again: j.inner in [0, 4)
  // needs no guard and [4, 8) is provably out of range, so it is gone.
  const For* tail = pieces[1].as<For>();
  ASSERT_TRUE(tail);
  EXPECT_TRUE(is_const_int(tail->min, 12));
  EXPECT_TRUE(is_const_int(tail->extent, 1));
  EXPECT_EQ(count_ifs(pieces[1]), 0) << g;
  const For* inner = tail->body.as<For>();
  ASSERT_TRUE(inner) << g;
  EXPECT_TRUE(is_const_int(inner->extent, 4));
  expect_same_results(f, g);
}

TEST(LoopPartition, PaddingGuardMakesThreePieces) {
  // out[i] = in[i - 1] for i in [1, 9), 0 elsewhere, over i in [0, 10).
  Buffer In = buf("In", {8}), Out = buf("Out", {10});
  Var i("i");
  Stmt body = loop(i, 0, 10, IfThenElse::make(likely(i >= 1 && i < 9), st(Out, ld(In, {i - 1}), {i}), st(Out, 0.0f, {i})));
  PrimFunc f = PrimFunc::make("pad", {arg(In), arg(Out)}, body);
  PrimFunc g = pass::loop_partition(f);
  std::vector<Stmt> pieces = top_level(g.body());
  ASSERT_EQ(pieces.size(), 3u) << g;
  const int64_t expect[3][2] = {{0, 1}, {1, 8}, {9, 1}};
  for (int p = 0; p < 3; ++p) {
    const For* l = pieces[p].as<For>();
    ASSERT_TRUE(l) << g;
    EXPECT_TRUE(is_const_int(l->min, expect[p][0]) && is_const_int(l->extent, expect[p][1])) << g;
    // Each piece knows its branch: the condition is settled everywhere.
    EXPECT_EQ(count_ifs(pieces[p]), 0) << g;
  }
  expect_same_results(f, g);
}

// Whether s has a likely() guard anywhere.
bool has_guard(const Stmt& s) {
  bool found = false;
  post_order_visit(s, [](const Expr&) {}, [&](const Stmt& x) {
    const IfThenElse* g = x.as<IfThenElse>();
    const Call* c = g ? g->condition.as<Call>() : nullptr;
    found = found || (c && c->op == Intrinsic::Likely);
  });
  return found;
}

TEST(LoopPartition, RuntimeBoundSplitsAtTheLastFullTile) {
  // The bound is a runtime scalar (a dynamic shape's tiles): the tiles below
  // floordiv(n, 8) run without the guard, the rest keeps it, for every n.
  Buffer A = buf("A", {64}), C = buf("C", {64});
  Var n("n"), io("io"), ii("ii");
  Expr j = io * 8 + ii;
  Stmt body = loop(io, 0, 8, loop(ii, 0, 8, IfThenElse::make(likely(j < n), st(C, ld(A, {j}), {j}))));
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C), scalar(n)}, body);
  PrimFunc g = pass::loop_partition(f);
  std::vector<Stmt> pieces = top_level(g.body());
  ASSERT_EQ(pieces.size(), 2u) << g;
  const For* main = pieces[0].as<For>();
  ASSERT_TRUE(main) << g;
  EXPECT_FALSE(has_guard(main->body)) << g;
  for (int32_t v : {0, 1, 7, 8, 13, 63, 64}) expect_same_results(f, g, {v});
}

TEST(LoopPartition, GuardOnlyOfAnInnerLoopVariable) {
  // A 2-D split with guards on both axes: every guard must be gone from the
  // main nest, and results must not change.
  const int M = 10, N = 13;
  Buffer A = buf("A", {M, N}), C = buf("C", {M, N});
  Var io("io"), ii("ii"), jo("jo"), ji("ji");
  Expr i = io * 4 + ii, j = jo * 4 + ji;
  Stmt store = IfThenElse::make(likely(i < M), IfThenElse::make(likely(j < N), st(C, ld(A, {i, j}) + 1.0f, {i, j})));
  Stmt body = loop(io, 0, 3, loop(ii, 0, 4, loop(jo, 0, 4, loop(ji, 0, 4, store))));
  PrimFunc f = PrimFunc::make("f2", {arg(A), arg(C)}, body);
  PrimFunc g = pass::loop_partition(f);
  const For* first = top_level(g.body())[0].as<For>();
  ASSERT_TRUE(first) << g;
  EXPECT_TRUE(is_const_int(first->extent, 2)) << g;
  // In io in [0, 2), the j guard remains only in the jo tail.
  for (const Stmt& s : top_level(first->body.as<For>()->body)) {
    const For* l = s.as<For>();
    ASSERT_TRUE(l) << g;
    if (is_const_int(l->min, 0)) {
      EXPECT_EQ(count_ifs(s), 0) << g;
    }
  }
  expect_same_results(f, g);
}

TEST(LoopPartition, OneGuardOverTwoAxesIsSettledPerAxis) {
  // A 2-D tile's guard as one condition (`i < M && j < N`, as lowering
  // writes it): the io loop peels its tail on the i conjunct and leaves the
  // j conjunct to the jo loop inside, so the main nest has no guard at all.
  const int M = 10, N = 13;
  Buffer A = buf("A", {M, N}), C = buf("C", {M, N});
  Var io("io"), ii("ii"), jo("jo"), ji("ji");
  Expr i = io * 4 + ii, j = jo * 4 + ji;
  Stmt store = IfThenElse::make(likely(i < M && j < N), st(C, ld(A, {i, j}) + 1.0f, {i, j}));
  Stmt body = loop(io, 0, 3, loop(jo, 0, 4, loop(ii, 0, 4, loop(ji, 0, 4, store))));
  PrimFunc f = PrimFunc::make("f2", {arg(A), arg(C)}, body);
  PrimFunc g = pass::loop_partition(f);
  std::vector<Stmt> pieces = top_level(g.body());
  ASSERT_EQ(pieces.size(), 2u) << g;
  const For* main_i = pieces[0].as<For>();
  ASSERT_TRUE(main_i && is_const_int(main_i->extent, 2)) << g;
  // Inside io in [0, 2): jo in [0, 3) is guard-free, jo = 3 keeps j's guard only.
  std::vector<Stmt> inner = top_level(main_i->body);
  ASSERT_EQ(inner.size(), 2u) << g;
  EXPECT_EQ(count_ifs(inner[0]), 0) << g;
  expect_same_results(f, g);
}

TEST(LoopPartition, SymbolicLoopSplitsWhereTheGuardEnds) {
  // i in [0, n) guarded by i < 64: the guard holds up to 64 and fails after,
  // so one guard-free loop of min(n, 64) iterations is left.
  Buffer A = buf("A", {64}), C = buf("C", {64});
  Var n("n"), i("i");
  Stmt body = loop(i, 0, n, IfThenElse::make(likely(i < 64), st(C, ld(A, {i}), {i})));
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C), scalar(n)}, body);
  PrimFunc g = pass::loop_partition(f);
  EXPECT_FALSE(has_guard(g.body())) << g;
  for (int32_t v : {0, 1, 63, 64, 65, 100}) expect_same_results(f, g, {v});
}

TEST(LoopPartition, TilesOfASymbolicExtent) {
  // A split of a dynamic extent n by 6: io in [0, ceildiv(n, 6)), the guard
  // io*6 + ii < n. The main piece (io < floordiv(n, 6)) is guard-free, and in
  // the last tile the rows loop stops at the extent instead of testing each row.
  Buffer A = buf("A", {64}), C = buf("C", {64});
  Var n("n"), io("io"), ii("ii");
  Expr j = io * 6 + ii;
  Stmt body = loop(io, 0, floordiv(n + 5, 6), loop(ii, 0, 6, IfThenElse::make(likely(j < n), st(C, ld(A, {j}) * 2.0f, {j}))));
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C), scalar(n)}, body);
  PrimFunc g = pass::loop_partition(f);
  EXPECT_FALSE(has_guard(g.body())) << g;
  for (int32_t v : {0, 1, 5, 6, 7, 13, 60, 64}) expect_same_results(f, g, {v});
}

// ============================================================ unroll_loops

TEST(UnrollLoops, UnrolledLoopIsReplicated) {
  Buffer A = buf("A", {4, 16}), C = buf("C", {4, 16});
  Var i("i"), j("j");
  Stmt body = loop(i, 0, 4, loop(j, 0, 16, st(C, ld(A, {i, j}) * 3.0f, {i, j})), ForKind::Unrolled);
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C)}, body);
  PrimFunc g = pass::unroll_loops(f);
  std::vector<Stmt> copies = top_level(g.body());
  ASSERT_EQ(copies.size(), 4u);
  for (int c = 0; c < 4; ++c) {
    // The inner loop is not marked: it stays a loop, with i replaced by c.
    const For* inner = copies[c].as<For>();
    ASSERT_TRUE(inner);
    EXPECT_EQ(inner->kind, ForKind::Serial);
    const BufferStore* s = inner->body.as<BufferStore>();
    ASSERT_TRUE(s);
    EXPECT_TRUE(is_const_int(s->indices[0], c));
  }
  EXPECT_FALSE(uses_var(g.body(), [&](const Variable* v) { return v == i.get(); }));
  expect_same_results(f, g);
}

// Each copy of a body that allocates gets a buffer of its own (issue 47):
// passes after unrolling and the code generators key storage by data variable.
TEST(UnrollLoops, CopiesAllocateBuffersOfTheirOwn) {
  Buffer A = buf("A", {3, 4}), C = buf("C", {3, 4}), T = buf("T", {4});
  Var i("i"), j("j"), k("k");
  Stmt body = Allocate::make(T, Seq::make({loop(j, 0, 4, st(T, ld(A, {i, j}) + 1.0f, {j})), loop(k, 0, 4, st(C, ld(T, {k}) * 2.0f, {i, k}))}));
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C)}, loop(i, 0, 3, body, ForKind::Unrolled));
  PrimFunc g = pass::unroll_loops(f);
  std::vector<Stmt> copies = top_level(g.body());
  ASSERT_EQ(copies.size(), 3u);
  std::set<const Variable*> vars;
  for (const Stmt& c : copies) {
    const Allocate* a = c.as<Allocate>();
    ASSERT_TRUE(a);
    vars.insert(a->buffer->data.get());
    // Inside a copy, every access to T names that copy's buffer.
    post_order_visit(a->body, [&](const Expr& e) {
      if (const BufferLoad* l = e.as<BufferLoad>(); l && l->buffer->name == "T") EXPECT_TRUE(l->buffer->data.same_as(a->buffer->data));
    }, [&](const Stmt& s) {
      if (const BufferStore* st = s.as<BufferStore>(); st && st->buffer->name == "T") EXPECT_TRUE(st->buffer->data.same_as(a->buffer->data));
    });
  }
  EXPECT_EQ(vars.size(), 3u);
  expect_same_results(f, g);
}

TEST(UnrollLoops, SymbolicExtentBecomesSerial) {
  Buffer A = buf("A", {16}), C = buf("C", {16});
  Var n("n"), i("i");
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C), scalar(n)}, loop(i, 0, n, st(C, ld(A, {i}), {i}), ForKind::Unrolled));
  PrimFunc g = pass::unroll_loops(f);
  const For* l = g.body().as<For>();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->kind, ForKind::Serial);
  expect_same_results(f, g, {16});
}

TEST(UnrollLoops, SymbolicMinIsOffset) {
  Buffer A = buf("A", {16}), C = buf("C", {16});
  Var n("n"), i("i");
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C), scalar(n)}, loop(i, n, 3, st(C, ld(A, {i}) + 1.0f, {i}), ForKind::Unrolled));
  PrimFunc g = pass::unroll_loops(f);
  EXPECT_EQ(count_fors(g.body()), 0);
  EXPECT_EQ(top_level(g.body()).size(), 3u);
  expect_same_results(f, g, {5});
}

TEST(UnrollLoops, AutoUnrollUnrollsSmallInnerNests) {
  Buffer A = buf("A", {8, 4, 8}), C = buf("C", {8, 4, 8});
  Var i("i"), j("j"), k("k");
  Stmt nest = loop(i, 0, 8, loop(j, 0, 4, loop(k, 0, 8, st(C, ld(A, {i, j, k}) - 1.0f, {i, j, k}))));
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C)}, AttrStmt::make("pragma_auto_unroll_max_step", 32, nest));
  PrimFunc g = pass::unroll_loops(f);
  // The j-k nest has 32 steps and is unrolled; with i it would be 256.
  const For* outer = g.body().as<For>();
  ASSERT_TRUE(outer) << g;
  EXPECT_EQ(count_fors(g.body()), 1);
  EXPECT_EQ(top_level(outer->body).size(), 32u);
  expect_same_results(f, g);
}

TEST(UnrollLoops, AutoUnrollLeavesBigLoops) {
  Buffer A = buf("A", {64}), C = buf("C", {64});
  Var i("i");
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C)}, AttrStmt::make("pragma_auto_unroll_max_step", 16, loop(i, 0, 64, st(C, ld(A, {i}), {i}))));
  PrimFunc g = pass::unroll_loops(f);
  EXPECT_EQ(count_fors(g.body()), 1);
  expect_same_results(f, g);
}

TEST(UnrollLoops, HugeUnrollIsAUserError) {
  Buffer C = buf("C", {1 << 20});
  Var i("i");
  PrimFunc f = PrimFunc::make("f", {arg(C)}, loop(i, 0, 1 << 20, st(C, 0.0f, {i}), ForKind::Unrolled));
  try {
    pass::unroll_loops(f);
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("split the loop"), std::string::npos) << e.what();
  }
}

// ============================================================ vectorize_loops

TEST(VectorizeLoops, ContiguousAccessBecomesRamp) {
  PrimFunc f = pass::storage_flatten(split_elementwise(4, 64, ForKind::Vectorized));
  PrimFunc g = pass::vectorize_loops(f);
  EXPECT_EQ(count_loops(g.body(), ForKind::Vectorized), 0) << g;
  EXPECT_EQ(count_fors(g.body()), 2) << g;
  // C[i*64 + j.outer*8 + j.inner] becomes C[ramp(i*64 + j.outer*8, 1, 8)].
  const BufferStore* s = g.body().as<For>()->body.as<For>()->body.as<BufferStore>();
  ASSERT_TRUE(s) << g;
  const Ramp* r = s->indices[0].as<Ramp>();
  ASSERT_TRUE(r) << g;
  EXPECT_EQ(r->lanes, 8);
  EXPECT_TRUE(is_one(r->stride));
  EXPECT_EQ(s->value.dtype(), DataType::Float(32, 8));
  // The load of A is a ramp load too; B[j.outer*8 + j.inner] also.
  EXPECT_EQ(count_exprs(s->value, [](const Expr& e) { return e.as<BufferLoad>() && e.as<BufferLoad>()->indices[0].as<Ramp>(); }), 2) << g;
  expect_same_results(f, g);
}

// One vectorized loop over 8 lanes around `body`, in a function of A, C.
PrimFunc vec_func(const Buffer& A, const Buffer& C, const Var& v, Stmt body) {
  return PrimFunc::make("v", {arg(A), arg(C)}, loop(v, 0, 8, std::move(body), ForKind::Vectorized));
}

TEST(VectorizeLoops, SelectCastLetAndMath) {
  Buffer A = buf("A", {8}), C = buf("C", {8});
  Var v("v"), t("t", f32);
  Expr x = ld(A, {v});
  Stmt body = LetStmt::make(t, exp(x) + cast(f32, v), st(C, select(x > 0.0f && v < 6, t, max(x, -1.0f)), {v}));
  PrimFunc f = vec_func(A, C, v, body);
  PrimFunc g = pass::vectorize_loops(f);
  EXPECT_EQ(count_fors(g.body()), 0) << g;
  EXPECT_GT(count_exprs(g.body(), [](const Expr& e) { return e.as<Select>() && e.dtype().lanes() == 8; }), 0) << g;
  expect_same_results(f, g);
}

TEST(VectorizeLoops, ScalarConditionStaysScalar) {
  Buffer A = buf("A", {8}), C = buf("C", {8});
  Var v("v");
  Stmt body = IfThenElse::make(ld(A, {0}) > 0.0f, st(C, ld(A, {v}), {v}), st(C, 0.0f, {v}));
  PrimFunc f = vec_func(A, C, v, body);
  PrimFunc g = pass::vectorize_loops(f);
  const IfThenElse* s = g.body().as<IfThenElse>();
  ASSERT_TRUE(s) << g;
  EXPECT_EQ(s->condition.dtype(), DataType::Bool());
  expect_same_results(f, g);
}

TEST(VectorizeLoops, FallsBackToSerial) {
  Buffer A = buf("A", {64}), C = buf("C", {8});
  Var v("v"), k("k"), i("i");
  std::vector<std::pair<std::string, Stmt>> cases = {
      // A reduction across lanes: every lane stores to C[i].
      {"reduction", loop(i, 0, 8, loop(v, 0, 8, st(C, ld(C, {i}) + ld(A, {i * 8 + v}), {i}), ForKind::Vectorized))},
      // A condition that differs by lane around a statement.
      {"lane condition", loop(v, 0, 8, IfThenElse::make(v < 3, st(C, ld(A, {v}), {v})), ForKind::Vectorized)},
      // Lanes that share an address while the value reads it.
      {"colliding lanes", loop(v, 0, 8, st(C, ld(C, {floordiv(v, 2)}) + ld(A, {v}), {floordiv(v, 2)}), ForKind::Vectorized)},
      // An inner loop.
      {"inner loop", loop(v, 0, 8, loop(k, 0, 8, st(C, ld(C, {v}) + ld(A, {v * 8 + k}), {v})), ForKind::Vectorized)},
      // if_then_else with a lane condition may read out of bounds in the other lanes.
      {"if_then_else", loop(v, 0, 8, st(C, if_then_else(v < 4, ld(A, {v + 60}), 0.0f), {v}), ForKind::Vectorized)},
  };
  for (auto& [name, body] : cases) {
    PrimFunc f = PrimFunc::make(name, {arg(A), arg(C)}, body);
    PrimFunc g = pass::vectorize_loops(f);
    EXPECT_EQ(count_loops(g.body(), ForKind::Vectorized), 0) << name;
    EXPECT_EQ(count_exprs(g.body(), [](const Expr& e) { return e.dtype().lanes() > 1; }), 0) << name << "\n" << g;
    expect_same_results(f, g);
  }
}

TEST(VectorizeLoops, LetBoundIndexStaysARamp) {
  Buffer A = buf("A", {32}), C = buf("C", {32});
  Var i("i"), v("v"), idx("idx"), y("y", f32);
  Stmt body = LetStmt::make(idx, i * 8 + v, st(C, Let::make(y, ld(A, {idx}), y * y), {idx}));
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C)}, loop(i, 0, 4, loop(v, 0, 8, body, ForKind::Vectorized)));
  PrimFunc g = pass::vectorize_loops(f);
  const BufferStore* s = g.body().as<For>()->body.as<BufferStore>();
  ASSERT_TRUE(s) << g;
  const Ramp* r = s->indices[0].as<Ramp>();
  ASSERT_TRUE(r) << g;
  EXPECT_TRUE(r->base.same_as(i * 8) || to_string(r->base) == to_string(i * 8)) << g;
  // The expression Let now binds a vector.
  const Let* let = s->value.as<Let>();
  ASSERT_TRUE(let) << g;
  EXPECT_EQ(let->var.dtype(), DataType::Float(32, 8));
  expect_same_results(f, g);
}

TEST(VectorizeLoops, TooWideStaysSerial) {
  Buffer A = buf("A", {143}), C = buf("C", {143});
  Var v("v");
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C)}, loop(v, 0, 143, st(C, ld(A, {v}), {v}), ForKind::Vectorized));
  PrimFunc g = pass::vectorize_loops(f);
  EXPECT_EQ(count_loops(g.body(), ForKind::Serial), 1);
  expect_same_results(f, g);
}

TEST(VectorizeLoops, OddWidthRunsAsWholeChunksAndARest) {
  // 18 lanes (a tile's remainder panel): a vector of 16 and one of 2, never
  // an <18 x float> that LLVM would split lane by lane.
  Buffer A = buf("A", {20}), C = buf("C", {20});
  Var v("v");
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C)}, loop(v, 1, 18, st(C, ld(A, {v}) * 2.0f, {v}), ForKind::Vectorized));
  PrimFunc g = pass::vectorize_loops(f);
  EXPECT_EQ(count_fors(g.body()), 0) << g;
  std::vector<Stmt> parts = top_level(g.body());
  ASSERT_EQ(parts.size(), 2u) << g;
  const BufferStore* head = parts[0].as<BufferStore>();
  const BufferStore* rest = parts[1].as<BufferStore>();
  ASSERT_TRUE(head && rest) << g;
  EXPECT_EQ(head->value.dtype().lanes(), 16);
  EXPECT_EQ(rest->value.dtype().lanes(), 2);
  expect_same_results(f, g);
}

TEST(VectorizeLoops, ExtentOneSubstitutes) {
  Buffer A = buf("A", {8}), C = buf("C", {8});
  Var v("v");
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(C)}, loop(v, 3, 1, st(C, ld(A, {v}), {v}), ForKind::Vectorized));
  PrimFunc g = pass::vectorize_loops(f);
  EXPECT_EQ(count_fors(g.body()), 0);
  expect_same_results(f, g);
}

TEST(VectorizeLoops, MatmulInnerAxis) {
  // Vectorizing j of a flattened matmul: C[i, ramp] += A[i, k] * B[k, ramp].
  const int M = 4, N = 8, K = 5;
  Buffer A = buf("A", {M, K}), B = buf("B", {K, N}), C = buf("C", {M, N});
  Var i("i"), j("j"), j2("j2"), k("k");
  Stmt init = loop(j, 0, N, st(C, 0.0f, {i, j}), ForKind::Vectorized);
  Stmt update = loop(k, 0, K, loop(j2, 0, N, st(C, ld(C, {i, j2}) + ld(A, {i, k}) * ld(B, {k, j2}), {i, j2}), ForKind::Vectorized));
  PrimFunc f = pass::storage_flatten(PrimFunc::make("mm", {arg(A), arg(B), arg(C)}, loop(i, 0, M, Seq::make({init, update}))));
  PrimFunc g = pass::vectorize_loops(f);
  EXPECT_EQ(count_loops(g.body(), ForKind::Vectorized), 0) << g;
  EXPECT_EQ(count_fors(g.body()), 2) << g;
  // A[i, k] stays a scalar load, broadcast into the vector product.
  EXPECT_GT(count_exprs(g.body(), [](const Expr& e) { return e.as<Broadcast>() && e.as<Broadcast>()->value.as<BufferLoad>(); }), 0) << g;
  expect_same_results(f, g);
}

// ============================================================ storage_reuse

// A pipeline In -> T1 -> T2 -> T3 -> Out of local 1-D buffers of n elements.
PrimFunc pipeline(int n1, int n2, int n3) {
  Buffer In = buf("In", {16}), Out = buf("Out", {16});
  Buffer T1 = Buffer::make("T1", f32, {n1}, "local"), T2 = Buffer::make("T2", f32, {n2}, "local"), T3 = Buffer::make("T3", f32, {n3}, "local");
  Var a("a"), b("b"), c("c"), d("d");
  Stmt s1 = loop(a, 0, 16, st(T1, ld(In, {a}) + 1.0f, {a}));
  Stmt s2 = loop(b, 0, 16, st(T2, ld(T1, {b}) * 2.0f, {b}));
  Stmt s3 = loop(c, 0, 16, st(T3, ld(T2, {c}) - 3.0f, {c}));
  Stmt s4 = loop(d, 0, 16, st(Out, ld(T3, {d}) * ld(T3, {15 - d}), {d}));
  Stmt body = Allocate::make(T1, Allocate::make(T2, Allocate::make(T3, Seq::make({s1, s2, s3, s4}))));
  return PrimFunc::make("pipeline", {arg(In), arg(Out)}, body);
}

TEST(StorageReuse, DeadBufferIsReused) {
  PrimFunc f = pipeline(16, 16, 16);
  PrimFunc g = pass::storage_reuse(f);
  // T3 starts after T1's last use: they share; T2 overlaps both.
  EXPECT_EQ(count_allocs(g.body()), 2) << g;
  std::set<const Variable*> stored;
  post_order_visit(g.body(), nullptr, [&](const Stmt& s) {
    if (const BufferStore* w = s.as<BufferStore>()) stored.insert(w->buffer->data.get());
  });
  EXPECT_EQ(stored.size(), 3u) << g;  // T1 (= T3), T2 and Out
  expect_same_results(f, g);
}

TEST(StorageReuse, SharedBufferTakesTheLargerSize) {
  PrimFunc f = pipeline(16, 16, 24);
  PrimFunc g = pass::storage_reuse(f);
  int64_t biggest = 0;
  post_order_visit(g.body(), nullptr, [&](const Stmt& s) {
    if (const Allocate* a = s.as<Allocate>()) biggest = std::max(biggest, *as_const_int(a->buffer.shape()[0]));
  });
  EXPECT_EQ(count_allocs(g.body()), 2) << g;
  EXPECT_EQ(biggest, 24) << g;
  expect_same_results(f, g);
}

TEST(StorageReuse, AllocationsAreNarrowed) {
  PrimFunc f = pipeline(16, 16, 16);
  PrimFunc g = pass::storage_reuse(f);
  // T2 lives over statements 1..2 only: its Allocate is not at the top.
  std::vector<Stmt> top = top_level(g.body().as<Allocate>()->body);
  ASSERT_EQ(top.size(), 3u) << g;
  EXPECT_TRUE(top[0].as<For>());
  EXPECT_TRUE(top[1].as<Allocate>());
  EXPECT_TRUE(top[2].as<For>());
}

TEST(StorageReuse, LiveBuffersNeverShare) {
  // All three buffers are read by the last statement: no sharing at all.
  Buffer In = buf("In", {8}), Out = buf("Out", {8});
  std::vector<Buffer> t;
  std::vector<Stmt> seq;
  for (int n = 0; n < 3; ++n) {
    t.push_back(Buffer::make("T" + std::to_string(n), f32, {8}, "local"));
    Var x("x" + std::to_string(n));
    seq.push_back(loop(x, 0, 8, st(t[n], ld(In, {x}) * float(n + 1), {x})));
  }
  Var y("y");
  Expr sum = ld(t[0], {y}) + ld(t[1], {y}) + ld(t[2], {y});
  seq.push_back(loop(y, 0, 8, st(Out, sum, {y})));
  Stmt body = Allocate::make(t[0], Allocate::make(t[1], Allocate::make(t[2], Seq::make(seq))));
  PrimFunc f = PrimFunc::make("live", {arg(In), arg(Out)}, body);
  PrimFunc g = pass::storage_reuse(f);
  EXPECT_EQ(count_allocs(g.body()), 3) << g;
  expect_same_results(f, g);
}

TEST(StorageReuse, DifferentDtypesOrScopesDoNotShare) {
  Buffer In = buf("In", {8}), Out = buf("Out", {8});
  Buffer T1 = Buffer::make("T1", f32, {8}, "local"), T2 = Buffer::make("T2", f32, {8}, "shared"), T3 = Buffer::make("T3", i32, {8}, "local");
  Var a("a"), b("b"), c("c"), d("d");
  Stmt body = Allocate::make(
      T1, Allocate::make(T2, Allocate::make(T3, Seq::make({loop(a, 0, 8, st(T1, ld(In, {a}), {a})), loop(b, 0, 8, st(T2, ld(T1, {b}), {b})),
                                                          loop(c, 0, 8, st(T3, cast(i32, ld(T2, {c})), {c})), loop(d, 0, 8, st(Out, cast(f32, ld(T3, {d})), {d}))}))));
  PrimFunc f = PrimFunc::make("kinds", {arg(In), arg(Out)}, body);
  PrimFunc g = pass::storage_reuse(f);
  EXPECT_EQ(count_allocs(g.body()), 3) << g;
  expect_same_results(f, g);
}

TEST(StorageReuse, InsideALoop) {
  // The pipeline as the body of an outer loop, each stage reading In[r, *].
  Buffer In = buf("In", {3, 16}), Out = buf("Out", {3, 16});
  Buffer T1 = Buffer::make("T1", f32, {16}, "local"), T2 = Buffer::make("T2", f32, {16}, "local"), T3 = Buffer::make("T3", f32, {16}, "local");
  Var r("r"), a("a"), b("b"), c("c"), d("d");
  Stmt body = Seq::make({
      Allocate::make(T1, Seq::make({loop(a, 0, 16, st(T1, ld(In, {r, a}) + 1.0f, {a})),
                                    Allocate::make(T2, Seq::make({loop(b, 0, 16, st(T2, ld(T1, {b}) * 2.0f, {b})),
                                                                  Allocate::make(T3, Seq::make({loop(c, 0, 16, st(T3, ld(T2, {15 - c}), {c})),
                                                                                                loop(d, 0, 16, st(Out, ld(T3, {d}) + ld(In, {r, d}), {r, d}))}))}))})),
  });
  PrimFunc f = PrimFunc::make("nested", {arg(In), arg(Out)}, loop(r, 0, 3, body));
  PrimFunc g = pass::storage_reuse(f);
  EXPECT_EQ(count_allocs(g.body()), 2) << g;
  expect_same_results(f, g);
}

TEST(StorageReuse, UnusedAllocationIsDropped) {
  Buffer In = buf("In", {8}), Out = buf("Out", {8});
  Buffer U = Buffer::make("U", f32, {8}, "local");
  Var a("a");
  PrimFunc f = PrimFunc::make("f", {arg(In), arg(Out)}, Allocate::make(U, loop(a, 0, 8, st(Out, ld(In, {a}), {a}))));
  EXPECT_EQ(count_allocs(pass::storage_reuse(f).body()), 0);
}

// ============================================================ the pipeline

PrimFunc lower_passes(PrimFunc g);

TEST(Passes, LoweringOrderPreservesResults) {
  PrimFunc f = split_elementwise(5, 100, ForKind::Vectorized);
  PrimFunc g = lower_passes(f);
  EXPECT_EQ(count_loops(g.body(), ForKind::Vectorized), 0) << g;
  EXPECT_GT(count_exprs(g.body(), [](const Expr& e) { return e.as<Ramp>() != nullptr; }), 0) << g;
  expect_same_results(f, g);
}

// The passes in the order of core/src/te/lower.cpp.
PrimFunc lower_passes(PrimFunc g) {
  g = pass::storage_flatten(g);
  g = pass::simplify(g);
  g = pass::loop_partition(g);
  g = pass::simplify(g);
  g = pass::unroll_loops(g);
  g = pass::vectorize_loops(g);
  g = pass::simplify(g);
  g = pass::remove_no_op(g);
  g = pass::storage_reuse(g);
  return g;
}

TEST(Passes, PipelineOverShapesAndKinds) {
  for (int n : {5, 8, 13, 64, 100}) {
    for (int factor : {4, 8}) {
      for (ForKind kind : {ForKind::Serial, ForKind::Vectorized, ForKind::Unrolled}) {
        PrimFunc f = split_elementwise(3, n, kind, factor);
        PrimFunc g = lower_passes(f);
        SCOPED_TRACE(to_string(g));
        EXPECT_EQ(count_loops(g.body(), ForKind::Vectorized) + count_loops(g.body(), ForKind::Unrolled), 0);
        // Every guard is settled by partitioning: none survives.
        EXPECT_EQ(count_ifs(g.body()), 0);
        expect_same_results(f, g);
      }
    }
  }
}

TEST(Passes, TiledMatmulWithLocalAccumulator) {
  // C[i, j] for i, j split by 4 (not dividing 10 and 7), accumulated in a
  // local 4x4 tile: k outer loop, the j.inner loop vectorized, i.inner unrolled.
  const int M = 10, N = 7, K = 6;
  Buffer A = buf("A", {M, K}), B = buf("B", {K, N}), C = buf("C", {M, N});
  Buffer T = Buffer::make("T", f32, {4, 4}, "local");
  Var io("io"), jo("jo"), ii("ii"), ji("ji"), k("k"), ii2("ii2"), ji2("ji2"), ii3("ii3"), ji3("ji3");
  auto guarded = [&](const Var& a, const Var& b, Stmt s) {
    Expr i = io * 4 + a, j = jo * 4 + b;
    return IfThenElse::make(likely(i < M), IfThenElse::make(likely(j < N), std::move(s)));
  };
  Expr i2 = io * 4 + ii2, j2 = jo * 4 + ji2, i3 = io * 4 + ii3, j3 = jo * 4 + ji3;
  Stmt init = loop(ii, 0, 4, loop(ji, 0, 4, st(T, 0.0f, {ii, ji}), ForKind::Vectorized), ForKind::Unrolled);
  Stmt update = loop(k, 0, K, loop(ii2, 0, 4, loop(ji2, 0, 4, guarded(ii2, ji2, st(T, ld(T, {ii2, ji2}) + ld(A, {i2, k}) * ld(B, {k, j2}), {ii2, ji2})), ForKind::Vectorized), ForKind::Unrolled));
  Stmt write = loop(ii3, 0, 4, loop(ji3, 0, 4, guarded(ii3, ji3, st(C, ld(T, {ii3, ji3}), {i3, j3})), ForKind::Vectorized));
  Stmt body = loop(io, 0, 3, loop(jo, 0, 2, Allocate::make(T, Seq::make({init, update, write}))));
  PrimFunc f = PrimFunc::make("tiled_mm", {arg(A), arg(B), arg(C)}, body);
  PrimFunc g = lower_passes(f);
  EXPECT_EQ(count_loops(g.body(), ForKind::Vectorized) + count_loops(g.body(), ForKind::Unrolled), 0) << g;
  EXPECT_GT(count_exprs(g.body(), [](const Expr& e) { return e.as<Ramp>() != nullptr; }), 0) << g;
  expect_same_results(f, g);
}

}  // namespace
}  // namespace kiln
