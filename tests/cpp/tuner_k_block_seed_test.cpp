// The K-blocked seed of a matmul whose K x panel slice of weights outgrows a
// small L2 (block_k_of_wide_panels, ops/src/search_space_k_blocks.cpp), per
// rule target (AVX2 and AVX-512): the search gets it as a seed, it computes
// against a naive matmul (odd rows: 77), and the default keeps the plain
// seed's whole reduction per register tile (the blocked form ran slower on a
// 2 MiB L2).
#include "sketch_cases.h"

namespace kiln::tuner {
namespace {

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// A seed is K-blocked where the accumulator sits at S0 and its reduce tile is cut in more than one block of more than the unroll.
bool k_blocked(const SearchSpace& space, const Candidate& c) {
  const std::vector<int> k = tile_of(space, c, "C.k");
  return has(space.describe_candidate(c), "C.location=1") && k.size() == 2 && k[0] > 1 && k[1] > 16;
}

TEST_P(TunerSketch, AMatmulWithAWidePanelGetsAKBlockedSeedThatComputes) {
  const int lanes = rules_lanes(), K = 4608;  // K x panel: 1.1 MiB on AVX-512 (64 wide), 288 KiB on AVX2 (16 wide)
  Case c = dense_bias_relu_case(77, 4 * lanes, K);
  SearchSpace space(task_of(c));
  Candidate d = space.default_candidate();
  EXPECT_FALSE(k_blocked(space, d)) << rules_target().str() << ": " << space.describe_candidate(d);
  std::vector<Candidate> seeds = space.seeds();
  auto blocked = std::find_if(seeds.begin(), seeds.end(), [&](const Candidate& s) { return k_blocked(space, s); });
  ASSERT_NE(blocked, seeds.end()) << "no K-blocked seed on " << rules_target().str() << "; first seed " << space.describe_candidate(seeds.at(0));
  const std::string text = space.describe_candidate(*blocked);
  // Every row tile inside the blocks (S2), a block's slice of the panel at most 24 KiB.
  const std::vector<int> rows = tile_of(space, *blocked, "C.i"), k = tile_of(space, *blocked, "C.k");
  const int width = tile_of(space, *blocked, "C.j").back();
  EXPECT_EQ(rows[0] * rows[1], 1) << text;
  EXPECT_EQ(int64_t(k[0]) * k[1], K) << text;
  EXPECT_LE(k[1] * width * 4, 24 << 10) << text;
  EXPECT_GE(k[1] * width * 4, 12 << 10) << text;
  check_computes(c, space, *blocked, 91);
  // A panel that stays in a small L2 (K = 256) gets no blocked seed.
  SearchSpace narrow(task_of(dense_bias_relu_case(77, 4 * lanes, 256)));
  for (const Candidate& s : narrow.seeds()) EXPECT_FALSE(k_blocked(narrow, s)) << narrow.describe_candidate(s);
}

auto target_name = [](const ::testing::TestParamInfo<std::string>& info) { return testing::target_test_name(info.param); };
INSTANTIATE_TEST_SUITE_P(Targets, TunerSketch, ::testing::ValuesIn(rule_targets()), target_name);

}  // namespace
}  // namespace kiln::tuner
