// The search space's default schedules and seeds, per rule target (AVX2 and
// AVX-512): which loops stream, pack, unroll or stay outside, that the
// register tiles fit the target's registers, and that the defaults compute.
#include "kiln/ops/conv_grad_nchwc.h"
#include "kiln/ops/graph_nn.h"
#include "sketch_cases.h"

namespace kiln::tuner {
namespace {

// The default packs B where the copy pays: more than 1 MiB of B reused by
// 64 rows or more, or B read transposed (gathered otherwise) by 8 rows or
// more; and the packed default computes the right result.
TEST_P(TunerSketch, DefaultPacksWhereTheCopyPays) {
  auto packs = [](const SearchSpace& s) { return s.describe_sketch(s.default_candidate().sketch).find("pack") != std::string::npos; };
  Case large = matmul_case(64, 2048, 160);  // B: 1.25 MiB
  SearchSpace big(task_of(large));
  EXPECT_TRUE(packs(big)) << big.describe_sketch(big.default_candidate().sketch);
  check_computes(large, big, big.default_candidate(), 7);
  EXPECT_FALSE(packs(SearchSpace(task_of(matmul_case(32, 2048, 160)))));  // 32 rows
  EXPECT_FALSE(packs(SearchSpace(task_of(matmul_case(256, 256, 256)))));  // B: 256 KiB, stays in cache
  te::Tensor A = te::placeholder({16, 32}, DataType::Float(32), "A"), Bt = te::placeholder({48, 32}, DataType::Float(32), "Bt");
  IterVar k = te::reduce_axis(Range(0, 32), "k");
  te::Tensor C = te::compute({16, 48}, [&](const std::vector<Var>& i) { return te::sum(A(i[0], k.var()) * Bt(i[1], k.var()), {k}); }, "C");
  SearchSpace nt(make_task({A, Bt, C}, rules_target()));
  EXPECT_TRUE(packs(nt)) << nt.describe_sketch(nt.default_candidate().sketch);
}

// A transpose's default tiles the axis its input is contiguous along (16
// rows inside the vector loop's outer part, see simple() in
// search_space_apply.cpp) and computes the transpose, also where 16 does
// not divide the rows.
TEST_P(TunerSketch, TransposeDefaultTilesTheInputRows) {
  Case t = transpose_case(48, 64);
  SearchSpace space(task_of(t));
  Candidate d = space.default_candidate();
  std::string trace = d.trace.to_json();
  // X[48, 64] -> T[64, 48]: T's rows axis i (64) is X's contiguous one; split by 16.
  EXPECT_NE(trace.find("\"axis_names\":[\"i\"],\"ints\":[16],\"kind\":\"split\""), std::string::npos) << trace;
  check_computes(t, space, d, 11);
  Case odd = transpose_case(20, 36);  // 20 rows: a tile of 10
  SearchSpace odd_space(task_of(odd));
  check_computes(odd, odd_space, odd_space.default_candidate(), 12);
}

// The default stores a padded input once for a conv (the ResNet layers win
// that way) but inlines it for a depthwise conv, which reads each input for
// one channel only: there the copy doubled the traffic.
TEST_P(TunerSketch, DefaultInlinesTheDepthwisePadding) {
  const int lanes = rules_lanes();
  te::Tensor X = te::placeholder({1, 2, 14, 14, lanes}, DataType::Float(32), "X"), W = te::placeholder({2, 3, 3, lanes}, DataType::Float(32), "W");
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = 2;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
  te::Tensor O = ops::depthwise_conv2d_nchwc(X, W, p);
  SearchSpace dw(make_task({X, W, O}, rules_target()));
  Candidate d = dw.default_candidate();
  EXPECT_EQ(dw.describe_sketch(d.sketch).find(": simple"), std::string::npos) << dw.describe_sketch(d.sketch);
  // A plain NCHWc conv keeps its stored padding.
  SearchSpace conv(task_of(conv_nchwc_case(1)));
  EXPECT_NE(conv.describe_sketch(conv.default_candidate().sketch).find("conv.pad: simple"), std::string::npos) << conv.describe_sketch(conv.default_candidate().sketch);
}

// A stride-2 conv whose padded input outgrows 1 MiB (ResNet-50's 128 -> 128
// 3 x 3 stride-2 conv at 56 x 56: 1.7 MiB padded) reads its input with the
// padding inlined by default: the stored copy beside its source outgrows
// L2 and the conv read it back from L3 (kInlinePadBytes, search_space.cpp).
// At 28 x 28 x 256 (0.9 MiB), or at stride 1 (each input read 9 times), the
// padding stays stored. Sketch choice only: the inlined form computes
// (check_all_sketches, tuner_search_space_test).
TEST_P(TunerSketch, DefaultInlinesTheLargePaddedInputOfAStridedConv) {
  const int block = 2 * rules_lanes();
  auto sketch_of = [&](int C, int HW, int stride) {
    SearchSpace space(task_of(conv_nchwc_case({1, C, HW, HW, C, 3, 3, stride, 1, 1}, block, block)));
    return space.describe_sketch(space.default_candidate().sketch);
  };
  std::string large = sketch_of(128, 56, 2), small = sketch_of(256, 28, 2), unstrided = sketch_of(128, 56, 1);
  EXPECT_NE(large.find("conv.pad: inline"), std::string::npos) << rules_target().str() << ": " << large;
  EXPECT_NE(small.find("conv.pad: simple"), std::string::npos) << rules_target().str() << ": " << small;
  EXPECT_NE(unstrided.find("conv.pad: simple"), std::string::npos) << rules_target().str() << ": " << unstrided;
}

// The input gradient of a stride-1 conv reads dY at oh + kh: no stride, so
// its large padded dY stays stored even though its output channel index is
// a block times the block width (ResNet-18's training step, batch 8, AVX2
// code: 494 ms a step with that multiple taken for a stride, 292 without).
TEST_P(TunerSketch, TheInputGradientOfAStrideOneConvKeepsItsPaddedCopy) {
  const int block = 2 * rules_lanes();
  te::Tensor dY = te::placeholder({8, 256 / block, 14, 14, block}, DataType::Float(32), "dY");
  te::Tensor W = te::placeholder({256, 256, 3, 3}, DataType::Float(32), "W");
  ops::Conv2dParams p;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
  te::Tensor dX = ops::conv2d_nchwc_grad_input(dY, W, p, 14, 14, block);
  SearchSpace space(make_task({dY, W, dX}, rules_target()));
  std::string sketch = space.describe_sketch(space.default_candidate().sketch);
  EXPECT_EQ(sketch.find(": inline"), std::string::npos) << rules_target().str() << ": " << sketch;
}

// A depthwise conv's default register tile takes at most half the target's
// registers: every FMA loads its own input, so a wider tile saves only
// weight loads, and the other half holds the loads and the epilogue. Two
// vectors x 14 pixels (AVX-512) spilled and ran MobileNetV2's and
// EfficientNet-B0's 14 x 14 depthwise layers 1.3-1.4x slower than 2 x 7.
TEST_P(TunerSketch, ADepthwiseTileLeavesHalfTheRegisters) {
  const int lanes = rules_lanes(), registers = rules_target().num_vector_registers();
  for (int stride : {1, 2}) {
    te::Tensor X = te::placeholder({1, 3, 2 * 14, 2 * 14, 2 * lanes}, DataType::Float(32), "X"), W = te::placeholder({3, 3, 3, 2 * lanes}, DataType::Float(32), "W");
    ops::Conv2dParams p;
    p.stride_h = p.stride_w = stride;
    p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
    te::Tensor O = ops::depthwise_conv2d_nchwc(X, W, p);
    SearchSpace space(make_task({X, W, O}, rules_target()));
    Candidate d = space.default_candidate();
    auto inner = [&](const std::string& label) {
      std::vector<int> f = tile_of(space, d, label);
      return f.empty() ? 1 : f.back();
    };
    const int accumulators = inner("dwconv.n") * inner("dwconv.co") * inner("dwconv.y") * inner("dwconv.x") * ((inner("dwconv.ci") + lanes - 1) / lanes);
    EXPECT_LE(accumulators, registers / 2) << rules_target().str() << ": " << space.describe_candidate(d);
    EXPECT_GE(accumulators, 4) << rules_target().str() << ": " << space.describe_candidate(d);
  }
}

// A 3-channel stem (3x3, stride 2) unrolls the channels of its block only,
// not the kernel columns: unrolled, the columns' taps reread the inputs of
// neighbouring pixels, which LLVM kept in registers beside the register tile
// (175 vector spills and reloads per tile on AVX-512).
TEST_P(TunerSketch, AStemConvUnrollsItsBlocksChannelsOnlyAndDoesNotSpill) {
  const int lanes = rules_lanes();
  te::Tensor X = te::placeholder({1, 1, 224, 224, 3}, DataType::Float(32), "X"), W = te::placeholder({2, 1, 3, 3, 3, lanes}, DataType::Float(32), "W");
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = 2;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
  te::Tensor O = ops::conv2d_nchwc_general(X, W, p);
  SearchSpace space(make_task({X, W, O}, rules_target()));
  Candidate d = space.default_candidate();
  const std::string text = space.describe_candidate(d);
  EXPECT_NE(text.find("conv.rx=3x1"), std::string::npos) << text;
  EXPECT_NE(text.find("conv.rci=1x3"), std::string::npos) << text;
  te::Schedule sch = space.materialize(&d);
  std::string assembly = codegen::emit_assembly({te::lower(sch, {X, W, O}, "stem")}, rules_target());
  testing::SpillCount spills = testing::count_vector_spills(assembly, rules_target().vector_bits / 8);
  EXPECT_LE(spills.total(), 24) << rules_target().str() << ": " << spills.first;
}

// A 1 x 1 conv whose weights for one output-channel block outgrow L1
// (1024 channels of blocks a vector wide: 32 KiB on AVX2, 64 on AVX-512)
// has a streamed seed: the accumulator at S0, every channel block in the
// outer reduce loop, a block's channels inside (stream_channel_blocks,
// search_space_seeds.cpp). It computes, and it is the default on a target
// of 16 vector registers (AVX2) only; with 32 (AVX-512) the default is the
// plain seed (measured faster there). Smaller 1 x 1 convs keep the
// accumulator at S1 everywhere (3 x 3 convs: the test below).
TEST_P(TunerSketch, DefaultStreamsTheChannelBlocksOfAWideOneByOneConvOnAvx2) {
  const int lanes = rules_lanes();
  const bool streams = rules_target().num_vector_registers() <= 16;
  auto has = [](const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; };
  auto is_streamed = [&](const std::string& text) {
    return has(text, "conv.location=1") && has(text, "conv.rco=" + std::to_string(1024 / lanes) + "x1") &&
           has(text, "conv.rci=1x" + std::to_string(lanes));
  };
  Case wide = conv_nchwc_case({1, 1024, 7, 7, 2 * lanes, 1, 1, 1, 0, 1}, lanes, lanes);
  SearchSpace space(task_of(wide));
  Candidate d = space.default_candidate();
  std::string text = space.describe_candidate(d);
  EXPECT_EQ(is_streamed(text), streams) << rules_target().str() << ": " << text;
  if (!streams) {
    EXPECT_TRUE(has(text, "conv.location=0")) << text;
  }
  std::vector<Candidate> seeds = space.seeds();
  auto streamed = std::find_if(seeds.begin(), seeds.end(), [&](const Candidate& c) { return is_streamed(space.describe_candidate(c)); });
  ASSERT_NE(streamed, seeds.end()) << "no streamed seed on " << rules_target().str();
  check_computes(wide, space, *streamed, 21);
  EXPECT_TRUE(std::any_of(seeds.begin(), seeds.end(), [&](const Candidate& c) { return has(space.describe_candidate(c), "conv.location=0"); }));
  EXPECT_TRUE(std::any_of(seeds.begin(), seeds.end(), [&](const Candidate& c) { return space.describe_candidate(c) == text; }));
  SearchSpace other(task_of(conv_nchwc_case({1, 256, 7, 7, 2 * lanes, 1, 1, 1, 0, 1}, lanes, lanes)));
  std::string t = other.describe_candidate(other.default_candidate());
  EXPECT_TRUE(has(t, "conv.location=0")) << t;
}

// A 1 x 1 conv whose weights reach 4 MiB (ResNet-50's layer4: 2048 -> 512
// at 7 x 7) and whose output for one block of output channels fits the
// accumulator streams its channel blocks by default on every target: on
// AVX-512 too (streams_from_l3, search_space_seeds.cpp), so each weight is
// fetched from beyond L2 once for all the image's pixels instead of once
// per row of tiles. With weights that stay in L2 (512 -> 512), or an image
// whose output outgrows the accumulator (14 x 14), AVX-512 keeps the plain
// seed. Decisions only: the streamed form computes (the test above).
TEST_P(TunerSketch, DefaultStreamsTheWeightsOfALargeOneByOneConvOnASmallImage) {
  const int lanes = rules_lanes(), block = 2 * lanes;
  const bool avx2 = rules_target().num_vector_registers() <= 16;
  auto has = [](const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; };
  auto default_of = [&](int C, int K, int HW) {
    SearchSpace space(task_of(conv_nchwc_case({1, C, HW, HW, K, 1, 1, 1, 0, 1}, block, block)));
    return space.describe_candidate(space.default_candidate());
  };
  for (auto [C, K] : {std::pair{2048, 512}, std::pair{512, 2048}}) {
    std::string text = default_of(C, K, 7);
    EXPECT_TRUE(has(text, "conv.location=1")) << rules_target().str() << " " << C << " -> " << K << ": " << text;
    EXPECT_TRUE(has(text, "conv.rco=" + std::to_string(C / block) + "x1")) << text;
    EXPECT_TRUE(has(text, "conv.rci=1x" + std::to_string(block))) << text;
    EXPECT_TRUE(has(text, "conv.y=1x1x7x1")) << text;  // every row of tiles inside each step
  }
  if (!avx2) {
    std::string small = default_of(512, 512, 7), large_image = default_of(2048, 512, 14);
    EXPECT_TRUE(has(small, "conv.location=0")) << small;
    EXPECT_TRUE(has(large_image, "conv.location=0")) << large_image;
  }
}

// A 3 x 3 conv whose weights for one output-channel block reach 512 KiB
// (ResNet-18's 512 -> 512 at 7 x 7: 590 KiB a block of two vectors on
// AVX-512; here 1024 -> 2 vectors) streams its channel blocks by default on a target of 32 vector
// registers: the accumulator at S0, the channel blocks and the seed's outer
// part of a block's channels in R0, the window's taps and the unrolled
// channels in R1, the rows of tiles inside each step where the blocks give
// every core a few (stream_channel_blocks with windows). AVX2 keeps the seed; so does a 3 x 3 conv of 128 channels
// (147 KiB a block) everywhere. The streamed default computes.
TEST_P(TunerSketch, DefaultStreamsTheChannelBlocksOfAWideThreeByThreeConvOnAvx512) {
  const int lanes = rules_lanes();
  const bool streams = rules_target().num_vector_registers() > 16;
  auto has = [](const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; };
  // 1024 input channels (1.2 MiB a block on AVX-512, 590 KiB on AVX2), one
  // block of outputs: the check of its result stays short.
  Case wide = conv_nchwc_case({1, 1024, 7, 7, 2 * lanes, 3, 3, 1, 1, 1}, 2 * lanes, 2 * lanes);
  SearchSpace space(task_of(wide));
  Candidate d = space.default_candidate();
  std::string text = space.describe_candidate(d);
  EXPECT_EQ(has(text, "conv.location=1"), streams) << rules_target().str() << ": " << text;
  if (streams) {
    for (const char* part : {"conv.ry=1x3", "conv.rx=1x3"}) EXPECT_TRUE(has(text, part)) << text;
    EXPECT_TRUE(has(text, "conv.rco=" + std::to_string(1024 / (2 * lanes)) + "x1")) << text;
  }
  check_computes(wide, space, d, 22);
  // The streamed form is a seed on every target (the search measures it first).
  std::vector<Candidate> seeds = space.seeds();
  EXPECT_TRUE(std::any_of(seeds.begin(), seeds.end(), [&](const Candidate& c) {
    std::string t = space.describe_candidate(c);
    return has(t, "conv.location=1") && has(t, "conv.rx=1x3");
  })) << rules_target().str();
  if (streams) EXPECT_TRUE(std::any_of(seeds.begin(), seeds.end(), [&](const Candidate& c) { return space.describe_candidate(c) == text; }));
  SearchSpace small(task_of(conv_nchwc_case({1, 128, 14, 14, 2 * lanes, 3, 3, 1, 1, 1}, 2 * lanes, 2 * lanes)));
  std::string t = small.describe_candidate(small.default_candidate());
  EXPECT_TRUE(has(t, "conv.location=0")) << t;
}

// A conv whose input outweighs its weights and its output runs the pixels
// outside the output-channel blocks in the parallel loop (so consecutive
// iterations share one tile of input); a conv whose weights are the larger
// operand, or whose output is, keeps the blocks outermost. All compute.
TEST_P(TunerSketch, PixelsGoOutsideTheChannelBlocksWhereTheInputIsTheLargest) {
  const int lanes = rules_lanes();
  auto parallel_axes = [](const Candidate& c) {
    std::string t = c.trace.to_json();
    size_t at = t.find("\"axis_names\":[\"n.outer\"");
    return at == std::string::npos ? t : t.substr(at, t.find(']', at) - at);
  };
  struct Shape {
    testing::ref::ConvShape cs;
    bool pixels_outside;
  };
  for (const Shape& sh : {Shape{{1, 8 * lanes, 14, 14, 2 * lanes, 1, 1, 1, 0, 1}, true},   // input 4x the output, 28x the weights
                          Shape{{1, 8 * lanes, 2, 2, 2 * lanes, 1, 1, 1, 0, 1}, false},    // weights 4x the input
                          Shape{{1, lanes, 14, 14, 4 * lanes, 1, 1, 1, 0, 1}, false}}) {   // output 4x the input
    Case c = conv_nchwc_case(sh.cs, lanes, lanes);
    SearchSpace space(task_of(c));
    Candidate d = space.default_candidate();
    std::string axes = parallel_axes(d);
    size_t fo = axes.find("fo.outer"), y = axes.find("y.outer");
    ASSERT_TRUE(fo != std::string::npos && y != std::string::npos) << axes;
    EXPECT_EQ(y < fo, sh.pixels_outside) << "C=" << sh.cs.C << " K=" << sh.cs.K << " H=" << sh.cs.H << ": " << axes;
    check_computes(c, space, d, 17);
  }
}

// A 7-wide register tile of a blocked conv (ResNet's last stage) takes one
// output-channel block, not two: each block brings its own weight vectors,
// and two blocks of 7 pixels x 2 vectors need one register more than
// AVX-512 has (they ran 1.2-1.3x the time of one block on Zen 5). The tile
// the default takes fits the target's registers: accumulators, the weight
// vectors they share, and one broadcast input.
TEST_P(TunerSketch, ARegisterTileOfChannelBlocksFitsTheRegisters) {
  const int lanes = rules_lanes(), registers = rules_target().num_vector_registers();
  // The register-level (last) factor of slot `label`.
  auto inner = [](const SearchSpace& space, const Candidate& d, const std::string& label) {
    std::vector<int> factors = tile_of(space, d, label);
    EXPECT_FALSE(factors.empty()) << label << " not in " << space.describe_candidate(d);
    return factors.empty() ? 1 : factors.back();
  };
  for (int ks : {1, 3}) {
    Case c = conv_nchwc_case({1, 8 * lanes, 7, 7, 8 * lanes, ks, ks, 1, ks / 2, 1}, 2 * lanes, 2 * lanes);
    SearchSpace space(task_of(c));
    Candidate d = space.default_candidate();
    std::string text = space.describe_candidate(d);
    int vectors = (inner(space, d, "conv.fi") + lanes - 1) / lanes, blocks = inner(space, d, "conv.fo");
    int pixels = inner(space, d, "conv.n") * inner(space, d, "conv.y") * inner(space, d, "conv.x");
    EXPECT_LE(blocks * vectors * (pixels + 1) + 1, registers) << rules_target().str() << ": " << text;
    if (pixels == 7) {
      EXPECT_EQ(blocks, 1) << text;
    }
    check_computes(c, space, d, 23);
  }
}

TEST_P(TunerSketch, PanelLoopGoesOutsideTheRowsOfASharedB) {
  const int M = 24, N = 4 * rules_lanes(), K = 32;
  te::Tensor A = te::placeholder({M, 1, K}, DataType::Float(32), "A"), B = te::placeholder({K, N}, DataType::Float(32), "B");
  IterVar k = te::reduce_axis(Range(0, K), "k");
  te::Tensor C = te::compute({M, 1, N}, [&](const std::vector<Var>& v) { return te::sum(A(v[0], v[1], k.var()) * B(k.var(), v[2]), {k}); }, "C", {"b", "i", "j"});
  Case c{"shared_b", {A, B, C}, [=](const std::vector<Vec>& in) { return std::vector<Vec>{testing::ref::matmul(in[0], in[1], M, N, K)}; }};
  SearchSpace space(task_of(c));
  Candidate d = space.default_candidate();
  std::string trace = d.trace.to_json();
  EXPECT_NE(trace.find("\"axis_names\":[\"j.outer\",\"b.outer\",\"i.outer\""), std::string::npos) << trace;
  check_computes(c, space, d, 13);
}

// The target-derived seeds: every multi-level-tiled sketch whose innermost
// axis holds one or two vectors gets them; each computes the right result,
// its register tile (rows x vectors of accumulators, one row of operand
// vectors, one broadcast) fits the target's registers with one to spare,
// and the vector width is one or two of the target's vectors (a matmul's
// first seed four on AVX-512 from 128 rows on).
TEST_P(TunerSketch, SeedsComputeAndFitTheRegisters) {
  const int lanes = rules_lanes(), regs = rules_target().num_vector_registers();
  struct Tiled {
    Case c;
    std::string vec, rows1, rows2;  // tile labels: the vector axis and the two axes before it
  };
  for (const Tiled& t : {Tiled{matmul_case(132, 4 * lanes, 32), "C.j", "C.i", ""}, Tiled{dense_bias_relu_case(16, 2 * lanes, 24), "", "", ""},
                         Tiled{conv_nchwc_case(1, 2 * lanes), "conv.fi", "conv.x", "conv.y"}}) {
    Task task = task_of(t.c);
    SearchSpace space(task);
    std::vector<Candidate> seeds = space.seeds();
    ASSERT_GE(seeds.size(), 2u) << t.c.name;
    std::set<std::string> distinct;
    for (size_t k = 0; k < seeds.size(); ++k) {
      SCOPED_TRACE(t.c.name + " seed " + std::to_string(k) + ": " + space.describe_candidate(seeds[k]));
      EXPECT_TRUE(distinct.insert(space.describe_candidate(seeds[k])).second) << "seeds repeat";
      if (!t.vec.empty()) {
        int width = tile_of(space, seeds[k], t.vec).back(), vectors = width / lanes;
        // Four vectors too for a matmul with 32 registers (AVX-512): its default.
        const bool four = regs >= 32 && t.c.name == "matmul" && vectors == 4;
        EXPECT_TRUE(width % lanes == 0 && (vectors == 1 || vectors == 2 || four)) << "width " << width;
        if (k == 0 && t.c.name == "matmul") EXPECT_EQ(vectors, regs >= 32 ? 4 : 2) << "the first seed's width " << width;
        int rows = tile_of(space, seeds[k], t.rows1).back();
        if (!t.rows2.empty()) rows *= tile_of(space, seeds[k], t.rows2).back();
        // The accumulators and the broadcast register fit; on x86 the vector
        // operand may come from memory (folded into the FMA), elsewhere it
        // needs registers of its own and one spare.
        bool x86 = task.target.triple.rfind("x86_64", 0) == 0;
        if (x86) EXPECT_LE(rows * vectors + 1, regs) << "rows " << rows << ", width " << width;
        else EXPECT_LE(rows * vectors + vectors + 1, regs - 1) << "rows " << rows << ", width " << width;
        // A matmul's tile takes 6 rows (M = 132 has that divisor), fewer
        // than fill AVX-512's registers: measured faster (kMaxMatmulRows).
        if (t.c.name == "matmul") {
          EXPECT_EQ(rows, 6) << "rows " << rows;
        }
      }
      check_computes(t.c, space, seeds[k], 60 + static_cast<uint32_t>(k));
      if (::testing::Test::HasFailure()) return;
    }
  }
  // No tiled stage, no seed.
  EXPECT_TRUE(SearchSpace(task_of(chain_case(12, 40))).seeds().empty());
  // Under 128 rows (Swin-T's 49) the four-vector tile ran at half the rate: two vectors first.
  SearchSpace few_rows(task_of(matmul_case(49, 4 * lanes, 32)));
  std::vector<Candidate> few = few_rows.seeds();
  ASSERT_FALSE(few.empty());
  EXPECT_EQ(tile_of(few_rows, few[0], "C.j").back(), 2 * lanes) << few_rows.describe_candidate(few[0]);
}

// Where 6 does not divide a matmul's rows, its default tile takes the
// nearest divisor that fits the registers, the larger on a tie: 8 of 128
// rows on AVX-512 (BERT's projections 1.22x on one Zen 5 core against 4),
// still 4 on AVX2, where two vectors fit 6 rows. Unrolled: the rows, not
// the whole reduce tile too (8 x 16 steps ran 0.75x the speed).
TEST_P(TunerSketch, AMatmulWithoutSixRowsTakesTheNearestRowsThatFit) {
  const int lanes = rules_lanes();
  Case c = matmul_case(128, 2 * lanes, 64);
  SearchSpace space(task_of(c));
  Candidate d = space.default_candidate();
  const bool avx512 = rules_target().num_vector_registers() == 32;
  EXPECT_EQ(tile_of(space, d, "C.i").back(), avx512 ? 8 : 4) << space.describe_candidate(d);
  EXPECT_EQ(tile_of(space, d, "C.j").back(), 2 * lanes) << space.describe_candidate(d);
  const std::string text = space.describe_candidate(d);
  EXPECT_NE(text.find("C.unroll=2"), std::string::npos) << text;
  check_computes(c, space, d, 71);
}

// A batched matmul with one weight ([8, 128, K] x [K, N], BERT's forward
// projections and FFN in training) counts its rows over the batch: 1024
// rows, so on AVX2 each batch's 128 pad to 132 for 6-row tiles: the FFN's
// [8, 128, 768] x [768, 3072] + bias in 0.92x the CPU time of 4 rows (93-95
// against 86-88 GFLOP/s, padding counted as waste; one core of the loaded
// Xeon, -mcpu=znver3). 32 rows in all keep 4. AVX-512 keeps its 8.
TEST_P(TunerSketch, ABatchedMatmulCountsItsRowsOverTheBatch) {
  const int lanes = rules_lanes(), N = 2 * lanes, K = 16;
  const bool avx512 = rules_target().num_vector_registers() == 32;
  for (int batch : {8, 1}) {
    const int M = batch == 8 ? 128 : 32;
    te::Tensor A = te::placeholder({batch, M, K}, DataType::Float(32), "A"), B = te::placeholder({K, N}, DataType::Float(32), "B");
    Case c{"batched_matmul", {A, B, ops::matmul_nd(A, B, "C")},
           [=](const std::vector<Vec>& in) { return std::vector<Vec>{testing::ref::matmul(in[0], in[1], batch * M, N, K)}; }};
    SearchSpace space(task_of(c));
    Candidate d = space.default_candidate();
    SCOPED_TRACE(space.describe_candidate(d));
    EXPECT_EQ(tile_of(space, d, "C.i").back(), avx512 ? 8 : (batch == 8 ? 6 : 4));
    check_computes(c, space, d, 73 + batch);
  }
}

auto target_name = [](const ::testing::TestParamInfo<std::string>& info) { return testing::target_test_name(info.param); };
INSTANTIATE_TEST_SUITE_P(Targets, TunerSketch, ::testing::ValuesIn(rule_targets()), target_name);

}  // namespace
}  // namespace kiln::tuner
