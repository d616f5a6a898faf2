// The tuner's search space: tasks and flop counts, the sketch rules, and
// candidates (sample / mutate / crossover) that always lower, replay from
// their traces and compute the right result. The rules' tests run for an
// AVX2 and an AVX-512 target (lanes 8 / 16, registers 16 / 32); their
// candidates run on the host (the schedules hold for any target).
#include "sketch_cases.h"

namespace kiln::tuner {
namespace {

TEST(TunerTask, MakeTaskAndFlop) {
  Case c = matmul_case(64, 48, 32);
  Task t = task_of(c);
  ASSERT_EQ(t.outputs.size(), 1u);
  EXPECT_TRUE(t.outputs[0].same_tensor(c.args[2]));
  EXPECT_EQ(t.flop, 2.0 * 64 * 48 * 32);
  EXPECT_EQ(t.workload_key.size(), 16u);
  EXPECT_EQ(t.workload_key, te::workload_key({c.args[2]}));
  // The same DAG built again has the same key; the default name is readable.
  Task u = make_task(matmul_case(64, 48, 32).args, rules_target());
  EXPECT_EQ(u.workload_key, t.workload_key);
  EXPECT_EQ(u.name, "C_64x48");
}

TEST(TunerTask, FlopOfPaddingAndSoftmax) {
  // Padding is a copy (0 flop): conv counts only its multiply-adds.
  Case conv = conv_case();
  EXPECT_EQ(task_of(conv).flop, 2.0 * 1 * 8 * 8 * 8 * 4 * 3 * 3);
  // softmax: max (1/elt), exp(x - m) (2/elt), sum (1/elt), divide (1/elt).
  EXPECT_EQ(task_of(softmax_case(4, 16)).flop, 5.0 * 4 * 16);
  EXPECT_EQ(count_flop({chain_case(2, 3).args[2]}), 6.0 * (1 + 1 + 5));  // add; relu (max); gelu (3 mul, add, erf)
}

TEST(TunerTask, MakeTaskErrors) {
  Case c = matmul_case(4, 4, 4);
  EXPECT_TRUE(testing::throws_with([&] { make_task({c.args[0], c.args[2]}, rules_target()); }, "'B' is read by the computation but is not among the arguments"));
  EXPECT_TRUE(testing::throws_with([&] { make_task({c.args[0], c.args[1]}, rules_target()); }, "every argument is a placeholder"));
  EXPECT_TRUE(testing::throws_with([&] { make_task({c.args[0], c.args[1], c.args[2], c.args[2]}, rules_target()); }, "appears twice"));
}

TEST_P(TunerSketch, RulesPerDag) {
  // Matmul: both tilings, each also with B packed (rule 2 and the pack rule).
  Task mm = task_of(matmul_case(64, 64, 64));
  SearchSpace s_mm(mm);
  EXPECT_EQ(s_mm.num_sketches(), 4);
  EXPECT_TRUE(describes(s_mm, "C: tiled+cache_write ["));
  EXPECT_TRUE(describes(s_mm, "C: tiled ["));
  EXPECT_TRUE(describes(s_mm, "C: tiled+cache_write, pack 'B' ["));
  EXPECT_TRUE(describes(s_mm, "C: tiled, pack 'B' ["));

  Task dense = task_of(dense_bias_relu_case(64, 64, 64));
  SearchSpace s_dense(dense);
  EXPECT_EQ(s_dense.num_sketches(), 2);
  EXPECT_TRUE(describes(s_dense, "C: tiled, at its consumer 'relu'; bias_add: inline; relu: fused consumer"));
  EXPECT_TRUE(describes(s_dense, "C: tiled, at its consumer 'relu', pack 'B'; bias_add: inline; relu: fused consumer"));

  // conv2d reads its input through a window and its weight without the output's column: nothing to pack.
  Task conv = task_of(conv_case());
  SearchSpace s_conv(conv);
  EXPECT_TRUE(describes(s_conv, "conv.pad: inline"));
  EXPECT_TRUE(describes(s_conv, "conv: tiled+cache_write"));
  EXPECT_FALSE(describes(s_conv, "pack"));
  // Its padding may be stored once instead of inlined (rule 1's exception).
  EXPECT_TRUE(describes(s_conv, "conv.pad: simple"));

  // NCHWc: the weights' last dimension is already one panel; no pack sketch.
  SearchSpace s_nchwc(task_of(conv_nchwc_case(1)));
  EXPECT_EQ(s_nchwc.num_sketches(), 4);
  EXPECT_TRUE(describes(s_nchwc, "conv.pad: inline; conv: tiled+cache_write"));
  EXPECT_TRUE(describes(s_nchwc, "conv.pad: simple; conv: tiled+cache_write"));
  EXPECT_FALSE(describes(s_nchwc, "pack"));

  Task sm = task_of(softmax_case(64, 64));
  SearchSpace s_sm(sm);
  EXPECT_EQ(s_sm.num_sketches(), 2);
  EXPECT_TRUE(describes(s_sm, "softmax.max: simple (or at 'softmax'); softmax.exp: inline; softmax.sum: simple (or at 'softmax'); softmax: simple"));
  // Rule 7: both reductions row-wise (never one alone), the exp optionally stored per row.
  EXPECT_TRUE(describes(s_sm, "softmax.max: row-wise at the rows of 'softmax'; softmax.exp: inline (or stored per row of 'softmax'); softmax.sum: row-wise at the rows of 'softmax'; softmax: simple"));
  // Rows too short for two vectors: no row-wise sketch.
  EXPECT_FALSE(describes(SearchSpace(task_of(softmax_case(64, 8))), "row-wise"));

  // 8 outputs for 2 cores x 16 lanes, a reduction of 2048: rfactor besides the simple sketch.
  Task rs = task_of(row_sum_case(8, 2048));
  SearchSpace s_rs(rs);
  EXPECT_EQ(s_rs.num_sketches(), 2);
  EXPECT_TRUE(describes(s_rs, "rowsum: rfactor"));
  // A skinny matmul gets rfactor on top of its tiling sketches (B's rows of 16 are panels already).
  SearchSpace s_gemv(task_of(matmul_case(1, 16, 1024)));
  EXPECT_EQ(s_gemv.num_sketches(), 3);
  EXPECT_TRUE(describes(s_gemv, "C: rfactor"));
}

// The pack rule takes only an input read with the output's innermost axis as
// one index and a reduce axis in another: B (or B transposed), never A.
TEST_P(TunerSketch, PackRuleOperand) {
  SearchSpace mm(task_of(matmul_case(32, 64, 16)));
  EXPECT_TRUE(describes(mm, "pack 'B'"));
  EXPECT_FALSE(describes(mm, "pack 'A'"));
  SearchSpace bmm(task_of(batch_matmul_case(2, 8, 64, 16)));
  EXPECT_EQ(bmm.num_sketches(), 4);
  EXPECT_TRUE(describes(bmm, "C: tiled+cache_write, pack 'B'"));
  // Rows of two vectors are panels already: no pack sketch.
  SearchSpace narrow(task_of(batch_matmul_case(2, 8, 2 * rules_lanes(), 16)));
  EXPECT_EQ(narrow.num_sketches(), 2);
  EXPECT_FALSE(describes(narrow, "pack"));
  // B transposed (read as Bt[j, k]): unpacked, each vector is gathered
  // lane by lane; the pack turns it into panels too.
  te::Tensor A = te::placeholder({16, 32}, DataType::Float(32), "A"), Bt = te::placeholder({48, 32}, DataType::Float(32), "Bt");
  IterVar k = te::reduce_axis(Range(0, 32), "k");
  te::Tensor C = te::compute({16, 48}, [&](const std::vector<Var>& i) { return te::sum(A(i[0], k.var()) * Bt(i[1], k.var()), {k}); }, "C");
  SearchSpace nt(make_task({A, Bt, C}, rules_target()));
  EXPECT_EQ(nt.num_sketches(), 4);
  EXPECT_TRUE(describes(nt, "pack 'Bt'"));
  EXPECT_FALSE(describes(nt, "pack 'A'"));
  // An odd column count has no panel width that vectors fill.
  SearchSpace odd(task_of(matmul_case(8, 15, 8)));
  EXPECT_EQ(odd.num_sketches(), 2);
  EXPECT_FALSE(describes(odd, "pack"));
}

TEST_P(TunerSketch, MaterializedStructure) {
  std::mt19937_64 rng(1);
  Task dense = task_of(dense_bias_relu_case(32, 32, 32));
  SearchSpace space(dense);
  Candidate c = space.sample_sketch(0, rng);
  te::Schedule s = space.materialize(&c);
  // The matmul is computed inside the relu's tile loop; bias_add is inlined.
  const te::Stage& mm = s.stage(2);
  ASSERT_EQ(mm.name(), "C");
  EXPECT_EQ(mm.attach_type(), te::AttachType::Scope);
  EXPECT_EQ(mm.attach_stage()->name(), "relu");
  EXPECT_EQ(s.stage(4).attach_type(), te::AttachType::Inline);
  EXPECT_FALSE(c.trace.steps.empty());

  Task mm_task = task_of(matmul_case(32, 32, 32));
  SearchSpace mm_space(mm_task);
  Candidate cc = mm_space.sample_sketch(0, rng);
  te::Schedule sc = mm_space.materialize(&cc);
  ASSERT_EQ(sc.num_stages(), 4);  // A, B, C.local, C
  EXPECT_EQ(sc.stage(2).scope(), "local");
  EXPECT_EQ(sc.stage(2).attach_stage(), &sc.stage(3));
  bool parallel = false;
  for (const IterVar& iv : sc.stage(3).leaf_iter_vars())
    if (const te::IterVarAttr* a = sc.stage(3).attr(iv)) parallel = parallel || a->kind == ForKind::Parallel;
  EXPECT_TRUE(parallel);
}


// The packed GEMM schedule, written out: B packed by 32, an 8x32 register
// tile accumulated in C.local at the fused (column panel, row block) loop, k
// unrolled by 4, the tile's rows unrolled and its 32 columns one vector.
// (The hand GEMM, ops/src/cpu_gemm.cpp, was this; it now also splits the
// tile's columns into the target's vectors and blocks rows and K by shape.)
te::Schedule packed_gemm_reference(const te::Tensor& B, const te::Tensor& C) {
  te::Schedule s = te::create_schedule({C});
  te::Tensor packed_B = s.pack(B, {C}, 1, 32);
  te::Tensor CL = s.cache_write(C, "local");
  te::Stage& c = s[C];
  std::vector<IterVar> tiles = c.tile(c.axis("i"), c.axis("j"), 8, 32);
  c.reorder({tiles[1], tiles[0]});
  IterVar block = c.fuse(tiles[1], tiles[0]);
  c.parallel(block);
  c.unroll(tiles[2]);
  c.vectorize(tiles[3]);
  s[CL].compute_at(c, block);
  te::Stage& cl = s[CL];
  auto [ko, ki] = cl.split(cl.axis("k"), 4);
  cl.reorder({ko, ki, cl.axis("i"), cl.axis("j")});
  cl.unroll(ki);
  cl.unroll(cl.axis("i"));
  cl.vectorize(cl.axis("j"));
  te::Stage& p = s[packed_B];
  const auto& axes = p.leaf_iter_vars();  // [N/32, K, 32]
  p.parallel(axes[0]);
  p.vectorize(axes[2]);
  return s;
}

// The candidate equivalent to the packed schedule above lowers to the same loop nest.
TEST_P(TunerSketch, CpuGemmCandidate) {
  Case c = matmul_case(64, 64, 64);
  Task task = task_of(c);
  SearchSpace space(task);
  Candidate cand;
  cand.sketch = sketch_index(space, "C: tiled+cache_write, pack 'B' [");
  ASSERT_GE(cand.sketch, 0);
  cand.decisions = {8, 1, 1, 8, 2, 1, 1, 32, 16, 4, /*parallel: fuse 2*/ 1, /*at S0*/ 1, /*panel-outer*/ 1, /*unroll 64*/ 2};
  ASSERT_EQ(space.describe_candidate(cand), "sketch 2: C.i=8x1x1x8 C.j=2x1x1x32 C.k=16x4 C.parallel=1 C.location=1 C.panel_outer=1 C.unroll=2");
  te::Schedule s = space.materialize(&cand);
  te::Tensor A = te::placeholder({64, 64}, DataType::Float(32), "A"), B = te::placeholder({64, 64}, DataType::Float(32), "B");
  te::Tensor C = ops::matmul(A, B);
  PrimFunc mine = te::lower(s, c.args, "gemm"), hand = te::lower(packed_gemm_reference(B, C), {A, B, C}, "gemm");
  EXPECT_TRUE(structural_equal(mine, hand)) << "candidate:\n" << to_string(mine) << "\nhand:\n" << to_string(hand);
  check_computes(c, space, cand, 9);
  // Row-outer instead: the fused parallel loop now takes the row block first.
  cand.decisions[12] = 0;
  te::Schedule rows = space.materialize(&cand);
  EXPECT_NE(to_string(te::lower(rows, c.args, "gemm")).find("parallel (i.outer.j.outer.fused"), std::string::npos);
  check_computes(c, space, cand, 10);
}

// Pack sketches under sample, mutate and crossover: one pack step whose
// panel width is the innermost factor of the packed axis, a multiple of the
// vector lanes, and the result is right on both backends.
TEST_P(TunerSketch, PackSketchesCompute) {
  for (const Case& c : {matmul_case(32, 48, 64), batch_matmul_case(2, 8, 32, 16)}) {
    Task task = task_of(c);
    SearchSpace space(task);
    int ndim = static_cast<int>(c.args.back().ndim());
    for (int sk = 0; sk < space.num_sketches(); ++sk) {
      if (space.describe_sketch(sk).find("pack") == std::string::npos) continue;
      for (uint64_t seed = 0; seed < 3; ++seed) {
        std::mt19937_64 rng(seed);
        Candidate a = space.sample_sketch(sk, rng), b = space.sample_sketch(sk, rng);
        Candidate m = space.mutate(a, rng);
        Candidate x = space.crossover(m, b, rng);
        for (const Candidate* cand : {&a, &m, &x}) {
          SCOPED_TRACE(c.name + ": " + space.describe_candidate(*cand));
          std::vector<te::Pack> packs;
          for (const te::Step& st : cand->trace.steps)
            if (const auto* p = std::get_if<te::Pack>(&st)) packs.push_back(*p);
          ASSERT_EQ(packs.size(), 1u);
          EXPECT_EQ(packs[0].stage.name, "B");
          EXPECT_EQ(packs[0].dim, ndim - 1);
          EXPECT_EQ(packs[0].factor, tile_of(space, *cand, "C.j").back());
          EXPECT_EQ(packs[0].factor % rules_lanes(), 0);
          check_computes(c, space, *cand, 20 + static_cast<uint32_t>(seed));
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// Sampled pack candidates keep their register tile (rows x panel vectors of
// accumulators, the panel's vectors and one broadcast) within the target's
// vector registers, and the panels allowed fit one row at least.
TEST_P(TunerSketch, SampledPackTilesFitTheRegisters) {
  const int lanes = rules_lanes(), regs = rules_target().num_vector_registers();
  for (const Case& c : {matmul_case(256, 256, 64), batch_matmul_case(4, 64, 128, 16)}) {
    Task task = task_of(c);
    SearchSpace space(task);
    int checked = 0;
    for (int sk = 0; sk < space.num_sketches(); ++sk) {
      if (space.describe_sketch(sk).find("pack") == std::string::npos) continue;
      std::mt19937_64 rng(sk);
      for (int k = 0; k < 40; ++k, ++checked) {
        Candidate cand = space.sample_sketch(sk, rng);
        SCOPED_TRACE(space.describe_candidate(cand));
        int width = tile_of(space, cand, "C.j").back(), vectors = (width + lanes - 1) / lanes;
        int rows = tile_of(space, cand, "C.i").back();
        std::vector<int> b = tile_of(space, cand, "C.b");
        if (!b.empty()) rows *= b.back();
        EXPECT_LE(rows * vectors + vectors + 1, regs) << "rows " << rows << ", panel " << width;
        EXPECT_LE(vectors + vectors + 1, regs) << "panel " << width;
      }
    }
    EXPECT_GT(checked, 0) << c.name << " has no pack sketch";
  }
}

// parse_candidate reads what describe_candidate writes, so a schedule from a
// log or a group's schedule_detail replays (edited or not), and names what
// it cannot read.
TEST_P(TunerSearchSpace, ParseCandidateReadsDescribeCandidate) {
  Case c = conv_nchwc_case(1);
  SearchSpace space(task_of(c));
  std::mt19937_64 rng(5);
  for (int i = 0; i < space.num_sketches(); ++i) {
    Candidate cand = space.sample_sketch(i, rng);
    Candidate back = space.parse_candidate(space.describe_candidate(cand));
    EXPECT_EQ(back.sketch, cand.sketch);
    EXPECT_EQ(back.decisions, cand.decisions) << space.describe_candidate(cand);
    EXPECT_EQ(back.trace.to_json(), cand.trace.to_json());
  }
  // Left-out slots keep the default's decisions; one edited slot changes only itself.
  Candidate d = space.default_candidate();
  std::string text = space.describe_candidate(d);
  Candidate same = space.parse_candidate("sketch " + std::to_string(d.sketch) + ":");
  EXPECT_EQ(same.decisions, d.decisions);
  Candidate moved = space.parse_candidate(text + " conv.unroll=0");
  EXPECT_NE(space.describe_candidate(moved).find("conv.unroll=0"), std::string::npos);
  check_computes(c, space, moved, 31);
  EXPECT_TRUE(testing::throws_with([&] { space.parse_candidate("conv.unroll=0"); }, "does not start with 'sketch N:'"));
  EXPECT_TRUE(testing::throws_with([&] { space.parse_candidate("sketch 99: conv.unroll=0"); }, "sketch 99 does not exist"));
  EXPECT_TRUE(testing::throws_with([&] { space.parse_candidate("sketch 0: conv.nope=1"); }, "has no decision 'conv.nope'"));
  EXPECT_TRUE(testing::throws_with([&] { space.parse_candidate("sketch 0: conv.unroll"); }, "is not LABEL=VALUE"));
  EXPECT_TRUE(testing::throws_with([&] { space.parse_candidate("sketch 0: conv.y=7x1"); }, "'conv.y' takes 4 value(s)"));
  EXPECT_TRUE(testing::throws_with([&] { space.parse_candidate("sketch 0: conv.y=7xax1x1"); }, "'a' is not an integer"));
  EXPECT_TRUE(testing::throws_with([&] { space.parse_candidate("sketch 0: conv.y=3x1x1x1"); }, "not the extent 7"));
}

// Panel-outer puts B's panel loop before every axis of rows, a batch axis B
// does not index included (A[b, i, k] x B[k, j], an ONNX MatMul of a
// sequence): inside it, each panel was streamed from L3 once per row block.
// Winograd's input transform F(m x m, 3x3) of a blocked [1, 2, H, W, b]
// input: V [a^2, 2, tiles, b] (a = m + 2), checked against B^T d B written
// out with the matrix.
Case winograd_input_case(int H, int W, int b, int m = 2) {
  te::Tensor X = te::placeholder({1, 2, H, W, b}, DataType::Float(32), "X");
  const int rows = (H + m - 1) / m, cols = (W + m - 1) / m, a = m + 2;
  return {"winograd_input", {X, ops::winograd_input_nchwc(X, 1, 1, H, W, m)}, [=](const std::vector<Vec>& in) {
            static const float BT2[4][6] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
            static const float BT4[6][6] = {{4, 0, -5, 0, 1, 0}, {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                            {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
            auto BT = [&](int r, int c) { return m == 4 ? BT4[r][c] : BT2[r][c]; };
            Vec o(size_t(a) * a * 2 * rows * cols * b, 0.f);
            for (int e = 0; e < a * a; ++e)
              for (int c = 0; c < 2; ++c)
                for (int p = 0; p < rows * cols; ++p)
                  for (int ci = 0; ci < b; ++ci) {
                    float acc = 0;
                    for (int i = 0; i < a; ++i)
                      for (int j = 0; j < a; ++j) {
                        int h = (p / cols) * m + i - 1, w = (p % cols) * m + j - 1;
                        if (h >= 0 && h < H && w >= 0 && w < W) acc += BT(e / a, i) * BT(e % a, j) * in[0][((size_t(c) * H + h) * W + w) * b + ci];
                      }
                    o[((size_t(e) * 2 + c) * rows * cols + p) * b + ci] = acc;
                  }
            return std::vector<Vec>{o};
          }};
}

// A Simple stage's default runs parallel only the outer loops that give each
// core 8 iterations: fused further, every read of a gathering stage paid a
// division and a modulo per vector to recover the inner loops (Winograd's
// input transform, 0.160 against 0.066 ms at ResNet's 56x56 on Zen 5).
TEST_P(TunerSketch, ASimpleStageParallelizesTheOuterLoopsItNeeds) {
  const int lanes = rules_lanes();
  Case wino = winograd_input_case(13, 14, lanes);  // 7 x 7 tiles, the last row half outside
  SearchSpace space(task_of(wino));
  Candidate d = space.default_candidate();
  // The tile element e's column (e mod 4, picked by selects) runs inside,
  // unrolled; e / 4 (4) and the 2 channel blocks give 2 cores 4 iterations
  // each: the tiles too.
  EXPECT_NE(space.describe_candidate(d).find("winograd_input.parallel=2"), std::string::npos) << space.describe_candidate(d);
  check_computes(wino, space, d, 31);
  // An elementwise stage over [1, 2, 14, 14, lanes]: n, c and h (28 iterations), not w.
  te::Tensor X = te::placeholder({1, 2, 14, 14, lanes}, DataType::Float(32), "X");
  te::Tensor Y = te::compute(X.shape(), [&](const std::vector<Var>& i) { return X(std::vector<Expr>(i.begin(), i.end())) * 2.0f; }, "Y");
  SearchSpace elementwise(make_task({X, Y}, rules_target()));
  Candidate e = elementwise.default_candidate();
  EXPECT_NE(elementwise.describe_candidate(e).find("Y.parallel=2"), std::string::npos) << elementwise.describe_candidate(e);
}

// Winograd's output transform F(m x m, 3x3) of M [a^2, 2, tiles, b] to an
// H x W output [1, 2, H, W, b], checked against A^T M A written out with the matrix.
Case winograd_output_case(int H, int W, int b, int m) {
  const int rows = (H + m - 1) / m, cols = (W + m - 1) / m, a = m + 2;
  te::Tensor M = te::placeholder({a * a, 2, rows * cols, b}, DataType::Float(32), "M");
  return {"winograd_output", {M, ops::winograd_output_nchwc(M, 1, H, W, m)}, [=](const std::vector<Vec>& in) {
            static const float AT2[2][6] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
            static const float AT4[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
            auto AT = [&](int r, int c) { return m == 4 ? AT4[r][c] : AT2[r][c]; };
            Vec o(size_t(2) * H * W * b, 0.f);
            for (int c = 0; c < 2; ++c)
              for (int y = 0; y < H; ++y)
                for (int x = 0; x < W; ++x)
                  for (int ci = 0; ci < b; ++ci) {
                    float acc = 0;
                    const int p = (y / m) * cols + x / m;
                    for (int i = 0; i < a; ++i)
                      for (int j = 0; j < a; ++j) acc += AT(y % m, i) * AT(x % m, j) * in[0][((size_t(i * a + j) * 2 + c) * rows * cols + p) * b + ci];
                    o[((size_t(c) * H + y) * W + x) * b + ci] = acc;
                  }
            return std::vector<Vec>{o};
          }};
}

// F(4x4, 3x3)'s input transform picks its 16 reads per tile element e by
// tables on e: the default runs e inside the tile loop, unrolled (its
// selects fold to constants, its iterations share one tile's loads), where
// e outermost streamed the whole input 36 times (0.14 against 0.07 ms at
// ResNet's 56x56, Zen 5).
TEST_P(TunerSketch, TheTileElementOfAWinogradTransformRunsInsideTheTiles) {
  Case wino = winograd_input_case(15, 13, rules_lanes(), 4);  // 4 x 4 tiles, the last ones partly outside
  SearchSpace space(task_of(wino));
  Candidate d = space.default_candidate();
  std::string trace = d.trace.to_json();
  EXPECT_NE(trace.find("\"axis_names\":[\"co\",\"p\",\"ci.outer\",\"e\",\"ci.inner\"],\"kind\":\"reorder\""), std::string::npos) << trace;
  EXPECT_NE(trace.find("\"axis_names\":[\"e\"],\"kind\":\"unroll\""), std::string::npos) << trace;
  // co (2) and the tiles run parallel: 2 x 16 iterations.
  EXPECT_NE(space.describe_candidate(d).find("winograd_input.parallel=1"), std::string::npos) << space.describe_candidate(d);
  check_computes(wino, space, d, 37);
  // Any unroll and parallel decision computes the same.
  for (const char* text : {"sketch 0: winograd_input.parallel=0 winograd_input.unroll=2", "sketch 0: winograd_input.parallel=2"})
    check_computes(wino, space, space.parse_candidate(text), 38);
  // The output transform's place in its tile (y mod 4, x mod 4, picked by
  // selects) runs inside the tiles, unrolled: the 16 outputs of a tile share
  // its 36 reads. Where the output is not a multiple of 4 it stays as it is.
  Case out = winograd_output_case(8, 12, rules_lanes(), 4);
  SearchSpace out_space(task_of(out));
  Candidate o = out_space.default_candidate();
  std::string out_trace = o.trace.to_json();
  EXPECT_NE(out_trace.find("\"axis_names\":[\"y.inner\"],\"kind\":\"unroll\""), std::string::npos) << out_trace;
  EXPECT_NE(out_trace.find("\"axis_names\":[\"x.inner\"],\"kind\":\"unroll\""), std::string::npos) << out_trace;
  check_computes(out, out_space, o, 39);
  Case uneven = winograd_output_case(7, 9, rules_lanes(), 4);
  SearchSpace uneven_space(task_of(uneven));
  Candidate u = uneven_space.default_candidate();
  EXPECT_EQ(u.trace.to_json().find("\"unroll\""), std::string::npos) << u.trace.to_json();
  check_computes(uneven, uneven_space, u, 40);
  Case small = winograd_output_case(6, 8, rules_lanes(), 2);
  SearchSpace small_space(task_of(small));
  check_computes(small, small_space, small_space.default_candidate(), 41);
}

TEST_P(TunerSketch, MatmulComputes) { check_all_sketches(matmul_case(32, 48, 64), 3); }
TEST_P(TunerSketch, SkinnyMatmulComputes) { check_all_sketches(matmul_case(2, 16, 512), 2); }
TEST_P(TunerSketch, DenseBiasReluComputes) { check_all_sketches(dense_bias_relu_case(16, 32, 24), 4); }
TEST_P(TunerSketch, Conv2dComputes) { check_all_sketches(conv_case(), 2); }
TEST_P(TunerSketch, Conv2dNchwcComputes) { check_all_sketches(conv_nchwc_case(1), 2); }
TEST_P(TunerSketch, Conv2dNchwcStride2Computes) { check_all_sketches(conv_nchwc_case(2), 1); }
TEST_P(TunerSketch, SoftmaxComputes) {
  Case c = softmax_case(8, 64);
  check_all_sketches(c, 6);
  // Both reductions inside the output's row loop (the deepest location choice).
  Task task = task_of(c);
  SearchSpace space(task);
  std::mt19937_64 rng(11);
  int found = 0;
  for (int k = 0; k < 200 && found < 2; ++k) {
    Candidate cand = space.sample(rng);
    std::string d = space.describe_candidate(cand);
    if (d.find("softmax.max.location=1") == std::string::npos || d.find("softmax.sum.location=1") == std::string::npos) continue;
    ++found;
    te::Schedule s = space.materialize(&cand);
    EXPECT_EQ(s.stage(1).attach_type(), te::AttachType::Scope);
    check_computes(c, space, cand, 50 + k);
  }
  EXPECT_EQ(found, 2);
}
TEST_P(TunerSketch, LayerNormComputes) { check_all_sketches(layer_norm_case(6, 48), 6); }

// Rule 7: softmax's and layer norm's reductions inside the output's row loop,
// rfactor'd over the lanes and vectorized along the row; the row loop is
// parallel or serial. Every such candidate computes the reference, and the
// untuned default is one (the simple sketch ran a layer norm's mean over
// BERT's 128 x 768 one element at a time, across rows: 59 against 9.5 us).
void check_rowwise(const Case& c, const std::vector<std::string>& reductions) {
  Task task = task_of(c);
  SearchSpace space(task);
  int sketch = -1;
  for (int i = 0; i < space.num_sketches(); ++i)
    if (space.describe_sketch(i).find("row-wise") != std::string::npos) sketch = sketch < 0 ? i : -2;
  ASSERT_GE(sketch, 0) << "exactly one row-wise sketch (all reductions row-wise or none)";
  for (const std::string& r : reductions) EXPECT_NE(space.describe_sketch(sketch).find(r + ": row-wise"), std::string::npos) << space.describe_sketch(sketch);
  Candidate d = space.default_candidate();
  EXPECT_EQ(d.sketch, sketch) << space.describe_candidate(d);
  check_computes(c, space, d, 299);
  std::mt19937_64 rng(5);
  bool serial = false, parallel = false;
  for (int k = 0; k < 12; ++k) {
    Candidate cand = k % 3 == 2 ? space.mutate(space.sample_sketch(sketch, rng), rng) : space.sample_sketch(sketch, rng);
    std::string low = to_string(te::lower(space.materialize(&cand), c.args, c.name));
    (low.find("parallel (") != std::string::npos ? parallel : serial) = true;
    // The row's reductions are vectorized along the row, never across rows (a gather).
    if (space.describe_candidate(cand).find("k=96x8") != std::string::npos) {
      EXPECT_NE(low.find("k.outer*8, 1, 8)]"), std::string::npos) << low;
    }
    check_computes(c, space, cand, 300 + k);
  }
  EXPECT_TRUE(serial && parallel);
  // Softmax's exp: recomputed by each reader, or stored once per row (a row buffer).
  if (space.describe_sketch(sketch).find("stored per row") == std::string::npos) return;
  for (int stored : {0, 1}) {
    Candidate cand = space.sample_sketch(sketch, rng);
    const std::string label = "softmax.exp.stored_per_row=";
    std::string d = space.describe_candidate(cand);
    size_t at = d.find(label);
    ASSERT_NE(at, std::string::npos) << d;
    int slot_value = d[at + label.size()] - '0';
    if (slot_value != stored) cand = space.mutate(cand, rng);  // keep drawing until the slot has the value wanted
    for (int tries = 0; tries < 200 && space.describe_candidate(cand).find(label + std::to_string(stored)) == std::string::npos; ++tries) cand = space.sample_sketch(sketch, rng);
    std::string low = to_string(te::lower(space.materialize(&cand), c.args, c.name));
    // Stored, the output divides the row buffer; recomputed, it calls exp itself.
    std::regex output_exp(R"(softmax\[[^\n]*\] = exp\()");
    EXPECT_EQ(std::regex_search(low, output_exp), stored == 0) << low;
    check_computes(c, space, cand, 400 + stored);
  }
}
TEST_P(TunerSketch, SoftmaxRowwise) { check_rowwise(softmax_case(8, 768), {"softmax.max", "softmax.sum"}); }
TEST_P(TunerSketch, LayerNormRowwise) { check_rowwise(layer_norm_case(6, 80), {"layernorm.sum", "layernorm.var"}); }

// Layer norm as ONNX writes it: ReduceMean with keepdims, so the sums are
// [M, 1] and read at [i, 0]. The trailing axis of extent 1 is no row axis.
Case keepdims_norm_case(int M, int N) {
  te::Tensor X = te::placeholder({M, N}, DataType::Float(32), "X");
  IterVar k = te::reduce_axis(Range(0, N), "k");
  te::Tensor S = te::compute({M, 1}, [&](const std::vector<Var>& i) { return te::sum(X(i[0], k.var()), {k}); }, "mean.sum");
  IterVar k2 = te::reduce_axis(Range(0, N), "k2");
  te::Tensor V = te::compute({M, 1}, [&](const std::vector<Var>& i) {
    Expr d = X(i[0], k2.var()) - S(i[0], 0) / float(N);
    return te::sum(d * d, {k2});
  }, "var.sum");
  te::Tensor Y = te::compute({M, N}, [&](const std::vector<Var>& i) { return (X(i[0], i[1]) - S(i[0], 0) / float(N)) / sqrt(V(i[0], 0) / float(N) + 1e-5f); }, "norm");
  return {"keepdims_norm", {X, Y}, [=](const std::vector<Vec>& in) {
            Vec o(M * N);
            for (int i = 0; i < M; ++i) {
              double mu = 0, var = 0;
              for (int j = 0; j < N; ++j) mu += in[0][i * N + j];
              mu /= N;
              for (int j = 0; j < N; ++j) var += (in[0][i * N + j] - mu) * (in[0][i * N + j] - mu);
              var /= N;
              for (int j = 0; j < N; ++j) o[i * N + j] = float((in[0][i * N + j] - mu) / std::sqrt(var + 1e-5));
            }
            return std::vector<Vec>{o};
          }};
}
TEST_P(TunerSketch, KeepdimsNormRowwise) { check_rowwise(keepdims_norm_case(6, 80), {"mean.sum", "var.sum"}); }
TEST_P(TunerSketch, BatchMatmulComputes) { check_all_sketches(batch_matmul_case(2, 8, 32, 16), 2); }
TEST_P(TunerSketch, MaxPoolComputes) { check_all_sketches(max_pool_case(), 3); }
TEST_P(TunerSketch, TwoOutputsComputes) { check_all_sketches(two_outputs_case(16, 32, 8), 2); }
TEST_P(TunerSketch, ElementwiseChainComputes) { check_all_sketches(chain_case(12, 40), 4); }
TEST_P(TunerSketch, RowSumComputes) { check_all_sketches(row_sum_case(4, 1024), 3); }

// Random sample / mutate / crossover: always valid, replayable, lowerable.
TEST_P(TunerSearchSpace, PropertyRandomCandidates) {
  std::vector<Case> cases = {matmul_case(32, 48, 64), dense_bias_relu_case(16, 32, 24), conv_case(),         softmax_case(8, 64),
                             chain_case(12, 40),      row_sum_case(4, 1024),             layer_norm_case(6, 48), two_outputs_case(16, 32, 8),
                             batch_matmul_case(2, 8, 64, 16), conv_nchwc_case(1)};
  int seeds = 0;
  for (const Case& c : cases) {
    Task task = task_of(c);
    SearchSpace space(task);
    for (uint64_t seed = 0; seed < 40; ++seed, ++seeds) {
      std::mt19937_64 rng(seed);
      Candidate a = space.sample(rng), b = space.sample(rng);
      Candidate m = space.mutate(a, rng);
      Candidate x = space.crossover(m, b, rng);
      for (const Candidate* cand : {&a, &m, &x}) {
        SCOPED_TRACE(c.name + " seed " + std::to_string(seed) + ": " + space.describe_candidate(*cand));
        te::Schedule replay = te::Schedule::from_trace(task.outputs, te::Trace::from_json(cand->trace.to_json()));
        EXPECT_EQ(replay.trace().to_json(), cand->trace.to_json());
        EXPECT_NO_THROW(te::lower(replay, task.args, c.name));
      }
      // A mutation changes one slot at most; a crossover takes each decision from a parent.
      ASSERT_EQ(m.sketch, a.sketch);
      ASSERT_EQ(x.sketch, m.sketch);
      ASSERT_EQ(m.decisions.size(), a.decisions.size());
      int changed = 0;
      for (size_t k = 0; k < a.decisions.size(); ++k) changed += a.decisions[k] != m.decisions[k];
      EXPECT_LE(changed, 2);
      for (size_t k = 0; k < x.decisions.size(); ++k) {
        if (b.sketch == m.sketch) {
          EXPECT_TRUE(x.decisions[k] == m.decisions[k] || x.decisions[k] == b.decisions[k]);
        } else {
          EXPECT_EQ(x.decisions[k], m.decisions[k]);
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
  std::cout << "[ property ] " << seeds << " seeds x (sample, mutate, crossover) valid\n";
}

TEST_P(TunerSearchSpace, DeterministicAndThreadSafe) {
  Task task = task_of(conv_case());
  SearchSpace space(task);
  auto run = [&](uint64_t seed, std::vector<std::string>* out) {
    std::mt19937_64 rng(seed);
    for (int k = 0; k < 30; ++k) out->push_back(space.mutate(space.sample(rng), rng).trace.to_json());
  };
  std::vector<std::string> a, b, serial;
  std::thread t1(run, 5, &a), t2(run, 5, &b);
  t1.join();
  t2.join();
  run(5, &serial);
  EXPECT_EQ(a, serial);
  EXPECT_EQ(b, serial);
  // A second space over the same task numbers sketches and decisions alike.
  SearchSpace again(task);
  std::mt19937_64 r1(5), r2(5);
  EXPECT_EQ(again.sample(r1).trace.to_json(), space.sample(r2).trace.to_json());
}

TEST_P(TunerSearchSpace, InvalidCandidatesThrow) {
  Task task = task_of(matmul_case(16, 64, 16));
  SearchSpace space(task);
  std::mt19937_64 rng(3);
  Candidate c = space.sample_sketch(0, rng);
  Candidate bad = c;
  bad.sketch = 99;
  EXPECT_TRUE(testing::throws_with([&] { space.materialize(&bad); }, "sketch 99"));
  bad = c;
  bad.decisions.pop_back();
  EXPECT_TRUE(testing::throws_with([&] { space.materialize(&bad); }, "decisions"));
  bad = c;
  bad.decisions[0] += 1;  // the first tile's factors no longer multiply to the extent
  EXPECT_TRUE(testing::throws_with([&] { space.materialize(&bad); }, "not the extent 16"));
  EXPECT_TRUE(testing::throws_with([&] { space.mutate(bad, rng); }, "not the extent 16"));
  // A pack sketch packs by the innermost factor of C.j, which must stay a panel width.
  Candidate p = space.sample_sketch(2, rng);
  const int half = rules_lanes() / 2;
  p.decisions[4] = 1, p.decisions[5] = 2, p.decisions[6] = 32 / half, p.decisions[7] = half;
  EXPECT_TRUE(testing::throws_with([&] { space.materialize(&p); },
                                   "innermost factor " + std::to_string(half) + "; the sketch packs by it, so it must be one of " + std::to_string(2 * half)));
  // A cuda target gets the GPU rules (test_gpu_default_schedules.py runs their kernels in the simulator);
  // their candidates are checked the same way.
  Task gpu = make_task(matmul_case(16, 16, 16).args, Target::parse("cuda -arch=sm_90"));
  SearchSpace gs(gpu);
  EXPECT_EQ(gs.describe_sketch(0).rfind("gpu: ", 0), 0u) << gs.describe_sketch(0);
  Candidate g = gs.default_candidate();
  g.decisions[0] += 1;
  EXPECT_TRUE(testing::throws_with([&] { gs.materialize(&g); }, "not the extent 16"));
}

auto target_name = [](const ::testing::TestParamInfo<std::string>& info) { return testing::target_test_name(info.param); };
INSTANTIATE_TEST_SUITE_P(Targets, TunerSketch, ::testing::ValuesIn(rule_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Targets, TunerSearchSpace, ::testing::ValuesIn(rule_targets()), target_name);

}  // namespace
}  // namespace kiln::tuner
