// The cost model's ranking report: pairwise accuracy on held-back records,
// within tasks and across them (see ranking_report.h).
#include "kiln/tuner/ranking_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "kiln/support/error.h"

namespace kiln::tuner {

double pairwise_accuracy(const std::vector<double>& measured, const std::vector<double>& predicted, double tie,
                         int64_t* pairs) {
  KILN_USER_CHECK(measured.size() == predicted.size())
      << "pairwise_accuracy: " << measured.size() << " measurements but " << predicted.size() << " predictions";
  double right = 0;
  int64_t n = 0;
  for (size_t i = 0; i < measured.size(); ++i) {
    for (size_t j = i + 1; j < measured.size(); ++j) {
      double hi = std::max(measured[i], measured[j]), lo = std::min(measured[i], measured[j]);
      // Throughputs: apart by `tie` in time is apart by the same ratio here.
      if (!(hi > lo * (1 + tie))) continue;
      ++n;
      double dm = measured[i] - measured[j], dp = predicted[i] - predicted[j];
      if (dp == 0) right += 0.5;
      else if ((dm > 0) == (dp > 0)) right += 1;
    }
  }
  if (pairs) *pairs = n;
  return n ? right / static_cast<double>(n) : -1;
}

namespace {

std::string workload_of(const std::string& group) { return group.substr(0, group.find('|')); }

/** Each group's sample indices, shuffled once per report; fold f holds back the valid ones that held() picks. */
struct Split {
  std::map<std::string, std::vector<size_t>> shuffled;  // group -> all its sample indices
  std::map<std::string, std::vector<size_t>> valid;     // group -> indices of its valid samples
};

Split split_samples(const std::vector<Sample>& samples, const RankingOptions& o) {
  Split s;
  for (size_t i = 0; i < samples.size(); ++i) s.shuffled[samples[i].group].push_back(i);
  std::mt19937_64 rng(o.seed);
  for (auto& [group, idx] : s.shuffled) {
    std::shuffle(idx.begin(), idx.end(), rng);
    for (size_t i : idx)
      if (samples[i].throughput > 0) s.valid[group].push_back(i);
  }
  return s;
}

/** Whether the k-th of a group's n shuffled samples is held back in `fold`. */
bool held(size_t k, size_t n, int fold, const RankingOptions& o) {
  if (o.folds > 1) return static_cast<int>(k % static_cast<size_t>(o.folds)) == fold;
  return k < static_cast<size_t>(std::llround(o.holdout * static_cast<double>(n)));
}

double score_on(const CostModel& model, const std::vector<Sample>& samples, const std::vector<size_t>& idx, double tie,
                int64_t* pairs) {
  std::vector<Features> feats;
  std::vector<double> measured;
  for (size_t i : idx) {
    feats.push_back(samples[i].features);
    measured.push_back(samples[i].throughput);
  }
  return pairwise_accuracy(measured, model.predict(feats), tie, pairs);
}

/** Accuracy over all pairs of the tasks: each task's accuracy weighed by its pairs. */
double pooled_of(const std::vector<TaskRanking>& tasks, double TaskRanking::*field, int64_t TaskRanking::*pairs) {
  double right = 0;
  int64_t n = 0;
  for (const TaskRanking& t : tasks) {
    if (t.*field < 0) continue;
    right += t.*field * static_cast<double>(t.*pairs);
    n += t.*pairs;
  }
  return n ? right / static_cast<double>(n) : -1;
}

double mean_of(const std::vector<TaskRanking>& tasks, double TaskRanking::*field) {
  double sum = 0;
  int n = 0;
  for (const TaskRanking& t : tasks) {
    if (t.*field < 0) continue;
    sum += t.*field;
    ++n;
  }
  return n ? sum / n : -1;
}

}  // namespace

RankingReport ranking_report(const std::vector<Sample>& samples, const RankingOptions& o,
                             const std::vector<std::string>& workload_keys) {
  KILN_USER_CHECK(o.folds >= 1) << "ranking_report: folds must be at least 1 (1: one split by holdout), got " << o.folds;
  KILN_USER_CHECK(o.folds > 1 || (o.holdout > 0 && o.holdout < 1)) << "ranking_report: holdout must be in (0, 1), got " << o.holdout;
  std::set<std::string> wanted(workload_keys.begin(), workload_keys.end());
  Split split = split_samples(samples, o);

  RankingReport report;
  for (const auto& [group, valid] : split.valid) {
    if (static_cast<int>(valid.size()) < o.min_records) continue;
    if (!wanted.empty() && !wanted.count(workload_of(group))) continue;
    TaskRanking t;
    t.group = group;
    t.records = static_cast<int>(valid.size());
    report.tasks.push_back(t);
  }
  if (report.tasks.empty()) return report;

  // Per fold: train on what it keeps of every group (failures too: they
  // teach "slow"), score each task on its held-back valid records.
  std::vector<double> right(report.tasks.size(), 0);
  for (int fold = 0; fold < o.folds; ++fold) {
    std::vector<Sample> train;
    std::map<std::string, std::vector<size_t>> held_back;
    for (const auto& [group, idx] : split.shuffled)
      for (size_t k = 0; k < idx.size(); ++k) {
        if (!held(k, idx.size(), fold, o)) train.push_back(samples[idx[k]]);
        else if (samples[idx[k]].throughput > 0) held_back[group].push_back(idx[k]);
      }
    std::unique_ptr<CostModel> within = make_xgboost_model(o.seed + static_cast<uint64_t>(fold));
    within->update(train);
    for (size_t i = 0; i < report.tasks.size(); ++i) {
      TaskRanking& t = report.tasks[i];
      const std::vector<size_t>& h = held_back[t.group];
      t.held_out += static_cast<int>(h.size());
      int64_t pairs = 0;
      double acc = score_on(*within, samples, h, o.tie, &pairs);
      if (pairs) right[i] += acc * static_cast<double>(pairs), t.within_pairs += pairs;
    }
  }
  for (size_t i = 0; i < report.tasks.size(); ++i) {
    TaskRanking& t = report.tasks[i];
    if (t.within_pairs) t.within = right[i] / static_cast<double>(t.within_pairs);
  }

  if (o.cross) {
    for (TaskRanking& t : report.tasks) {
      std::vector<Sample> others;
      for (const Sample& x : samples)
        if (x.group != t.group) others.push_back(x);
      if (others.empty()) continue;
      std::unique_ptr<CostModel> model = make_xgboost_model(o.seed);
      model->update(others);
      t.cross = score_on(*model, samples, split.valid[t.group], o.tie, &t.cross_pairs);
    }
  }
  report.within_mean = mean_of(report.tasks, &TaskRanking::within);
  report.cross_mean = mean_of(report.tasks, &TaskRanking::cross);
  report.within_pooled = pooled_of(report.tasks, &TaskRanking::within, &TaskRanking::within_pairs);
  report.cross_pooled = pooled_of(report.tasks, &TaskRanking::cross, &TaskRanking::cross_pairs);
  return report;
}

}  // namespace kiln::tuner
