// Features to and from the tuning DB's FeatureSet, and training samples from
// stored records of any extractor version.
#include <cmath>

#include "kiln/tuner/feature_records.h"

#include "kiln/support/error.h"
#include "kiln/te/trace.h"

namespace kiln::tuner {

tuning_db::FeatureSet to_feature_set(const Features& f) {
  const int cols = f.cols + 1;
  tuning_db::FeatureSet out{feature_extractor_name(), f.rows, cols, {}};
  out.values.reserve(static_cast<size_t>(f.rows) * cols);
  for (int r = 0; r < f.rows; ++r) {
    const float* row = f.values.data() + static_cast<size_t>(r) * f.cols;
    out.values.insert(out.values.end(), row, row + f.cols);
    out.values.push_back(static_cast<float>(f.count(r)));
  }
  return out;
}

std::optional<Features> from_feature_set(const tuning_db::FeatureSet& s) {
  if (s.rows < 0 || s.values.size() != static_cast<size_t>(s.rows) * static_cast<size_t>(s.cols)) return std::nullopt;
  const bool current = s.extractor == feature_extractor_name();
  const bool earlier = s.extractor == previous_feature_extractor_name() || s.extractor == expanded_feature_extractor_name();
  const bool legacy = s.extractor == legacy_feature_extractor_name();
  if (!current && !earlier && !legacy) return std::nullopt;
  // The columns of a row before its count: an earlier extractor's end before the intensity columns.
  const int have = current ? num_feature_columns() : num_earlier_feature_columns();
  const int stride = legacy ? have : have + 1;  // v1 stores no count
  if (s.cols != stride) return std::nullopt;
  Features f;
  f.cols = have;
  f.rows = static_cast<int>(s.rows);
  if (legacy) {
    f.values = s.values;
  } else {
    f.values.reserve(static_cast<size_t>(s.rows) * have);
    f.counts.reserve(static_cast<size_t>(s.rows));
    for (int64_t r = 0; r < s.rows; ++r) {
      const float* row = s.values.data() + static_cast<size_t>(r) * stride;
      if (!(row[have] >= 1)) return std::nullopt;  // a count must be a positive whole number
      f.values.insert(f.values.end(), row, row + have);
      f.counts.push_back(std::round(row[have]));
    }
  }
  if (!current) f = widen_earlier_features(f);
  // One row per store (v1): collapsing gives what the extractor now makes.
  return legacy ? collapse_rows(f) : f;
}

std::vector<Sample> load_training_samples(const tuning_db::Database& db) {
  auto group_of = [](const tuning_db::Record& r) { return r.workload_key + "|" + r.target.target + "|" + r.target.cpu_model; };
  std::vector<Sample> out;
  for (const std::string* extractor :
       {&legacy_feature_extractor_name(), &expanded_feature_extractor_name(), &previous_feature_extractor_name(), &feature_extractor_name()}) {
    tuning_db::RecordFilter filter;
    filter.feature_extractor = *extractor;
    filter.include_errors = true;
    for (const tuning_db::Record& r : db.training_records(filter)) {
      std::optional<Features> f = r.features ? from_feature_set(*r.features) : std::nullopt;
      if (!f || f->rows <= 0) continue;
      Sample s;
      s.features = std::move(*f);
      s.group = group_of(r);
      bool ok = r.error_kind == tuning_db::ErrorKind::none && r.median_time && *r.median_time > 0;
      s.throughput = ok ? 1.0 / *r.median_time : 0;  // the model normalises within each group
      out.push_back(std::move(s));
    }
  }
  return out;
}

int64_t migrate_features(tuning_db::Database& db, const Task& task) {
  std::vector<std::pair<int64_t, tuning_db::FeatureSet>> batch;
  for (const std::string* old : {&legacy_feature_extractor_name(), &expanded_feature_extractor_name(), &previous_feature_extractor_name()}) {
    tuning_db::RecordFilter filter;
    filter.workload_key = task.workload_key;
    filter.feature_extractor = *old;
    for (const tuning_db::Record& r : db.find(filter)) {
      try {
        te::Schedule s = te::Schedule::from_trace(task.outputs, te::Trace::from_json(r.trace));
        batch.emplace_back(r.id, to_feature_set(candidate_features(s, task.args)));
      } catch (const Error&) {
        // A record an older kiln wrote that no longer replays keeps its old features.
      }
    }
  }
  if (!batch.empty()) db.set_features(batch);
  return static_cast<int64_t>(batch.size());
}

}  // namespace kiln::tuner
