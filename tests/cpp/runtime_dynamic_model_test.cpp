// Model plans with shape variables (kiln/runtime/model.h, model_shapes.h):
// one plan of three kernels compiled over te.var extents runs at many shapes
// against a naive loop, its arena buffers never overlap while live, bad
// shapes are refused by name, and the plan survives JSON, export and the C API.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/runtime/c_api.h"
#include "kiln/runtime/library_seal.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/model_shapes.h"
#include "kiln/support/error.h"
#ifdef KILN_WITH_LLVM
#include "kiln/codegen/llvm.h"
#include "kiln/driver/build.h"
#include "kiln/ir/op.h"
#include "kiln/te/operation.h"
#include "kiln/te/schedule.h"
#include "error_of.h"
#endif

namespace kiln {
namespace {

using Op = ShapeExpr::Op;
const DataType f32 = DataType::Float(32);

ShapeExpr P(int v) { return ShapeExpr::param(v); }
ShapeExpr C(int64_t v) { return ShapeExpr::constant(v); }
ShapeExpr mul(ShapeExpr a, ShapeExpr b) { return ShapeExpr::binary(Op::Mul, std::move(a), std::move(b)); }
ShapeExpr add(ShapeExpr a, ShapeExpr b) { return ShapeExpr::binary(Op::Add, std::move(a), std::move(b)); }

using kiln::testing::error_of;

// Static shapes from dims at no values: -1 where a dimension reads a variable.
std::vector<int64_t> static_shape(const std::vector<ShapeExpr>& dims) {
  std::vector<int64_t> s;
  for (const ShapeExpr& d : dims) s.push_back(d.is_const() ? d.value : -1);
  return s;
}

ModelTensor tensor(const std::string& name, std::vector<ShapeExpr> dims) { return {name, static_shape(dims), f32, dims}; }

ModelBuffer buffer(ModelBuffer::Kind kind, int index, std::vector<ShapeExpr> dims, int first = 0, int last = 0, int inplace = -1) {
  ModelBuffer b;
  b.kind = kind;
  b.index = index;
  b.shape = static_shape(dims);
  b.dtype = f32;
  b.dims = std::move(dims);
  b.first_step = first;
  b.last_step = last;
  b.inplace_of = inplace;
  return b;
}

/**
 * The plan: X [b, n], Y [n] -> S [2b]:
 *   step 0 dup2:   T1[i, j] = 2 * X[i // 2, j]  (T1: [2b, n], arena)
 *   step 1 addrow: T2[i, j] = T1[i, j] + Y[j]   (T2: [2b, n], arena, may take T1's bytes)
 *   step 2 rowsum: S[i] = sum_j T2[i, j]
 * b in [1, 5000], n unbounded.
 */
ModelPlan dynamic_plan(bool inplace) {
  ModelPlan p;
  p.shape_vars = {"b", "n"};
  p.shape_ranges = {ShapeRange{1, 5000}, std::nullopt};
  ShapeExpr b = P(0), n = P(1), two_b = mul(C(2), P(0));
  p.inputs = {tensor("X", {b, n}), tensor("Y", {n})};
  p.outputs = {tensor("S", {two_b})};
  using K = ModelBuffer::Kind;
  p.buffers = {buffer(K::Input, 0, {b, n}), buffer(K::Input, 1, {n}), buffer(K::Arena, 0, {two_b, n}, 0, 1),
               buffer(K::Arena, 0, {two_b, n}, 1, 2, inplace ? 2 : -1), buffer(K::Output, 0, {two_b})};
  p.kernel_names = {"dup2", "addrow", "rowsum"};
  p.steps = {{"dup2", 0, {0, 2}, 0}, {"addrow", 1, {2, 1, 3}, 0}, {"rowsum", 2, {3, 4}, 0}};
  p.output_buffers = {4};
  return p;
}

// S of dynamic_plan by naive loops, in double.
std::vector<double> reference(const NDArray& x, const NDArray& y) {
  int64_t b = x.shape()[0], n = x.shape()[1];
  std::vector<double> s(2 * b, 0.0);
  for (int64_t i = 0; i < 2 * b; ++i)
    for (int64_t j = 0; j < n; ++j) s[i] += 2.0 * x.data_as<float>()[(i / 2) * n + j] + y.data_as<float>()[j];
  return s;
}

NDArray random_array(std::vector<int64_t> shape, std::mt19937* rng) {
  NDArray a = NDArray::empty(shape, f32);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < a.numel(); ++i) a.data_as<float>()[i] = u(*rng);
  return a;
}

// Live arena buffers (overlapping lifetimes, not one in place of the other) never share a byte.
void expect_no_overlap(const ModelPlan& plan, const BoundShapes& bound, const std::string& at) {
  auto bytes = [&](size_t b) {
    int64_t n = 4;
    for (int64_t d : bound.shapes[b]) n *= d;
    return n;
  };
  for (size_t a = 0; a < plan.buffers.size(); ++a) {
    const ModelBuffer& A = plan.buffers[a];
    if (A.kind != ModelBuffer::Kind::Arena) continue;
    EXPECT_GE(bound.offsets[a], 0) << at;
    EXPECT_LE(bound.offsets[a] + bytes(a), bound.memory.arena_bytes) << at << ": buffer " << a << " lies outside the arena";
    for (size_t c = a + 1; c < plan.buffers.size(); ++c) {
      const ModelBuffer& B = plan.buffers[c];
      if (B.kind != ModelBuffer::Kind::Arena || B.inplace_of == int(a) || A.inplace_of == int(c)) continue;
      bool live_together = A.first_step <= B.last_step && B.first_step <= A.last_step;
      bool apart = bound.offsets[a] + bytes(a) <= bound.offsets[c] || bound.offsets[c] + bytes(c) <= bound.offsets[a];
      EXPECT_TRUE(!live_together || apart || bytes(a) == 0 || bytes(c) == 0) << at << ": buffers " << a << " and " << c << " are live together and overlap";
    }
  }
}

TEST(DynamicModelPlan, RandomPlansNeverOverlapLiveBuffers) {
  // Many arena buffers over two variables with random lifetimes, some in place, planned at random values.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    ModelPlan p;
    p.shape_vars = {"b", "s"};
    p.inputs = {tensor("x", {P(0), P(1)})};
    p.buffers = {buffer(ModelBuffer::Kind::Input, 0, {P(0), P(1)})};
    int steps = 2 + trial % 6;
    for (int i = 0; i < 3 + trial % 9; ++i) {
      int first = std::uniform_int_distribution<int>(0, steps - 1)(rng);
      int last = std::uniform_int_distribution<int>(first, steps - 1)(rng);
      ShapeExpr d0 = add(mul(C(1 + rng() % 4), P(rng() % 2)), C(rng() % 5));
      int inplace = -1;
      // As a graph marks them: the source was written before and dies at the step that writes this one.
      for (size_t c = 1; c < p.buffers.size(); ++c)
        if (p.buffers[c].first_step < first && p.buffers[c].last_step == first && rng() % 2) inplace = static_cast<int>(c);
      p.buffers.push_back(buffer(ModelBuffer::Kind::Arena, 0, {d0, P(1)}, first, last, inplace));
    }
    for (int s = 0; s < steps; ++s) p.steps.push_back({"s" + std::to_string(s), 0, {}, 0});
    for (int k = 0; k < 5; ++k) {
      std::vector<int64_t> values = {int64_t(rng() % 300), int64_t(rng() % 50)};
      BoundShapes bound = bind_plan_shapes(p, values);
      expect_no_overlap(p, bound, "trial " + std::to_string(trial) + " at b=" + std::to_string(values[0]) + ", s=" + std::to_string(values[1]));
    }
  }
}

TEST(DynamicModelPlan, ViewsShareTheirSourcesBytes) {
  // T1 [2b, n] seen as V [n, 2b] (a reshape), then W [2b * n] of V; a wrong view size is named.
  ModelPlan p = dynamic_plan(false);
  ShapeExpr two_b = mul(C(2), P(0));
  p.buffers.push_back(buffer(ModelBuffer::Kind::Arena, 0, {P(1), two_b}));
  p.buffers.back().view_of = 2;
  p.buffers.push_back(buffer(ModelBuffer::Kind::Arena, 0, {mul(two_b, P(1))}));
  p.buffers.back().view_of = 5;
  BoundShapes bound = bind_plan_shapes(p, {3, 7});
  EXPECT_EQ(bound.offsets[5], bound.offsets[2]);
  EXPECT_EQ(bound.offsets[6], bound.offsets[2]);
  EXPECT_EQ(bound.shapes[5], (std::vector<int64_t>{7, 6}));
  EXPECT_EQ(bound.memory.arena_bytes, 2 * ((6 * 7 * 4 + 63) / 64 * 64)) << "a view adds no bytes";
  p.buffers[6].dims = {add(mul(two_b, P(1)), C(1))};
  std::string msg = error_of([&] { bind_plan_shapes(p, {3, 7}); });
  EXPECT_NE(msg.find("views intermediate buffer 2 (of step 'dup2') of shape [6, 7], which is smaller"), std::string::npos) << msg;
  WeightsRecord w{"embed", 0, new_export_id(), ""}, w2;
  std::vector<ModelTensor> specs;
  std::vector<int64_t> offsets;
  EXPECT_EQ(ModelPlan::from_json(p.to_json({}, w), &w2, &specs, &offsets).buffers[6].view_of, 5);
}

TEST(DynamicModelPlan, MemoryQueryAndBound) {
  ModelPlan p = dynamic_plan(false);
  // T1 and T2 are live together at step 1: 2 * 2b*n*4 bytes, each rounded up to 64.
  auto expect_arena = [&](int64_t b, int64_t n) {
    int64_t one = (2 * b * n * 4 + 63) / 64 * 64;
    EXPECT_EQ(plan_memory_at(p, {b, n}).arena_bytes, 2 * one) << "b=" << b << " n=" << n;
  };
  expect_arena(1, 1);
  expect_arena(3, 7);
  expect_arena(100, 33);
  EXPECT_FALSE(plan_memory_bound(p)) << "n has no range";
  p.shape_ranges[1] = ShapeRange{1, 64};
  std::optional<MemoryPlanStats> bound = plan_memory_bound(p);
  ASSERT_TRUE(bound);
  EXPECT_EQ(bound->arena_bytes, plan_memory_at(p, {5000, 64}).arena_bytes);
  for (int64_t b : {1, 17, 4999})
    for (int64_t n : {1, 13, 64}) EXPECT_LE(plan_memory_at(p, {b, n}).arena_bytes, bound->arena_bytes);
  EXPECT_NE(error_of([&] { plan_memory_at(p, {6000, 3}); }).find("shape variable 'b' = 6000, outside its range [1, 5000]"), std::string::npos);
  EXPECT_NE(error_of([&] { plan_memory_at(p, {3}); }).find("the model has 2 shape variables (b, n), got 1 values"), std::string::npos);
}

TEST(DynamicModelPlan, JsonRoundTrip) {
  ModelPlan p = dynamic_plan(true);
  p.constraints = {{ShapeConstraint::Kind::Equal, mul(P(0), P(1)), mul(C(4), P(1)), 1, "Reshape 'r1': b * n == 4 * n"},
                   {ShapeConstraint::Kind::Divisible, P(1), {}, 4, "Split 's1': n % 4 == 0"}};
  WeightsRecord w{"embed", 0, new_export_id(), ""};
  std::string text = p.to_json({}, w);
  EXPECT_NE(text.find("\"format\":2"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("shape_vars":[{"name":"b","range":[1,5000]},{"name":"n"}])"), std::string::npos) << text;
  WeightsRecord w2;
  std::vector<ModelTensor> specs;
  std::vector<int64_t> offsets;
  ModelPlan q = ModelPlan::from_json(text, &w2, &specs, &offsets);
  EXPECT_EQ(q.shape_vars, p.shape_vars);
  EXPECT_EQ(q.shape_ranges, p.shape_ranges);
  EXPECT_EQ(q.constraints, p.constraints);
  ASSERT_EQ(q.buffers.size(), p.buffers.size());
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    EXPECT_EQ(q.buffers[b].dims, p.buffers[b].dims) << b;
    EXPECT_EQ(q.buffers[b].first_step, p.buffers[b].first_step) << b;
    EXPECT_EQ(q.buffers[b].last_step, p.buffers[b].last_step) << b;
    EXPECT_EQ(q.buffers[b].inplace_of, p.buffers[b].inplace_of) << b;
  }
  EXPECT_EQ(q.inputs[0].dims, p.inputs[0].dims);
  EXPECT_EQ(q.outputs[0].dims, p.outputs[0].dims);
  EXPECT_EQ(q.to_json({}, w2), text) << "a second round gives the same text";
  // A static plan writes format 1 with none of the new fields, as before shape variables.
  ModelPlan s;
  s.inputs = {{"x", {4}, f32, {}}};
  s.outputs = {{"y", {4}, f32, {}}};
  s.buffers = {buffer(ModelBuffer::Kind::Input, 0, {}), buffer(ModelBuffer::Kind::Output, 0, {})};
  s.buffers[0].shape = s.buffers[1].shape = {4};
  s.kernel_names = {"k"};
  s.steps = {{"k", 0, {0, 1}, 8}};
  s.output_buffers = {1};
  EXPECT_EQ(s.to_json({}, w), R"({"arena_bytes":0,"buffers":[{"dtype":"float32","index":0,"kind":"input","offset":0,"shape":[4]},)"
                              R"({"dtype":"float32","index":0,"kind":"output","offset":0,"shape":[4]}],"constants":[],"format":1,)"
                              R"("inputs":[{"dtype":"float32","name":"x","shape":[4]}],"kernel_names":["k"],"output_buffers":[1],)"
                              R"("outputs":[{"dtype":"float32","name":"y","shape":[4]}],"steps":[{"args":[0,1],"flop":8.0,"kernel":0,"name":"k"}],)"
                              R"("weights":{"bytes":0,"export_id":")" +
                                  w.export_id + R"(","mode":"embed"}})");
  // A damaged constraint is named.
  std::string bad = text;
  bad.replace(bad.find("\"divisible\""), 11, "\"power\"");
  EXPECT_NE(error_of([&] { ModelPlan::from_json(bad, &w2, &specs, &offsets); }).find("corrupt model plan: unknown shape constraint kind 'power'"),
            std::string::npos);
}

}  // namespace

#ifdef KILN_WITH_LLVM
namespace {

using te::Tensor;

// The three kernels over te.var extents (dynamic) or the constants b, n (static).
std::vector<Module> build_kernels(bool dynamic, int64_t B = 0, int64_t N = 0) {
  auto dim = [&](const char* name, int64_t v) { return dynamic ? Expr(Var(name)) : Expr(static_cast<int>(v)); };
  std::vector<Module> mods;
  {
    Expr b = dim("b", B), n = dim("n", N);
    Tensor X = te::placeholder({b, n}, f32, "X");
    Tensor T = te::compute(
        {b * 2, n}, [&](const std::vector<Var>& i) { return X(floordiv(i[0], 2), i[1]) * 2.f; }, "T");
    mods.push_back(build(te::create_schedule({T}), {X, T}, "llvm", "dup2"));
  }
  {
    Expr m = dim("m", 2 * B), n = dim("n", N);
    Tensor A = te::placeholder({m, n}, f32, "A"), Y = te::placeholder({n}, f32, "Y");
    Tensor T = te::compute(
        {m, n}, [&](const std::vector<Var>& i) { return A(i[0], i[1]) + Y(i[1]); }, "T");
    mods.push_back(build(te::create_schedule({T}), {A, Y, T}, "llvm", "addrow"));
  }
  {
    Expr m = dim("m", 2 * B), n = dim("n", N);
    Tensor A = te::placeholder({m, n}, f32, "A");
    IterVar k = te::reduce_axis(Range(0, n), "k");
    Tensor S = te::compute(
        {m}, [&](const std::vector<Var>& i) { return te::sum(A(i[0], k->var), {k}); }, "S");
    mods.push_back(build(te::create_schedule({S}), {A, S}, "llvm", "rowsum"));
  }
  return mods;
}

void expect_matches_reference(const NDArray& s, const NDArray& x, const NDArray& y, const std::string& at) {
  std::vector<double> want = reference(x, y);
  ASSERT_EQ(s.shape(), std::vector<int64_t>{static_cast<int64_t>(want.size())}) << at;
  for (size_t i = 0; i < want.size(); ++i) {
    double tol = 1e-4 * (1.0 + std::fabs(want[i])) + 1e-5 * static_cast<double>(x.shape()[1]);
    ASSERT_NEAR(s.data_as<float>()[i], want[i], tol) << at << " element " << i;
  }
}

class DynamicModelRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { kernels_ = new std::vector<Module>(build_kernels(true)); }
  static void TearDownTestSuite() { delete kernels_; }
  static std::vector<Module>* kernels_;
  std::mt19937 rng_{11};
};
std::vector<Module>* DynamicModelRun::kernels_ = nullptr;

TEST_F(DynamicModelRun, ManyShapesMatchNaiveLoops) {
  for (bool inplace : {false, true}) {
    ModelPlan plan = dynamic_plan(inplace);
    ModelRunner runner(plan, Module::combine(*kernels_));
    // 1, primes, large, empty rows; more than the cache's 16 entries, then the first ones again (planned anew).
    std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},     {1, 7},     {2, 3},    {3, 5},    {7, 13},  {13, 1},  {31, 37}, {64, 3},
                                                       {257, 129}, {1000, 61}, {4999, 3}, {5000, 2}, {17, 19}, {23, 29}, {41, 43}, {53, 59},
                                                       {61, 67},   {71, 2},    {9, 0},    {1, 1},    {1, 7},   {3, 5},   {3, 5}};
    for (auto [b, n] : shapes) {
      std::string at = "b=" + std::to_string(b) + ", n=" + std::to_string(n) + (inplace ? " (in place)" : "");
      NDArray x = random_array({b, n}, &rng_), y = random_array({n}, &rng_);
      std::vector<NDArray> out = runner.run({x, y});
      ASSERT_EQ(out.size(), 1u);
      expect_matches_reference(out[0], x, y, at);
      expect_no_overlap(plan, bind_plan_shapes(plan, {b, n}), at);
    }
    EXPECT_EQ(runner.cached_shapes(), 16u) << "19 shapes seen: the 16 latest kept";
    // In place, T2 takes T1's bytes: the arena holds one of them.
    int64_t one = (2 * 100 * 10 * 4 + 63) / 64 * 64;
    EXPECT_EQ(runner.memory({100, 10}).arena_bytes, inplace ? one : 2 * one);
  }
}

TEST_F(DynamicModelRun, BadShapesAreRefusedByName) {
  ModelRunner runner(dynamic_plan(false), Module::combine(*kernels_));
  auto run = [&](std::vector<int64_t> xs, std::vector<int64_t> ys) {
    return error_of([&] { runner.run({random_array(xs, &rng_), random_array(ys, &rng_)}); });
  };
  std::string msg = run({3, 5}, {4});
  EXPECT_NE(msg.find("input 'Y' has 4 in dimension 0 (shape [4]); the model expects n = 5 there, with n = 5 (from input 'X' dimension 1); "
                     "pass inputs whose shapes agree"),
            std::string::npos)
      << msg;
  msg = run({6000, 2}, {2});
  EXPECT_NE(msg.find("input 'X' dimension 0 gives shape variable 'b' = 6000, outside its range [1, 5000]; pass a b between 1 and 5000"), std::string::npos)
      << msg;
  msg = run({0, 2}, {2});
  EXPECT_NE(msg.find("'b' = 0, outside its range [1, 5000]"), std::string::npos) << msg;
  msg = run({3}, {3});
  EXPECT_NE(msg.find("input 'X' has shape [3] of rank 1; the model expects rank 2 (shape [-1, -1]"), std::string::npos) << msg;
  // A seen shape, then a wrong one with the same variables' values: still refused (the cache keys on all inputs).
  runner.run({random_array({3, 5}, &rng_), random_array({5}, &rng_)});
  msg = run({3, 5}, {6});
  EXPECT_NE(msg.find("input 'Y' has 6 in dimension 0"), std::string::npos) << msg;
  // Constraints name their origin and the values.
  ModelPlan p = dynamic_plan(false);
  p.constraints = {{ShapeConstraint::Kind::Divisible, P(1), {}, 3, "Split 's1': n % 3 == 0"},
                   {ShapeConstraint::Kind::Equal, mul(P(0), P(1)), C(12), 1, "Reshape 'r1': b * n == 12"}};
  ModelRunner constrained(p, Module::combine(*kernels_));
  msg = error_of([&] { constrained.run({random_array({2, 5}, &rng_), random_array({5}, &rng_)}); });
  EXPECT_NE(msg.find("the input shapes break the model's constraint 'Split 's1': n % 3 == 0': n = 5 is not a multiple of 3 with "
                     "n = 5 (from input 'X' dimension 1)"),
            std::string::npos)
      << msg;
  msg = error_of([&] { constrained.run({random_array({2, 3}, &rng_), random_array({3}, &rng_)}); });
  EXPECT_NE(msg.find("constraint 'Reshape 'r1': b * n == 12': b * n = 6 differs from 12 with b = 2 (from input 'X' dimension 0), n = 3"), std::string::npos)
      << msg;
  NDArray x = random_array({4, 3}, &rng_), y = random_array({3}, &rng_);
  expect_matches_reference(constrained.run({x, y})[0], x, y, "b=4, n=3 (constrained)");
}

TEST_F(DynamicModelRun, PlansTheRuntimeCannotBindAreRefused) {
  ModelPlan p = dynamic_plan(false);
  p.shape_vars.push_back("k");
  p.shape_ranges.push_back(std::nullopt);
  std::string msg = error_of([&] { ModelRunner(p, Module::combine(*kernels_)); });
  EXPECT_NE(msg.find("shape variable 'k' is no plain dimension of any input"), std::string::npos) << msg;
  p = dynamic_plan(false);
  p.buffers[2].last_step = 7;
  msg = error_of([&] { ModelRunner(p, Module::combine(*kernels_)); });
  EXPECT_NE(msg.find("corrupt dynamic plan: arena buffer 2 lives from step 0 to 7 of 3"), std::string::npos) << msg;
  // Dims that disagree with a kernel are caught by its binder at the first call of that shape.
  p = dynamic_plan(false);
  p.buffers[3].dims[1] = add(P(1), C(1));
  ModelRunner bad(p, Module::combine(*kernels_));
  msg = error_of([&] { bad.run({random_array({2, 3}, &rng_), random_array({3}, &rng_)}); });
  EXPECT_NE(msg.find("at b = 2, n = 3, step 'addrow' cannot call its kernel"), std::string::npos) << msg;
}

// A static plan of the same kernels at b, n (arena laid out once, as the graph does).
ModelRunner static_runner(int64_t b, int64_t n) {
  ModelPlan p = dynamic_plan(false);
  p.shape_vars.clear();
  p.shape_ranges.clear();
  std::vector<PlannedValue> values;
  for (ModelBuffer& buf : p.buffers) {
    buf.shape.clear();
    for (const ShapeExpr& d : buf.dims) buf.shape.push_back(*d.eval(std::vector<int64_t>{b, n}.data(), 2));
    buf.dims.clear();
    if (buf.kind == ModelBuffer::Kind::Arena) values.push_back({buf.bytes(), buf.first_step, buf.last_step, -1, -1});
  }
  p.arena_bytes = plan_memory(&values).arena_bytes;
  size_t v = 0;
  for (ModelBuffer& buf : p.buffers)
    if (buf.kind == ModelBuffer::Kind::Arena) buf.offset = values[v++].offset;
  for (ModelTensor* t : {&p.inputs[0], &p.inputs[1], &p.outputs[0]}) {
    t->shape.clear();
    for (const ShapeExpr& d : t->dims) t->shape.push_back(*d.eval(std::vector<int64_t>{b, n}.data(), 2));
    t->dims.clear();
  }
  return ModelRunner(p, Module::combine(build_kernels(false, b, n)));
}

TEST_F(DynamicModelRun, PerCallOverheadAtASeenShape) {
  // Tiny shapes, so the time is the runner's: static plan vs the same plan with shape variables.
  const int64_t b = 2, n = 8;
  ModelRunner stat = static_runner(b, n), dyn(dynamic_plan(false), Module::combine(*kernels_));
  NDArray x = random_array({b, n}, &rng_), y = random_array({n}, &rng_);
  expect_matches_reference(stat.run({x, y})[0], x, y, "static");
  expect_matches_reference(dyn.run({x, y})[0], x, y, "dynamic");
  using Clock = std::chrono::steady_clock;
  auto per_call = [&](const ModelRunner& r) {
    const int calls = 20000;
    auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) r.run({x, y});
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls;
  };
  double best_static = 1e9, best_dynamic = 1e9;
  for (int rep = 0; rep < 5; ++rep) {  // interleaved, best of 5
    best_static = std::min(best_static, per_call(stat));
    best_dynamic = std::min(best_dynamic, per_call(dyn));
  }
  std::printf("3-step plan, X [%ld, %ld], per call (best of 5 x 20000): static %.3f us, dynamic %.3f us, overhead %.3f us\n", static_cast<long>(b),
              static_cast<long>(n), best_static, best_dynamic, best_dynamic - best_static);
  // A new shape: bind, check, plan the arena and run each kernel's binder once (on a fresh runner each time).
  double best_new = 1e9;
  for (int rep = 0; rep < 20; ++rep) {
    ModelRunner fresh(dynamic_plan(false), Module::combine(*kernels_));
    auto t0 = Clock::now();
    fresh.run({x, y});
    best_new = std::min(best_new, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::printf("first call at a new shape (bind, check, plan, kernel binders, run): %.3f us\n", best_new);
  // Generous: a seen shape must not re-plan (planning and binding cost tens of microseconds).
  EXPECT_LT(best_dynamic, best_static + 5.0);
}

// A temporary directory, removed with its files.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln_dyn_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Writes `plan` over the kernels as a model library with (no) embedded weights, as Executor::export_library does.
void export_model(const ModelPlan& plan, const std::vector<Module>& kernels, const std::string& so, const TempDir& dir) {
  codegen::LibraryExtras extras;
  extras.export_id = new_export_id();
  WeightsLayout layout = layout_weights(plan.constants);
  std::string blob = (dir.path / "weights.bin").string();
  write_weights(blob, plan.constants, layout, "");
  extras.strings.push_back({"kiln_model_plan", plan.to_json(layout.offsets, WeightsRecord{"embed", layout.bytes, extras.export_id, ""})});
  extras.blobs.push_back({"kiln_model_weights", blob});
  codegen::export_modules_library(kernels, so, extras);
}

DLTensor dl(const NDArray& a) { return a.dltensor(); }

TEST_F(DynamicModelRun, ExportedLibraryRunsThroughTheCApi) {
  TempDir dir;
  std::string so = (dir.path / "dyn.so").string();
  ModelPlan plan = dynamic_plan(true);
  export_model(plan, *kernels_, so, dir);
  ModelRunner loaded = ModelRunner::load(so);
  EXPECT_EQ(loaded.plan().shape_vars, plan.shape_vars);
  for (auto [b, n] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 3}, {129, 31}}) {
    NDArray x = random_array({b, n}, &rng_), y = random_array({n}, &rng_);
    expect_matches_reference(loaded.run({x, y})[0], x, y, "loaded, b=" + std::to_string(b));
  }
  KilnModel* m = nullptr;
  ASSERT_EQ(kiln_model_load(so.c_str(), &m), KILN_OK) << kiln_last_error();
  int nvars = 0;
  ASSERT_EQ(kiln_model_num_shape_vars(m, &nvars), KILN_OK);
  EXPECT_EQ(nvars, 2);
  const char* name = nullptr;
  int64_t lo = 0, hi = 0;
  ASSERT_EQ(kiln_model_shape_var(m, 0, &name, &lo, &hi), KILN_OK);
  EXPECT_EQ(std::string(name) + " " + std::to_string(lo) + " " + std::to_string(hi), "b 1 5000");
  ASSERT_EQ(kiln_model_shape_var(m, 1, &name, &lo, &hi), KILN_OK);
  EXPECT_EQ(std::string(name) + " " + std::to_string(lo) + " " + std::to_string(hi), "n -1 -1");
  EXPECT_EQ(kiln_model_shape_var(m, 2, &name, &lo, &hi), KILN_ERR_BAD_ARGUMENT);
  int ndim = 0;
  const int64_t* shape = nullptr;
  ASSERT_EQ(kiln_model_input_info(m, 0, nullptr, &ndim, &shape, nullptr), KILN_OK);
  EXPECT_EQ(std::vector<int64_t>(shape, shape + ndim), (std::vector<int64_t>{-1, -1}));
  for (auto [b, n] : std::vector<std::pair<int64_t, int64_t>>{{2, 3}, {37, 11}, {2, 3}}) {
    NDArray x = random_array({b, n}, &rng_), y = random_array({n}, &rng_);
    DLTensor xt = dl(x), yt = dl(y);
    ASSERT_EQ(kiln_model_set_input(m, 0, &xt), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_model_set_input_by_name(m, "Y", &yt), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_model_run(m), KILN_OK) << kiln_last_error();
    const DLTensor* out = nullptr;
    ASSERT_EQ(kiln_model_output(m, 0, &out), KILN_OK);
    ASSERT_EQ(out->ndim, 1);
    EXPECT_EQ(out->shape[0], 2 * b) << "the output's shape of this run";
    NDArray copy = NDArray::empty({2 * b}, f32);
    DLTensor ct = dl(copy);
    ASSERT_EQ(kiln_model_get_output(m, 0, &ct), KILN_OK) << kiln_last_error();
    expect_matches_reference(copy, x, y, "C API, b=" + std::to_string(b));
    NDArray wrong = NDArray::empty({2 * b + 1}, f32);
    DLTensor wt = dl(wrong);
    EXPECT_EQ(kiln_model_get_output(m, 0, &wt), KILN_ERR_MISMATCH);
  }
  // Shapes that disagree pass set_input (any size goes there) and are refused by the run, by name.
  NDArray x = random_array({4, 5}, &rng_), y = random_array({6}, &rng_), x1 = random_array({4}, &rng_);
  DLTensor xt = dl(x), yt = dl(y), x1t = dl(x1);
  EXPECT_EQ(kiln_model_set_input(m, 0, &x1t), KILN_ERR_MISMATCH) << "rank 1 for rank 2";
  ASSERT_EQ(kiln_model_set_input(m, 0, &xt), KILN_OK);
  ASSERT_EQ(kiln_model_set_input(m, 1, &yt), KILN_OK);
  EXPECT_EQ(kiln_model_run(m), KILN_ERR_MISMATCH);
  EXPECT_NE(std::string(kiln_last_error()).find("input 'Y' has 6 in dimension 0 (shape [6]); the model expects n = 5 there"), std::string::npos)
      << kiln_last_error();
  int64_t bytes = 0;
  int64_t values[2] = {100, 10};
  ASSERT_EQ(kiln_model_memory(m, values, 2, &bytes), KILN_OK) << kiln_last_error();
  EXPECT_EQ(bytes, (2 * 100 * 10 * 4 + 63) / 64 * 64) << "T2 in place of T1: one buffer";
  values[0] = 5001;
  EXPECT_EQ(kiln_model_memory(m, values, 2, &bytes), KILN_ERR_MISMATCH);
  EXPECT_NE(std::string(kiln_last_error()).find("'b' = 5001, outside its range [1, 5000]"), std::string::npos) << kiln_last_error();
  EXPECT_EQ(kiln_model_memory(m, values, 1, &bytes), KILN_ERR_BAD_ARGUMENT);
  EXPECT_EQ(kiln_model_memory_bound(m, &bytes), KILN_ERR_NOT_FOUND) << "n has no range";
  kiln_model_free(m);
}

// addrow plus one: a variant of step 1 whose choice shows in S (each row sum grows by n).
Module addrow_plus_one() {
  Expr m = Var("m"), n = Var("n");
  Tensor A = te::placeholder({m, n}, f32, "A"), Y = te::placeholder({n}, f32, "Y");
  Tensor T = te::compute(
      {m, n}, [&](const std::vector<Var>& i) { return A(i[0], i[1]) + Y(i[1]) + 1.f; }, "T");
  return build(te::create_schedule({T}), {A, Y, T}, "llvm", "addrow1");
}

// dynamic_plan with step 1's variant kernel 3 (addrow1) where b <= 4, or where b * n is exactly 60.
ModelPlan plan_with_variants() {
  ModelPlan p = dynamic_plan(true);
  p.kernel_names.push_back("addrow1");
  p.steps[1].variants = {{3, {{P(0), 1, 4}}}, {3, {{mul(P(0), P(1)), 60, 60}}}};
  return p;
}

// Whether the run at (b, n) took the variant: its sums exceed the reference by n.
bool took_variant(const ModelRunner& runner, int64_t b, int64_t n, std::mt19937* rng) {
  NDArray x = random_array({b, n}, rng), y = random_array({n}, rng);
  NDArray s = runner.run({x, y})[0];
  std::vector<double> want = reference(x, y);
  EXPECT_EQ(s.numel(), static_cast<int64_t>(want.size()));
  bool plus = true, plain = true;
  for (size_t i = 0; i < want.size(); ++i) {
    double tol = 1e-4 * (1.0 + std::fabs(want[i])) + 1e-5 * static_cast<double>(n);
    plus = plus && std::fabs(s.data_as<float>()[i] - (want[i] + static_cast<double>(n))) <= tol;
    plain = plain && std::fabs(s.data_as<float>()[i] - want[i]) <= tol;
  }
  EXPECT_TRUE(plus != plain) << "b=" << b << ", n=" << n << ": S is neither the variant's nor the fallback's";
  return plus;
}

TEST_F(DynamicModelRun, StepVariantsAreChosenPerShapeAndSurviveJsonAndExport) {
  std::vector<Module> kernels = *kernels_;
  kernels.push_back(addrow_plus_one());
  ModelPlan plan = plan_with_variants();
  // (b, n) -> whether the variant runs: b in [1, 4], or b * n == 60; else the step's own kernel.
  std::vector<std::tuple<int64_t, int64_t, bool>> cases = {{1, 3, true},  {4, 9, true},   {5, 9, false}, {6, 10, true},
                                                           {5, 12, true}, {7, 10, false}, {4, 9, true},  {100, 3, false}};
  ModelRunner runner(plan, Module::combine(kernels));
  for (auto [b, n, variant] : cases) EXPECT_EQ(took_variant(runner, b, n, &rng_), variant) << "b=" << b << ", n=" << n;
  // JSON keeps the variants; an exported library dispatches the same.
  WeightsRecord w{"embed", 0, new_export_id(), ""}, w2;
  std::vector<ModelTensor> specs;
  std::vector<int64_t> offsets;
  std::string text = plan.to_json({}, w);
  EXPECT_NE(text.find(R"("variants":[{"kernel":3,"when":[[{"param":0},1,4]]},)"), std::string::npos) << text;
  ModelPlan back = ModelPlan::from_json(text, &w2, &specs, &offsets);
  EXPECT_EQ(back.steps[1].variants, plan.steps[1].variants);
  EXPECT_TRUE(back.steps[0].variants.empty());
  TempDir dir;
  std::string so = (dir.path / "variants.so").string();
  export_model(plan, kernels, so, dir);
  ModelRunner loaded = ModelRunner::load(so);
  for (auto [b, n, variant] : cases) EXPECT_EQ(took_variant(loaded, b, n, &rng_), variant) << "loaded, b=" << b << ", n=" << n;
}

TEST_F(DynamicModelRun, CorruptVariantsAreRefusedByName) {
  std::vector<Module> kernels = *kernels_;
  kernels.push_back(addrow_plus_one());
  auto refused = [&](const std::function<void(ModelPlan&)>& damage) {
    ModelPlan p = plan_with_variants();
    damage(p);
    return error_of([&] { ModelRunner(p, Module::combine(kernels)); });
  };
  EXPECT_NE(refused([](ModelPlan& p) { p.steps[1].variants[0].kernel = 9; }).find("corrupt plan: a variant of step addrow names no kernel"),
            std::string::npos);
  EXPECT_NE(refused([](ModelPlan& p) { p.steps[1].variants[1].when[0].expr = P(5); }).find("tests a shape variable the plan does not have"),
            std::string::npos);
  EXPECT_NE(refused([](ModelPlan& p) { p.steps[1].variants[0].when[0].lo = 9; }).find("tests a size in the empty range [9, 4]"), std::string::npos);
  // A variant whose kernel takes other arguments than the step's.
  EXPECT_NE(refused([](ModelPlan& p) { p.steps[1].variants[0].kernel = 2; }).find("corrupt dynamic plan: kernel 'rowsum' parameter 2 'm' is a scalar where step 'addrow' puts a buffer"),
            std::string::npos);
  // A static plan has no shape variables to choose by.
  ModelPlan s = static_runner(2, 3).plan();
  s.kernel_names.push_back("addrow1");
  s.steps[1].variants = {{3, {}}};
  EXPECT_NE(error_of([&] { ModelRunner(s, Module::combine(kernels)); }).find("has kernel variants, but the plan has no shape variables"), std::string::npos);
  // JSON: a condition that is not [expression, lo, hi].
  WeightsRecord w{"embed", 0, new_export_id(), ""}, w2;
  std::vector<ModelTensor> specs;
  std::vector<int64_t> offsets;
  std::string text = plan_with_variants().to_json({}, w);
  text.replace(text.find("[{\"param\":0},1,4]"), 17, "[1,4]");
  std::string msg = error_of([&] { ModelPlan::from_json(text, &w2, &specs, &offsets); });
  EXPECT_NE(msg.find("corrupt model plan: a variant of step 'addrow' has the condition [1,4], not [size expression, lo, hi]"), std::string::npos) << msg;
}

}  // namespace
#endif  // KILN_WITH_LLVM

}  // namespace kiln
