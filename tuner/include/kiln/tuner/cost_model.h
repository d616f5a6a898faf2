/** \file
 * The learned cost model: XGBoost (C API) over per-store features; the score
 * of a candidate is the sum of its rows' predictions (as in Ansor). Trained
 * with a ranking objective on normalised throughput (1 for the best of a
 * task, smaller for slower ones, 0 for failures), online after each batch,
 * saved and loaded, and pre-trainable from every record of the tuning DB.
 */
#ifndef KILN_TUNER_COST_MODEL_H
#define KILN_TUNER_COST_MODEL_H

#include <memory>
#include <string>
#include <vector>

#include "kiln/tuner/features.h"

namespace kiln::tuner {

/** One training sample: a candidate's features and its measured throughput (the model normalises by the best of its group). */
struct Sample {
  Features features;
  double throughput = 0;  ///< higher is better, any positive scale shared within a group (e.g. 1/seconds); 0 for a failed candidate
  std::string group;      ///< the task (workload key): ranking is within a group
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  /** Adds samples and retrains. */
  virtual void update(const std::vector<Sample>& samples) = 0;
  /** Scores: higher means predicted faster. Works (returns zeros or a heuristic) before any training. */
  virtual std::vector<double> predict(const std::vector<Features>& candidates) const = 0;
  virtual bool trained() const = 0;
  virtual void save(const std::string& path) const = 0;
  virtual void load(const std::string& path) = 0;
};

std::unique_ptr<CostModel> make_xgboost_model(uint64_t seed = 0);

/**
 * The feature extractor the cost model saved at `path` was trained on (see
 * feature_extractor_name()); throws kiln::Error when the file cannot be read
 * or is not a kiln cost model.
 */
std::string cost_model_file_extractor(const std::string& path);

/** Spearman rank correlation of two score lists (quality report of a model). */
double rank_correlation(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace kiln::tuner

#endif  // KILN_TUNER_COST_MODEL_H
