// Row multiplicities of Features: collapsing identical rows and checking a
// matrix before the cost model uses it.
#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include "kiln/support/error.h"
#include "kiln/tuner/features.h"

namespace kiln::tuner {

double Features::total_rows() const {
  if (counts.empty()) return rows;
  double n = 0;
  for (float c : counts) n += c;
  return n;
}

Features collapse_rows(const Features& f) {
  Features out;
  out.cols = f.cols;
  const size_t bytes = static_cast<size_t>(f.cols) * sizeof(float);
  std::unordered_map<std::string_view, size_t> seen;  // views into f.values
  for (int r = 0; r < f.rows; ++r) {
    const float* row = f.values.data() + static_cast<size_t>(r) * f.cols;
    auto [it, fresh] = seen.emplace(std::string_view(reinterpret_cast<const char*>(row), bytes), out.counts.size());
    if (fresh) {
      out.values.insert(out.values.end(), row, row + f.cols);
      out.counts.push_back(static_cast<float>(f.count(r)));
    } else {
      out.counts[it->second] += static_cast<float>(f.count(r));
    }
  }
  out.rows = static_cast<int>(out.counts.size());
  return out;
}

Features widen_earlier_features(const Features& f) {
  const int cols = num_feature_columns();
  KILN_CHECK(f.cols == num_earlier_feature_columns() && f.values.size() == static_cast<size_t>(f.rows) * f.cols)
      << "widen_earlier_features: a " << f.rows << "x" << f.cols << " matrix of " << f.values.size() << " values";
  Features out;
  out.rows = f.rows;
  out.cols = cols;
  out.counts = f.counts;
  out.values.assign(static_cast<size_t>(f.rows) * cols, std::nanf(""));
  for (int r = 0; r < f.rows; ++r) {
    const float* row = f.values.data() + static_cast<size_t>(r) * f.cols;
    std::copy(row, row + f.cols, out.values.begin() + static_cast<ptrdiff_t>(r) * cols);
  }
  return out;
}

void check_features(const Features& f, const std::string& what) {
  KILN_USER_CHECK(f.cols == num_feature_columns() && f.rows >= 0 && f.values.size() == static_cast<size_t>(f.rows) * f.cols)
      << what << " has a " << f.rows << "x" << f.cols << " feature matrix with " << f.values.size() << " values; expected "
      << num_feature_columns() << " columns (" << feature_extractor_name() << "); re-extract its features";
  KILN_USER_CHECK(f.counts.empty() || f.counts.size() == static_cast<size_t>(f.rows))
      << what << " has " << f.counts.size() << " row counts for " << f.rows << " rows; expected one per row (or none)";
  for (float c : f.counts)
    KILN_USER_CHECK(std::isfinite(c) && c >= 1) << what << " has a row count of " << c << "; counts are whole numbers >= 1";
}

}  // namespace kiln::tuner
