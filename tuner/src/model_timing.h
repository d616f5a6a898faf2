// Internal to the tuner: timing whole compiled models against each other,
// interleaved round by round. The graph search (graph_search.cpp) times its
// candidate plans so; the records gate (records_gate.cpp) the model with its
// records against the model with the default schedules.
#ifndef KILN_TUNER_SRC_MODEL_TIMING_H
#define KILN_TUNER_SRC_MODEL_TIMING_H

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/graph/executor.h"
#include "kiln/graph/layout_plan.h"

namespace kiln::tuner::detail {

/** Seeded inputs for `g` (static shapes): uniform floats in [-1, 1], zeros for other types. */
std::vector<NDArray> random_inputs(const graph::Graph& g, uint64_t seed);
/** "" when `got` matches `want` (float32 within 1e-3 of the largest magnitude; others bit for bit), else what differs. */
std::string mismatch(const std::vector<NDArray>& got, const std::vector<NDArray>& want);
/** Seconds per call of `n` back-to-back calls. */
double time_calls(const graph::Executor& e, const std::vector<NDArray>& in, int n);

struct Comparison {
  std::vector<double> ratios;  // candidate / incumbent, per round
  std::vector<double> cand, inc;
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  }
  /**
   * The ratio a decision rests on: the larger of the median per-round ratio
   * and the ratio of the two sides' fastest rounds. On a loaded machine
   * (ResNet-18 at load 15: the incumbent's rounds from 23 to 33 ms) either
   * alone can favour a candidate by chance; a win has to show in both.
   */
  double decisive() const {
    return std::max(median(ratios), *std::min_element(cand.begin(), cand.end()) / *std::min_element(inc.begin(), inc.end()));
  }
};

/** `rounds` more interleaved rounds (who goes first alternates); each side's best of two runs of >= round_ms. */
void compare(const graph::Executor& inc, const graph::Executor& cand, const std::vector<NDArray>& in, int rounds, double round_ms, Comparison* c);

/** `g` compiled under `plan` as given (neither a stored plan nor the records' choice). */
graph::Executor compile_under(const graph::Graph& g, const graph::CompileOptions& options, const graph::LayoutPlan& plan);

}  // namespace kiln::tuner::detail

#endif  // KILN_TUNER_SRC_MODEL_TIMING_H
