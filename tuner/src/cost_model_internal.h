// Private to the cost model: the XGBoost handles, the training options and
// the file format, shared by cost_model.cpp and cost_model_io.cpp.
#ifndef KILN_TUNER_SRC_COST_MODEL_INTERNAL_H
#define KILN_TUNER_SRC_COST_MODEL_INTERNAL_H

#include <xgboost/c_api.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln/support/error.h"
#include "kiln/tuner/cost_model.h"

/** Runs an XGBoost C API call; a failure becomes kiln::Error with XGBoost's own message. */
#define KILN_XGB_CALL(call)                                                                  \
  do {                                                                                       \
    if ((call) != 0) KILN_USER_ERROR() << "XGBoost: " #call " failed: " << XGBGetLastError(); \
  } while (0)

namespace kiln::tuner::detail {

/**
 * How the booster learns that one candidate is faster than another. Mean
 * Spearman over 10 random 2/3 : 1/3 splits (each time the minimum of 5 runs;
 * two such measurements of the same schedules agree to 0.82 on a busy
 * 2-core machine), PackSumPairwise / RowPairwise / PackSumSquare:
 *   300 candidates of SearchSpace, 256^3 matmul: 0.57 / 0.57 / 0.56
 *     (140 of them: 0.50 / 0.48 / 0.48)
 *   290 random schedules (random_schedule.h), 128^3 matmul: 0.68 / 0.69 / 0.53
 *     (140 of them: 0.61 / 0.63 / 0.45)
 * PackSumPairwise trains exactly the score the search ranks by, and its cost
 * grows with candidates, not rows: it is the default.
 */
enum class Objective {
  /** XGBoost's rank:pairwise on the rows themselves, each labelled with its candidate's throughput; tasks are groups. */
  RowPairwise,
  /** Logistic loss on every pair of candidates of one task ordered by throughput, on their scores (custom gradient). */
  PackSumPairwise,
  /** Squared error of each candidate's score against its normalised throughput (Ansor's "pack-sum", custom gradient). */
  PackSumSquare,
};

struct ModelOptions {
  Objective objective = Objective::PackSumPairwise;
  int rounds = 100;
  /** Depth 6 did as well as 3, 4 or 8 on 140 and on 300 candidates. */
  int max_depth = 6;
  double eta = 0.1;
  double min_child_weight = 0.01;
  double lambda = 1.0;
  double subsample = 0.5, colsample = 0.5;
  /** PackSumSquare: a candidate weighs max(normalised throughput, this), so the fast ones matter most. */
  double min_weight = 0.1;
  /**
   * A candidate's score weighs each row by its share of the work (column
   * work_share) rather than plainly summing the rows: otherwise a candidate
   * whose loops were split into many nests (tails, unrolled outer loops)
   * scores higher only for having more rows. Without it: 0.29 instead of
   * 0.57 on the SearchSpace candidates above.
   */
  bool share_weighted = true;
  /**
   * One thread: XGBoost's OpenMP threads spin while waiting, and on a 2-core
   * machine that is busy with anything else (a build, another test) two
   * threads made an update 3 to 5 times slower than one (1000 candidates:
   * 6-9 s against 1-2 s at a load of 7); idle, one thread is fast enough.
   */
  int nthread = 1;
};

std::unique_ptr<CostModel> make_xgboost_model(const ModelOptions& options, uint64_t seed);

/** Owns a DMatrixHandle. */
class DMatrix {
 public:
  DMatrix(const float* data, size_t rows, size_t cols);
  ~DMatrix();
  DMatrix(const DMatrix&) = delete;
  DMatrix& operator=(const DMatrix&) = delete;
  DMatrixHandle get() const { return h_; }

 private:
  DMatrixHandle h_ = nullptr;
};

/** Owns a BoosterHandle (null until created). */
class Booster {
 public:
  Booster() = default;
  explicit Booster(DMatrixHandle cache);
  ~Booster();
  Booster(Booster&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  Booster& operator=(Booster&& o) noexcept;
  Booster(const Booster&) = delete;
  Booster& operator=(const Booster&) = delete;
  BoosterHandle get() const { return h_; }
  explicit operator bool() const { return h_ != nullptr; }
  void set(const std::string& key, const std::string& value);

 private:
  BoosterHandle h_ = nullptr;
};

/** Serialised model: the samples (so training resumes with them) and the booster's bytes (empty: untrained). */
struct ModelFile {
  int cols = 0;
  std::vector<Sample> samples;
  std::string booster;
};
void write_model_file(const std::string& path, const ModelFile& file);
ModelFile read_model_file(const std::string& path);

}  // namespace kiln::tuner::detail

#endif  // KILN_TUNER_SRC_COST_MODEL_INTERNAL_H
