/** \file
 * How well the cost model ranks: the share of candidate pairs of one task
 * that it orders as they measured (pairwise accuracy), on records it did not
 * train on.
 *
 *   within: one model trained on a share of every task's records, scored
 *           on the rest of each task (the tuner's case mid-session); with
 *           `folds` > 1, k-fold: every record is held back once, by one of
 *           k models, and a task's accuracy pools the pairs of its folds
 *           (k times the pairs of one split: a task of 16 records has 6
 *           pairs held back at 25%, 24 over 4 folds);
 *   cross:  per task, a model trained on the other tasks only, scored on all
 *           of this task's records (the case of a new model's first round).
 *
 * Only valid measurements make pairs (a failure has no time to order), and a
 * pair whose times differ by less than `tie` (relative) is not counted: such
 * pairs are measurement noise, and no model can order them.
 */
#ifndef KILN_TUNER_RANKING_REPORT_H
#define KILN_TUNER_RANKING_REPORT_H

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/tuner/cost_model.h"

namespace kiln::tuner {

/** Share of the pairs (i, j) with measured[i] and measured[j] (higher is better) apart by more than `tie` relatively that predicted orders the same way; a predicted tie counts half. -1 when there is no such pair. */
double pairwise_accuracy(const std::vector<double>& measured, const std::vector<double>& predicted, double tie = 0,
                         int64_t* pairs = nullptr);

struct RankingOptions {
  double holdout = 0.25;  ///< share of each task's records held back for `within` (folds == 1)
  double tie = 0.01;      ///< relative time difference below which a pair is not counted
  uint64_t seed = 0;
  bool cross = true;      ///< also the leave-one-task-out models (one training per task)
  int min_records = 8;    ///< tasks with fewer valid records are left out
  int folds = 1;          ///< > 1: k-fold `within` (k trainings), holdout unused
};

struct TaskRanking {
  std::string group;    ///< the samples' group (workload key | target | CPU)
  int records = 0;      ///< valid records of the task
  int held_out = 0;     ///< of which held back for `within` (all of them with folds > 1)
  int64_t within_pairs = 0, cross_pairs = 0;
  double within = -1;   ///< pairwise accuracy on the held-back records (-1: no pair)
  double cross = -1;    ///< pairwise accuracy of the model trained without this task (-1: not run)
};

struct RankingReport {
  std::vector<TaskRanking> tasks;
  double within_mean = -1, cross_mean = -1;      ///< over the tasks, each task once
  double within_pooled = -1, cross_pooled = -1;  ///< over all pairs of all tasks (a task weighs by its pairs)
};

/** The report over the samples' groups: all of them, or those of the given workload keys (the cross models still train on every other group). */
RankingReport ranking_report(const std::vector<Sample>& samples, const RankingOptions& options,
                             const std::vector<std::string>& workload_keys = {});

}  // namespace kiln::tuner

#endif  // KILN_TUNER_RANKING_REPORT_H
