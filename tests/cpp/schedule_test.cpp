// Schedule primitives: argument checks (messages name stage, axis and what
// is allowed), trace JSON round trips, replay, and the workload key.
#include <gtest/gtest.h>

#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ir/structural.h"
#include "kiln/ops/nn.h"
#include "kiln/te/lower.h"
#include "kiln/te/workload_key.h"
#include "test_util.h"

namespace kiln {
namespace {

using te::Schedule;
using te::Tensor;
using testing::throws_with;

struct Mm {
  Tensor A = te::placeholder({16, 12}, DataType::Float(32), "A");
  Tensor B = te::placeholder({12, 8}, DataType::Float(32), "B");
  Tensor C = ops::matmul(A, B);
};

TEST(ScheduleErrors, SplitFactorAndForeignAxis) {
  Mm mm;
  Schedule s = te::create_schedule({mm.C});
  auto& st = s[mm.C];
  EXPECT_TRUE(throws_with([&] { st.split(st.axis("i"), 0); }, "factor 0: the factor must be positive"));
  EXPECT_TRUE(throws_with([&] { st.split(st.axis("i"), -3); }, "stage 'C'"));
  Mm other;
  Schedule s2 = te::create_schedule({other.C});
  IterVar foreign = s2[other.C].axis("i");
  EXPECT_TRUE(throws_with([&] { st.split(foreign, 4); }, "belongs to another stage"));
  auto [io, ii] = st.split(st.axis("i"), 4);
  (void)io, (void)ii;
  EXPECT_TRUE(throws_with([&] { st.axis("i"); }, "leaf axes are [i.outer, i.inner, j, k]"));
}

TEST(ScheduleErrors, UsedAxisAfterSplit) {
  Mm mm;
  Schedule s = te::create_schedule({mm.C});
  auto& st = s[mm.C];
  IterVar i = st.axis("i");
  st.split(i, 4);
  EXPECT_TRUE(throws_with([&] { st.vectorize(i); }, "any more (it was split or fused)"));
}

TEST(ScheduleErrors, VectorizeOrParallelReduction) {
  Mm mm;
  Schedule s = te::create_schedule({mm.C});
  auto& st = s[mm.C];
  EXPECT_TRUE(throws_with([&] { st.vectorize(st.axis("k")); }, "axis 'k' is a reduction axis"));
  EXPECT_TRUE(throws_with([&] { st.parallel(st.axis("k")); }, "reduction axis"));
}

TEST(ScheduleErrors, ComputeInlineReductionAndOutput) {
  Mm mm;
  Tensor R = ops::relu(mm.C);
  Schedule s = te::create_schedule({R});
  EXPECT_TRUE(throws_with([&] { s[mm.C].compute_inline(); }, "compute_inline of stage 'C': it is a reduction"));
  EXPECT_TRUE(throws_with([&] { s[R].compute_inline(); }, "is an output"));
  EXPECT_TRUE(throws_with([&] { s[mm.A].split(IterVar(), 2); }, "input placeholder"));
}

TEST(ScheduleErrors, ComputeAtNonConsumer) {
  Tensor X = te::placeholder({8}, DataType::Float(32), "X");
  Tensor P = te::compute({8}, [&](const std::vector<Var>& i) { return X(i[0]) * 2.0f; }, "P");
  Tensor Q = te::compute({8}, [&](const std::vector<Var>& i) { return X(i[0]) + 1.0f; }, "Q");
  Tensor R = te::compute({8}, [&](const std::vector<Var>& i) { return P(i[0]) + Q(i[0]); }, "R");
  Schedule s = te::create_schedule({R});
  EXPECT_TRUE(throws_with([&] { s[P].compute_at(s[Q], s[Q].axis("i")); }, "'Q' does not read 'P'"));
  EXPECT_NO_THROW(s[P].compute_at(s[R], s[R].axis("i")));
}

TEST(ScheduleErrors, FuseAndReorder) {
  Mm mm;
  Schedule s = te::create_schedule({mm.C});
  auto& st = s[mm.C];
  EXPECT_TRUE(throws_with([&] { st.fuse(st.axis("i"), st.axis("k")); }, "must be adjacent"));
  EXPECT_TRUE(throws_with([&] { st.fuse(st.axis("j"), st.axis("k")); }, "cannot fuse reduction axis with data-parallel axis"));
  EXPECT_TRUE(throws_with([&] { st.reorder({st.axis("i"), st.axis("i")}); }, "appears twice"));
  EXPECT_TRUE(throws_with([&] { st.bind(st.axis("i"), "warpIdx.x"); }, "unknown thread tag 'warpIdx.x'"));
  EXPECT_TRUE(throws_with([&] { st.storage_align(st.axis("i"), 0, 0); }, "factor > 0"));
}

TEST(ScheduleErrors, CacheWriteAfterSplitAndBadRfactor) {
  Mm mm;
  Schedule s = te::create_schedule({mm.C});
  s[mm.C].split(s[mm.C].axis("i"), 4);
  EXPECT_TRUE(throws_with([&] { s.cache_write(mm.C, "local"); }, "must come before any other primitive"));
  EXPECT_TRUE(throws_with([&] { s.rfactor(mm.C, s[mm.C].axis("j")); }, "is not a reduction axis"));
  EXPECT_TRUE(throws_with([&] { s.cache_read(mm.A, "local", {mm.B}); }, "does not read it"));
}

TEST(ScheduleErrors, PackChecksDimensionFactorAndReaders) {
  Mm mm;
  Schedule s = te::create_schedule({mm.C});
  EXPECT_TRUE(throws_with([&] { s.pack(mm.B, {mm.C}, 2, 4); }, "dimension 2 is out of range for a 2-D tensor"));
  EXPECT_TRUE(throws_with([&] { s.pack(mm.B, {mm.C}, 1, 3); }, "(extent 8) must be a constant multiple of the factor 3"));
  EXPECT_TRUE(throws_with([&] { s.pack(mm.B, {mm.A}, 1, 4); }, "does not read it"));
  EXPECT_NO_THROW(s.pack(mm.B, {mm.C}, 1, 4));
}

TEST(ScheduleErrors, LoweringMissingArgument) {
  Mm mm;
  Schedule s = te::create_schedule({mm.C});
  EXPECT_TRUE(throws_with([&] { te::lower(s, {mm.A, mm.C}); }, "placeholder 'B' is read by the computation but is not among the arguments"));
}

Schedule scheduled_matmul(const Mm& mm) {
  Schedule s = te::create_schedule({mm.C});
  Tensor AL = s.cache_read(mm.A, "local", {mm.C});
  Tensor CL = s.cache_write(mm.C, "local");
  auto& st = s[mm.C];
  auto t = st.tile(st.axis("i"), st.axis("j"), 4, 4);
  s[CL].compute_at(st, t[1]);
  auto& cl = s[CL];
  auto [ko, ki] = cl.split(cl.axis("k"), 3);
  cl.reorder({ko, ki, cl.axis("i"), cl.axis("j")});
  s[AL].compute_at(cl, ko);
  cl.vectorize(cl.axis("j"));
  cl.pragma(ko, "auto_unroll_max_step", 16);
  st.parallel(t[0]);
  return s;
}

TEST(Trace, JsonRoundTripGivesSameLoweredIR) {
  Mm mm;
  Schedule s = scheduled_matmul(mm);
  std::string json = s.trace().to_json();
  te::Trace back = te::Trace::from_json(json);
  EXPECT_EQ(back.to_json(), json);
  Schedule replayed = Schedule::from_trace({mm.C}, back);
  EXPECT_EQ(replayed.trace().to_json(), json);
  PrimFunc f1 = te::lower(s, {mm.A, mm.B, mm.C}), f2 = te::lower(replayed, {mm.A, mm.B, mm.C});
  EXPECT_TRUE(structural_equal(f1, f2)) << f1 << "\nvs\n" << f2;
  EXPECT_EQ(to_string(f1), to_string(f2));
}

TEST(Trace, ReplaysOnRenamedDag) {
  Mm mm;
  Schedule s = scheduled_matmul(mm);
  Tensor A2 = te::placeholder({16, 12}, DataType::Float(32), "lhs"), B2 = te::placeholder({12, 8}, DataType::Float(32), "rhs");
  Tensor C2 = ops::matmul(A2, B2, "out");
  EXPECT_EQ(te::workload_key({mm.C}), te::workload_key({C2}));
  Schedule r = Schedule::from_trace({C2}, s.trace());
  EXPECT_TRUE(structural_equal(te::lower(s, {mm.A, mm.B, mm.C}), te::lower(r, {A2, B2, C2})));
}

TEST(Trace, StepThatNoLongerAppliesAndMalformedJson) {
  Mm mm;
  te::Trace t = te::Trace::from_json(R"([{"kind":"split","stage":2,"stage_name":"C","axes":[7],"ints":[4]}])");
  EXPECT_TRUE(throws_with([&] { Schedule::from_trace({mm.C}, t); }, "trace step 0 (split on stage 'C') no longer applies: axis index 7 is out of range"));
  te::Trace bad_factor = te::Trace::from_json(R"([{"kind":"split","stage":2,"axes":[0],"ints":[0]}])");
  EXPECT_TRUE(throws_with([&] { Schedule::from_trace({mm.C}, bad_factor); }, "the factor must be positive"));
  EXPECT_TRUE(throws_with([&] { te::Trace::from_json("[{\"kind\": 3}]"); }, "trace step 0 is malformed"));
  EXPECT_TRUE(throws_with([&] { te::Trace::from_json("{not json"); }, "trace is not valid JSON"));
  EXPECT_TRUE(throws_with([&] { te::Trace::from_json(R"([{"kind":"twist","stage":2}])"); }, "unknown step kind 'twist'"));
  EXPECT_TRUE(throws_with([&] { te::Trace::from_json(R"([{"kind":"split","stage":2,"axes":[0]}])"); }, "trace step 0 is malformed (it is missing arguments"));
}

// Traces written by the trace format before typed steps (the tuning DB holds
// them): they parse, write back byte for byte (the DB identifies a schedule
// by its JSON), and replay to the schedule the same primitives make now.
TEST(Trace, OldFormatJsonReplays) {
  Tensor A = te::placeholder({16, 12}, DataType::Float(32), "A"), B = te::placeholder({12, 8}, DataType::Float(32), "B");
  Tensor C = ops::matmul(A, B);
  Tensor D = ops::relu(C);
  const std::string old_json =
      R"([{"ints":[1,4],"kind":"pack","stage":1,"stage_name":"B","stages":[2]},{"kind":"cache_read","stage":0,"stage_name":"A","stages":[3],"strings":["local"]},)"
      R"({"kind":"cache_write","stage":4,"stage_name":"C","strings":["local"]},{"axes":[0],"axis_names":["i"],"ints":[4],"kind":"split","stage":6,"stage_name":"relu"},)"
      R"({"axes":[2],"axis_names":["j"],"ints":[2],"kind":"split_nparts","stage":6,"stage_name":"relu"},)"
      R"({"axes":[0,2,1,3],"axis_names":["i.outer","j.outer","i.inner","j.inner"],"kind":"reorder","stage":6,"stage_name":"relu"},)"
      R"({"axes":[0,1],"axis_names":["i.outer","j.outer"],"kind":"fuse","stage":6,"stage_name":"relu"},)"
      R"({"axes":[0],"axis_names":["i.outer.j.outer.fused"],"kind":"compute_at","stage":5,"stage_name":"C","stages":[6]},)"
      R"({"axes":[1],"axis_names":["j"],"kind":"compute_at","stage":4,"stage_name":"C.local","stages":[5]},)"
      R"({"axes":[0],"axis_names":["i"],"kind":"compute_at","stage":1,"stage_name":"A.local","stages":[4]},{"kind":"compute_root","stage":3,"stage_name":"B.packed"},)"
      R"({"axes":[0],"axis_names":["i"],"ints":[8,1],"kind":"storage_align","stage":4,"stage_name":"C.local"},)"
      R"({"axes":[0],"axis_names":["i.outer.j.outer.fused"],"kind":"parallel","stage":6,"stage_name":"relu"},)"
      R"({"axes":[2],"axis_names":["j.inner"],"kind":"vectorize","stage":6,"stage_name":"relu"},{"axes":[1],"axis_names":["i.inner"],"kind":"unroll","stage":6,"stage_name":"relu"},)"
      R"({"axes":[0],"axis_names":["i.outer.j.outer.fused"],"ints":[16],"kind":"pragma","stage":6,"stage_name":"relu","strings":["auto_unroll_max_step"]}])";
  te::Trace old = te::Trace::from_json(old_json);
  EXPECT_EQ(old.to_json(), old_json);
  ASSERT_EQ(old.steps.size(), 16u);
  EXPECT_EQ(std::get<te::Pack>(old.steps[0]), (te::Pack{{1, "B"}, 1, 4, {2}}));
  EXPECT_EQ(std::get<te::ComputeAt>(old.steps[7]), (te::ComputeAt{{5, "C"}, 6, {0, "i.outer.j.outer.fused"}}));
  // The same primitives, applied now.
  Schedule s = te::create_schedule({D});
  Tensor BP = s.pack(B, {C}, 1, 4);
  Tensor AS = s.cache_read(A, "local", {C});
  Tensor CL = s.cache_write(C, "local");
  te::Stage& d = s[D];
  auto [io, ii] = d.split(d.axis("i"), 4);
  auto [jo, ji] = d.split_nparts(d.axis("j"), 2);
  d.reorder({io, jo, ii, ji});
  IterVar f = d.fuse(io, jo);
  s[C].compute_at(d, f);
  s[CL].compute_at(s[C], s[C].axis("j"));
  s[AS].compute_at(s[CL], s[CL].leaf_iter_vars()[0]);
  s[BP].compute_root();
  s[CL].storage_align(s[CL].root_iter_vars()[0], 8, 1);
  d.parallel(f);
  d.vectorize(ji);
  d.unroll(ii);
  d.pragma(f, "auto_unroll_max_step", 16);
  EXPECT_EQ(s.trace(), old);
  Schedule r = Schedule::from_trace({D}, old);
  EXPECT_TRUE(structural_equal(te::lower(s, {A, B, D}), te::lower(r, {A, B, D})));

  const std::string old_rfactor =
      R"([{"axes":[2],"axis_names":["k"],"ints":[4],"kind":"split","stage":2,"stage_name":"C"},)"
      R"({"axes":[3],"axis_names":["k.inner"],"ints":[1],"kind":"rfactor","stage":2,"stage_name":"C"},)"
      R"({"axes":[0],"axis_names":["i"],"kind":"parallel","stage":3,"stage_name":"C"}])";
  te::Trace rt = te::Trace::from_json(old_rfactor);
  EXPECT_EQ(rt.to_json(), old_rfactor);
  Schedule s2 = te::create_schedule({C});
  auto [ko, ki] = s2[C].split(s2[C].axis("k"), 4);
  s2.rfactor(C, ki, 1);
  s2[C].parallel(s2[C].axis("i"));
  EXPECT_EQ(s2.trace(), rt);
  EXPECT_TRUE(structural_equal(te::lower(s2, {A, B, C}), te::lower(Schedule::from_trace({C}, rt), {A, B, C})));
}

TEST(WorkloadKey, StructuralNotNominal) {
  Mm mm;
  Tensor A = te::placeholder({16, 12}, DataType::Float(32), "A");
  Tensor B = te::placeholder({12, 9}, DataType::Float(32), "B");
  EXPECT_NE(te::workload_key({mm.C}), te::workload_key({ops::matmul(A, B)}));
  Tensor B16 = te::placeholder({12, 8}, DataType::Float(16), "B");
  Tensor A16 = te::placeholder({16, 12}, DataType::Float(16), "A");
  EXPECT_NE(te::workload_key({mm.C}), te::workload_key({ops::matmul(A16, B16)}));
  EXPECT_NE(te::workload_key({mm.C}), te::workload_key({ops::relu(mm.C)}));
  EXPECT_EQ(te::workload_key({mm.C}).size(), 16u);
}

}  // namespace
}  // namespace kiln
