// Timing whole compiled models against each other (model_timing.h): the
// graph search's candidates and the records gate's two compiles.
#include "model_timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

namespace kiln::tuner::detail {

using namespace graph;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

std::vector<NDArray> random_inputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<NDArray> out;
  for (const auto& in : g.inputs()) {
    const TensorType& t = in->types[0];
    std::vector<int64_t> shape;
    for (const Dim& d : t.shape) shape.push_back(d.value());
    NDArray a = NDArray::empty(shape, t.dtype);
    if (t.dtype == DataType::Float(32)) {
      float* p = a.data_as<float>();
      for (int64_t i = 0; i < a.numel(); ++i) p[i] = uniform(rng);
    } else {
      std::memset(a.data(), 0, static_cast<size_t>(a.nbytes()));  // indices and masks: zeros are in range
    }
    out.push_back(a);
  }
  return out;
}

/** "" when `got` matches `want` (float32 within 1e-3 of the largest magnitude; others bit for bit), else what differs. */
std::string mismatch(const std::vector<NDArray>& got, const std::vector<NDArray>& want) {
  if (got.size() != want.size()) return "a different number of outputs";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].shape() != want[i].shape() || got[i].dtype() != want[i].dtype()) return "output " + std::to_string(i) + " has another shape or type";
    if (want[i].dtype() != DataType::Float(32)) {
      if (std::memcmp(got[i].data(), want[i].data(), static_cast<size_t>(want[i].nbytes())) != 0) return "output " + std::to_string(i) + " differs";
      continue;
    }
    const float *a = got[i].data_as<float>(), *b = want[i].data_as<float>();
    double scale = 0, diff = 0;
    for (int64_t k = 0; k < want[i].numel(); ++k) {
      scale = std::max(scale, std::fabs(static_cast<double>(b[k])));
      diff = std::max(diff, std::fabs(static_cast<double>(a[k]) - b[k]));
    }
    if (!(diff <= 1e-3 * std::max(scale, 1e-6))) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "output %zu differs from the incumbent's by %.3g (largest magnitude %.3g)", i, diff, scale);
      return buf;
    }
  }
  return "";
}

/** Seconds per call of `n` back-to-back calls. */
double time_calls(const Executor& e, const std::vector<NDArray>& in, int n) {
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) e.run(in);
  return seconds_since(t0) / n;
}


/** `rounds` more interleaved rounds (who goes first alternates); each side's best of two runs of >= round_ms. */
void compare(const Executor& inc, const Executor& cand, const std::vector<NDArray>& in, int rounds, double round_ms, Comparison* c) {
  double single = std::max(1e-6, std::min(time_calls(inc, in, 1), time_calls(cand, in, 1)));
  int n = std::max(1, static_cast<int>(std::ceil(round_ms * 1e-3 / single)));
  for (int r = 0; r < rounds; ++r) {
    double t[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      int side = (r + k) % 2;  // 0: candidate
      const Executor& e = side == 0 ? cand : inc;
      t[side] = std::min(time_calls(e, in, n), time_calls(e, in, n));
    }
    c->cand.push_back(t[0]);
    c->inc.push_back(t[1]);
    c->ratios.push_back(t[0] / t[1]);
  }
}

Executor compile_under(const Graph& g, const CompileOptions& options, const LayoutPlan& plan) {
  CompileOptions o = options;
  o.choose_layouts = false;  // the plan as given, neither a stored one nor the records' choice
  o.layout_plan = plan;
  return compile(g, o);
}

}  // namespace kiln::tuner::detail
