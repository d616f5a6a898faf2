// Features of the cost model (tuner/include/kiln/tuner/features.h): counts,
// annotations, strides, footprints and reuse of hand-built loop nests, where
// the expected values can be worked out by hand, and of lowered schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "kiln/ir/op.h"
#include "kiln/ops/nn.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"
#include "kiln/tuner/features.h"
#include "random_schedule.h"

namespace kiln {
namespace {

using tuner::extract_features;
using tuner::Features;

const DataType f32 = DataType::Float(32);

Expr ld(const Buffer& b, Expr idx) { return BufferLoad::make(b, {std::move(idx)}); }
Stmt st(const Buffer& b, Expr v, Expr idx) { return BufferStore::make(b, std::move(v), {std::move(idx)}); }
Stmt loop(const Var& v, Expr extent, Stmt body, ForKind kind = ForKind::Serial) { return For::make(v, 0, std::move(extent), kind, std::move(body)); }
Param arg(const Buffer& b) { return Param{b->data, b}; }
Buffer buf(const std::string& name, int64_t n, const std::string& scope = "global") { return Buffer::make(name, f32, {IntImm::make(DataType::Int(32), n)}, scope); }

/** The scale of every count: log2(1 + x). */
float lg(double x) { return static_cast<float>(std::log2(1.0 + x)); }

int col(const std::string& name) {
  const auto& names = tuner::feature_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<int>(i);
  ADD_FAILURE() << "no feature column named " << name;
  return 0;
}

float at(const Features& f, int row, const std::string& name) { return f.values[static_cast<size_t>(row) * f.cols + col(name)]; }

// C[i*16 + j] = C[i*16 + j] + A[i*16 + k] * B[k*16 + j] over i < 64, j < 16, k < 8
// (k innermost), with the outer loop of the given kind.
struct SmallMatmul {
  Buffer A = buf("A", 64 * 8), B = buf("B", 8 * 16), C = buf("C", 64 * 16);
  Var i{"i"}, j{"j"}, k{"k"};
  PrimFunc make(ForKind outer = ForKind::Serial) const {
    Expr c_idx = i * 16 + j;
    Stmt update = st(C, ld(C, c_idx) + ld(A, i * 8 + k) * ld(B, k * 16 + j), c_idx);
    Stmt body = loop(i, 64, loop(j, 16, loop(k, 8, update)), outer);
    return PrimFunc::make("mm", {arg(A), arg(B), arg(C)}, body);
  }
};

TEST(TunerFeatures, NamesAreFixedAndUnique) {
  const auto& names = tuner::feature_names();
  EXPECT_EQ(static_cast<int>(names.size()), tuner::num_feature_columns());
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  EXPECT_FALSE(tuner::feature_extractor_name().empty());
  SmallMatmul mm;
  Features f = extract_features(mm.make());
  EXPECT_EQ(f.cols, tuner::num_feature_columns());
  EXPECT_EQ(f.values.size(), static_cast<size_t>(f.rows) * f.cols);
}

TEST(TunerFeatures, ArithmeticCountsOfAMatmul) {
  SmallMatmul mm;
  Features f = extract_features(mm.make());
  ASSERT_EQ(f.rows, 1);
  const double iters = 64.0 * 16 * 8;
  EXPECT_FLOAT_EQ(at(f, 0, "float_fma"), lg(iters));
  EXPECT_FLOAT_EQ(at(f, 0, "float_mul"), lg(iters));
  EXPECT_FLOAT_EQ(at(f, 0, "float_addsub"), lg(iters));
  EXPECT_FLOAT_EQ(at(f, 0, "float_div"), 0.f);
  EXPECT_FLOAT_EQ(at(f, 0, "float_math"), 0.f);
  // Index arithmetic: i*16 + j twice, i*8 + k, k*16 + j: 4 adds and 4 muls per iteration.
  EXPECT_FLOAT_EQ(at(f, 0, "int_addsub"), lg(4 * iters));
  EXPECT_FLOAT_EQ(at(f, 0, "int_mul"), lg(4 * iters));
  EXPECT_FLOAT_EQ(at(f, 0, "loop_depth"), 3.f);
  EXPECT_FLOAT_EQ(at(f, 0, "loop_prod"), lg(iters));
  EXPECT_FLOAT_EQ(at(f, 0, "inner_ext0"), lg(8));
  EXPECT_FLOAT_EQ(at(f, 0, "inner_ext1"), lg(16));
  EXPECT_FLOAT_EQ(at(f, 0, "inner_ext2"), lg(64));
  EXPECT_FLOAT_EQ(at(f, 0, "inner_ext3"), 0.f);
  EXPECT_FLOAT_EQ(at(f, 0, "is_update"), 1.f);
  EXPECT_FLOAT_EQ(at(f, 0, "is_init"), 0.f);
  EXPECT_FLOAT_EQ(at(f, 0, "to_param"), 1.f);
  EXPECT_FLOAT_EQ(at(f, 0, "par_present"), 0.f);
  EXPECT_FLOAT_EQ(at(f, 0, "vec_present"), 0.f);
}

// Float ops per byte touched at each loop level, by hand: an update of C
// reads C, A, B (2 float ops, 12 bytes an iteration). With the i loop fixed
// the j, k loops touch 16 of C, 8 of A and all 128 of B; with j fixed too,
// 1, 8 and 8.
TEST(TunerFeatures, ArithmeticIntensityCurveOfAMatmul) {
  SmallMatmul mm;
  Features f = extract_features(mm.make());
  ASSERT_EQ(f.rows, 1);
  const double level[] = {2.0 * 64 * 16 * 8 / (4 * (1024 + 512 + 128)), 2.0 * 16 * 8 / (4 * (16 + 8 + 128)), 2.0 * 8 / (4 * (1 + 8 + 8)),
                          2.0 / 12};
  // Ten points over the three levels and the single iteration: every third is a level.
  EXPECT_FLOAT_EQ(at(f, 0, "intensity0"), lg(level[0]));
  EXPECT_FLOAT_EQ(at(f, 0, "intensity1"), lg(level[0] * 2 / 3 + level[1] / 3));
  EXPECT_FLOAT_EQ(at(f, 0, "intensity3"), lg(level[1]));
  EXPECT_FLOAT_EQ(at(f, 0, "intensity6"), lg(level[2]));
  EXPECT_FLOAT_EQ(at(f, 0, "intensity9"), lg(level[3]));
  // 6.5 KiB in all: each cache brings every byte in once.
  EXPECT_FLOAT_EQ(at(f, 0, "traffic_32k"), lg(4 * (1024 + 512 + 128)));
  EXPECT_FLOAT_EQ(at(f, 0, "traffic_32k_intensity"), lg(level[0]));
  EXPECT_FLOAT_EQ(at(f, 0, "traffic_512k"), lg(4 * (1024 + 512 + 128)));
}

// A 64 x 64 x 256 matmul touches 144 KiB: a 32 KiB cache holds only what one
// (i, j) iteration touches (C 1, A 256 and B 256 floats), brought in again
// for each of the 64 x 64 iterations; a 512 KiB cache holds it all.
TEST(TunerFeatures, CacheTrafficOfAMatmulBiggerThanTheCache) {
  Buffer A = buf("A", 64 * 256), B = buf("B", 256 * 64), C = buf("C", 64 * 64);
  Var i("i"), j("j"), k("k");
  Stmt update = st(C, ld(C, i * 64 + j) + ld(A, i * 256 + k) * ld(B, k * 64 + j), i * 64 + j);
  PrimFunc fn = PrimFunc::make("mm", {arg(A), arg(B), arg(C)}, loop(i, 64, loop(j, 64, loop(k, 256, update))));
  Features f = extract_features(fn);
  ASSERT_EQ(f.rows, 1);
  const double ops = 2.0 * 64 * 64 * 256;
  const double small = 64.0 * 64 * 4 * (1 + 256 + 256), all = 4.0 * (64 * 256 + 256 * 64 + 64 * 64);
  EXPECT_FLOAT_EQ(at(f, 0, "traffic_32k"), lg(small));
  EXPECT_FLOAT_EQ(at(f, 0, "traffic_32k_intensity"), lg(ops / small));
  EXPECT_FLOAT_EQ(at(f, 0, "traffic_512k"), lg(all));
  EXPECT_FLOAT_EQ(at(f, 0, "traffic_512k_intensity"), lg(ops / all));
  EXPECT_FLOAT_EQ(at(f, 0, "intensity0"), lg(ops / all));
}

TEST(TunerFeatures, MathCallsDivisionsAndSelects) {
  Buffer A = buf("A", 32), B = buf("B", 32);
  Var i("i");
  Expr x = ld(A, i);
  Expr value = exp(x) / (x + 1.f) + select(x < 0.f, x, x * 2.f);
  PrimFunc f = PrimFunc::make("f", {arg(A), arg(B)}, loop(i, 32, st(B, value, i)));
  Features ft = extract_features(f);
  ASSERT_EQ(ft.rows, 1);
  EXPECT_FLOAT_EQ(at(ft, 0, "float_math"), lg(32));
  EXPECT_FLOAT_EQ(at(ft, 0, "float_div"), lg(32));
  EXPECT_FLOAT_EQ(at(ft, 0, "float_cmp_select"), lg(2 * 32));  // the comparison and the select
  EXPECT_FLOAT_EQ(at(ft, 0, "float_addsub"), lg(2 * 32));
  EXPECT_FLOAT_EQ(at(ft, 0, "float_mul"), lg(32));
  EXPECT_FLOAT_EQ(at(ft, 0, "float_fma"), 0.f);  // x * 2 feeds a select, not an add
}

TEST(TunerFeatures, ParallelLoop) {
  SmallMatmul mm;
  Features f = extract_features(mm.make(ForKind::Parallel));
  ASSERT_EQ(f.rows, 1);
  EXPECT_FLOAT_EQ(at(f, 0, "par_present"), 1.f);
  EXPECT_FLOAT_EQ(at(f, 0, "par_len"), lg(64));
  EXPECT_FLOAT_EQ(at(f, 0, "par_outermost"), 1.f);
  EXPECT_FLOAT_EQ(at(f, 0, "par_innermost"), 0.f);
  EXPECT_FLOAT_EQ(at(f, 0, "par_task_work"), lg(16 * 8));
  EXPECT_FLOAT_EQ(at(f, 0, "par_outer_serial"), lg(1));
}

TEST(TunerFeatures, VectorStoreAndVectorizedLoop) {
  Buffer A = buf("A", 64), B = buf("B", 64);
  Var i("i");
  // After the vectorizer: B[ramp(i*8, 1, 8)] = A[ramp(i*8, 1, 8)] * 2
  Expr idx = Ramp::make(i * 8, 1, 8);
  Stmt vec = loop(i, 8, st(B, ld(A, idx) * Broadcast::make(2.f, 8), idx));
  Features f = extract_features(PrimFunc::make("v", {arg(A), arg(B)}, vec));
  ASSERT_EQ(f.rows, 1);
  EXPECT_FLOAT_EQ(at(f, 0, "vec_present"), 1.f);
  EXPECT_FLOAT_EQ(at(f, 0, "vec_len"), lg(8));
  EXPECT_FLOAT_EQ(at(f, 0, "vec_innermost"), 1.f);
  EXPECT_FLOAT_EQ(at(f, 0, "float_mul"), lg(64));  // 8 iterations of 8 lanes
  EXPECT_FLOAT_EQ(at(f, 0, "inner_max_stride"), lg(1));
  EXPECT_FLOAT_EQ(at(f, 0, "inner_unit_stride"), 1.f);
  EXPECT_FLOAT_EQ(at(f, 0, "buf0.unique_bytes"), lg(64 * 4));

  // A loop still marked Vectorized (a raw nest) counts as well, with its extent.
  Var j("j");
  Stmt marked = loop(i, 8, loop(j, 4, st(B, ld(A, i * 8 + j), i * 8 + j), ForKind::Vectorized));
  Features g = extract_features(PrimFunc::make("m", {arg(A), arg(B)}, marked));
  EXPECT_FLOAT_EQ(at(g, 0, "vec_present"), 1.f);
  EXPECT_FLOAT_EQ(at(g, 0, "vec_len"), lg(4));
  EXPECT_FLOAT_EQ(at(g, 0, "vec_innermost"), 1.f);
}

TEST(TunerFeatures, UnrolledLoopAndUnrolledCopies) {
  Buffer A = buf("A", 64), B = buf("B", 64);
  Var i("i"), j("j");
  Stmt marked = loop(i, 16, loop(j, 4, st(B, ld(A, i * 4 + j), i * 4 + j), ForKind::Unrolled));
  Features f = extract_features(PrimFunc::make("u", {arg(A), arg(B)}, marked));
  EXPECT_FLOAT_EQ(at(f, 0, "unroll_present"), 1.f);
  EXPECT_FLOAT_EQ(at(f, 0, "unroll_len"), lg(4));
  EXPECT_FLOAT_EQ(at(f, 0, "unroll_innermost"), 1.f);
  EXPECT_FLOAT_EQ(at(f, 0, "body_stores"), lg(1));
  // What unroll_loops leaves: four stores side by side in the loop body.
  std::vector<Stmt> copies;
  for (int c = 0; c < 4; ++c) copies.push_back(st(B, ld(A, i * 4 + c), i * 4 + c));
  Features g = extract_features(PrimFunc::make("c", {arg(A), arg(B)}, loop(i, 16, Seq::make(copies))));
  // The four copies make equal rows: one row standing for four stores.
  ASSERT_EQ(g.rows, 1);
  EXPECT_EQ(g.counts, std::vector<float>{4.f});
  EXPECT_EQ(g.total_rows(), 4.0);
  EXPECT_FLOAT_EQ(at(g, 0, "body_stores"), lg(4));
  EXPECT_FLOAT_EQ(at(g, 0, "func_stores"), lg(4));
  EXPECT_FLOAT_EQ(at(g, 0, "work_share"), 0.25f);
  // Copies that differ (here: one is guarded) stay apart, in first-seen order.
  copies[2] = IfThenElse::make(i < 15, copies[2]);
  Features h = extract_features(PrimFunc::make("c", {arg(A), arg(B)}, loop(i, 16, Seq::make(copies))));
  ASSERT_EQ(h.rows, 2);
  EXPECT_EQ(h.counts, (std::vector<float>{3.f, 1.f}));
  EXPECT_FLOAT_EQ(at(h, 0, "guards"), 0.f);
  EXPECT_FLOAT_EQ(at(h, 1, "guards"), 1.f);
}

TEST(TunerFeatures, StridesFootprintsAndReuse) {
  SmallMatmul mm;
  Features f = extract_features(mm.make());
  ASSERT_EQ(f.rows, 1);
  // Buffers by bytes accessed: C (read and written), then A and B (ties by name).
  EXPECT_FLOAT_EQ(at(f, 0, "buf0.access"), 3.f);
  EXPECT_FLOAT_EQ(at(f, 0, "buf1.access"), 1.f);
  const double iters = 64.0 * 16 * 8;
  EXPECT_FLOAT_EQ(at(f, 0, "buf0.bytes"), lg(2 * iters * 4));
  EXPECT_FLOAT_EQ(at(f, 0, "buf1.bytes"), lg(iters * 4));
  // Footprints over the whole nest: every element of each buffer.
  EXPECT_FLOAT_EQ(at(f, 0, "buf0.unique_bytes"), lg(64 * 16 * 4));
  EXPECT_FLOAT_EQ(at(f, 0, "buf1.unique_bytes"), lg(64 * 8 * 4));
  EXPECT_FLOAT_EQ(at(f, 0, "buf2.unique_bytes"), lg(8 * 16 * 4));
  // Innermost loop k: C stays put (0), A is contiguous (1), B jumps a row (16).
  EXPECT_FLOAT_EQ(at(f, 0, "buf0.stride"), lg(0));
  EXPECT_FLOAT_EQ(at(f, 0, "buf1.stride"), lg(1));
  EXPECT_FLOAT_EQ(at(f, 0, "buf2.stride"), lg(16));
  EXPECT_FLOAT_EQ(at(f, 0, "inner_max_stride"), lg(16));
  EXPECT_FLOAT_EQ(at(f, 0, "inner_unit_stride"), 0.f);
  EXPECT_FLOAT_EQ(at(f, 0, "inner_store_stride"), lg(0));
  // Reuse: C is reused by the k loop right away; A by the j loop, every 8
  // iterations (32 bytes apart); B by the i loop, every 16*8 iterations.
  EXPECT_FLOAT_EQ(at(f, 0, "buf0.reuse_iters"), lg(1));
  EXPECT_FLOAT_EQ(at(f, 0, "buf0.reuse_count"), lg(8));
  EXPECT_FLOAT_EQ(at(f, 0, "buf1.reuse_iters"), lg(8));
  EXPECT_FLOAT_EQ(at(f, 0, "buf1.reuse_bytes"), lg(8 * 4));
  EXPECT_FLOAT_EQ(at(f, 0, "buf1.reuse_count"), lg(16));
  EXPECT_FLOAT_EQ(at(f, 0, "buf2.reuse_iters"), lg(16 * 8));
  EXPECT_FLOAT_EQ(at(f, 0, "buf2.reuse_bytes"), lg(16 * 8 * 4));
  EXPECT_FLOAT_EQ(at(f, 0, "buf2.reuse_count"), lg(64));
  // No fourth buffer: its columns stay zero.
  EXPECT_FLOAT_EQ(at(f, 0, "buf3.bytes"), 0.f);
}

TEST(TunerFeatures, StridedFootprintIsNotItsSpan) {
  // B[j*64] over j < 16 spans 961 elements but touches 16.
  Buffer A = buf("A", 16), B = buf("B", 1024);
  Var j("j");
  Features f = extract_features(PrimFunc::make("s", {arg(A), arg(B)}, loop(j, 16, st(A, ld(B, j * 64), j))));
  EXPECT_FLOAT_EQ(at(f, 0, "buf1.unique_bytes"), lg(16 * 4));
  EXPECT_FLOAT_EQ(at(f, 0, "buf1.stride"), lg(64));
}

TEST(TunerFeatures, NonConstantExtentUsesItsBound) {
  Buffer A = buf("A", 64);
  Var n("n"), i("i");
  // for (i, 0, min(n, 32)): at most 32 iterations.
  Stmt body = loop(i, min(n, 32), st(A, 0.f, i));
  PrimFunc f = PrimFunc::make("b", {arg(A), Param{n, Buffer()}}, body);
  Features ft = extract_features(f);
  ASSERT_EQ(ft.rows, 1);
  EXPECT_FLOAT_EQ(at(ft, 0, "loop_prod"), lg(32));
  EXPECT_FLOAT_EQ(at(ft, 0, "is_init"), 1.f);
}

TEST(TunerFeatures, GuardsAndAllocations) {
  Buffer A = buf("A", 64), T = buf("T", 16, "local"), H = buf("H", 256, "global");
  Var i("i");
  Stmt guarded = IfThenElse::make(i < 60, st(T, ld(A, i), floormod(i, 16)));
  Stmt body = Allocate::make(T, Allocate::make(H, loop(i, 64, guarded)));
  Features f = extract_features(PrimFunc::make("g", {arg(A)}, body));
  ASSERT_EQ(f.rows, 1);
  EXPECT_FLOAT_EQ(at(f, 0, "guards"), 1.f);
  EXPECT_FLOAT_EQ(at(f, 0, "int_cmp_select"), lg(64));  // i < 60, every iteration
  EXPECT_FLOAT_EQ(at(f, 0, "int_divmod"), lg(64));
  EXPECT_FLOAT_EQ(at(f, 0, "alloc_local_bytes"), lg(16 * 4));
  EXPECT_FLOAT_EQ(at(f, 0, "alloc_heap_bytes"), lg(256 * 4));
  EXPECT_FLOAT_EQ(at(f, 0, "alloc_count"), 2.f);
  EXPECT_FLOAT_EQ(at(f, 0, "to_param"), 0.f);  // T is a local buffer
}

// A lowered 64^3 matmul, tiled, vectorized, unrolled and parallel: the
// vector and parallel features show through the whole pass pipeline, and the
// multiply-adds of all rows add up to M*N*K.
TEST(TunerFeatures, LoweredMatmulThroughThePipeline) {
  const int n = 64;
  te::Tensor A = te::placeholder({n, n}, f32, "A"), B = te::placeholder({n, n}, f32, "B");
  te::Tensor C = ops::matmul(A, B);
  te::Schedule s = te::create_schedule({C});
  te::Stage& stage = s[C];
  auto [io, ii] = stage.split(stage.axis("i"), 4);
  auto [jo, ji] = stage.split(stage.axis("j"), 8);
  stage.reorder({io, jo, stage.axis("k"), ii, ji});
  stage.vectorize(ji);
  stage.unroll(ii);
  stage.parallel(io);
  Features f = extract_features(te::lower(s, {A, B, C}, "mm"));
  ASSERT_GT(f.rows, 1);
  double fma = 0, share = 0;
  for (int r = 0; r < f.rows; ++r) {
    EXPECT_FLOAT_EQ(at(f, r, "vec_present"), 1.f) << "row " << r;
    EXPECT_FLOAT_EQ(at(f, r, "vec_len"), lg(8));
    EXPECT_FLOAT_EQ(at(f, r, "par_present"), 1.f);
    EXPECT_FLOAT_EQ(at(f, r, "par_len"), lg(n / 4));
    EXPECT_FLOAT_EQ(at(f, r, "body_stores"), lg(4));  // the 4 unrolled rows of the tile
    fma += f.count(r) * (std::exp2(at(f, r, "float_fma")) - 1);
    share += f.count(r) * at(f, r, "work_share");
  }
  EXPECT_NEAR(fma, double(n) * n * n, 1e-3 * n * n * n);
  EXPECT_NEAR(share, 1.0, 1e-4);
}

TEST(TunerFeatures, DeterministicOnRandomSchedules) {
  te::Tensor A = te::placeholder({32, 24}, f32, "A"), B = te::placeholder({24, 40}, f32, "B");
  te::Tensor C = ops::matmul(A, B);
  for (uint32_t seed = 0; seed < 40; ++seed) {
    te::Schedule s = te::create_schedule({C});
    testing::random_schedule(s, C, {}, seed);
    PrimFunc f = te::lower(s, {A, B, C}, "mm");
    Features a = extract_features(f), b = extract_features(f);
    ASSERT_GT(a.rows, 0) << "seed " << seed;
    EXPECT_EQ(a.values, b.values) << "seed " << seed;
    for (float v : a.values) ASSERT_TRUE(std::isfinite(v) && v >= 0) << "seed " << seed;
  }
}

// A producer computed at random loops of its consumer (or inlined, or at
// the root): allocations, guards and math calls in every combination.
TEST(TunerFeatures, ProducerConsumerRandomSchedules) {
  te::Tensor A = te::placeholder({24, 16}, f32, "A"), B = te::placeholder({16, 20}, f32, "B");
  te::Tensor E = te::compute({16, 20}, [&](const std::vector<Var>& i) { return exp(B(i[0], i[1])); }, "E");
  te::Tensor C = ops::matmul(A, E);
  int with_alloc = 0, with_math = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    te::Schedule s = te::create_schedule({C});
    testing::random_schedule(s, C, {E}, seed);
    Features f = extract_features(te::lower(s, {A, B, C}, "f"));
    ASSERT_GE(f.rows, 2) << "seed " << seed;
    bool alloc = false, math = false;
    for (int r = 0; r < f.rows; ++r) {
      alloc = alloc || at(f, r, "alloc_count") > 0;
      math = math || at(f, r, "float_math") > 0;
    }
    with_alloc += alloc;
    with_math += math;
    for (float v : f.values) ASSERT_TRUE(std::isfinite(v) && v >= 0) << "seed " << seed;
  }
  EXPECT_EQ(with_math, 40);   // exp is computed somewhere in every schedule
  EXPECT_GT(with_alloc, 0);   // and E gets a buffer of its own when it is not inlined
}

TEST(TunerFeatures, NullFunctionIsAnError) { EXPECT_THROW(extract_features(PrimFunc()), Error); }

}  // namespace
}  // namespace kiln
