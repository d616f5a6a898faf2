// The C++ client of the peer launcher (kiln/tuner/peer.h): a peer answers
// timing requests, a peer that cannot start or dies is reported as a
// PeerError and dropped from an interleaved comparison, which still runs.
#include "kiln/tuner/peer.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace kiln::tuner;

TEST(Peer, FindsTheLauncherAndThePlotScript) {
  EXPECT_TRUE(std::filesystem::exists(peers_dir() + "/launcher.py")) << peers_dir();
  EXPECT_TRUE(std::filesystem::exists(plot_curve_script())) << plot_curve_script();
}

TEST(Peer, AnswersTimingRequests) {
  PeerProcess p({"softmax", "numpy", {8, 32}, 1, "", ""});
  EXPECT_EQ(p.label().rfind("numpy", 0), 0u) << p.label();
  EXPECT_GE(p.check_error(), 0);
  EXPECT_LT(p.check_error(), 1e-5);  // against a float64 softmax
  std::vector<double> t = p.time(3, 1);
  ASSERT_EQ(t.size(), 3u);
  for (double x : t) EXPECT_GT(x, 0);
}

TEST(Peer, BadSpecIsAPeerErrorWithTheReason) {
  try {
    PeerProcess p({"nope", "numpy", {1}, 1, "", ""});
    FAIL() << "expected a PeerError";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown peer workload 'nope'"), std::string::npos) << e.what();
  }
}

TEST(Peer, ComparisonDropsAFailingPeerAndKeepsTheOthers) {
  int calls = 0;
  auto kiln_round = [&] { return 1e-3 * (1 + (calls++ % 2)); };
  Comparison c = compare_interleaved(kiln_round, {{"softmax", "numpy", {8, 32}, 1, "", ""}, {"gemm", "numpy", {4}, 1, "", ""}}, 5, 1);
  ASSERT_EQ(c.kiln.size(), 5u);
  ASSERT_EQ(c.peers.size(), 1u);
  ASSERT_EQ(c.failed.size(), 1u);
  EXPECT_NE(c.failed[0].find("gemm/numpy"), std::string::npos);
  ASSERT_EQ(c.best, 0);
  ASSERT_EQ(c.ratios.size(), 5u);
  for (size_t r = 0; r < 5; ++r) EXPECT_DOUBLE_EQ(c.ratios[r], c.kiln[r] / c.peers[0].times[r]);
}
