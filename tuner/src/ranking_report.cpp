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

struct Split {
  std::vector<Sample> train;                     // every group's training share (failures too: they teach "slow")
  std::map<std::string, std::vector<size_t>> held;  // group -> indices of held-back valid samples
  std::map<std::string, std::vector<size_t>> valid;  // group -> indices of all valid samples
};

Split split_samples(const std::vector<Sample>& samples, const RankingOptions& o) {
  Split s;
  std::map<std::string, std::vector<size_t>> by_group;
  for (size_t i = 0; i < samples.size(); ++i) by_group[samples[i].group].push_back(i);
  std::mt19937_64 rng(o.seed);
  for (auto& [group, idx] : by_group) {
    std::shuffle(idx.begin(), idx.end(), rng);
    size_t hold = static_cast<size_t>(std::llround(o.holdout * static_cast<double>(idx.size())));
    for (size_t k = 0; k < idx.size(); ++k) {
      const Sample& x = samples[idx[k]];
      if (x.throughput > 0) s.valid[group].push_back(idx[k]);
      if (k < hold) {
        if (x.throughput > 0) s.held[group].push_back(idx[k]);
      } else {
        s.train.push_back(x);
      }
    }
  }
  return s;
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
  KILN_USER_CHECK(o.holdout > 0 && o.holdout < 1) << "ranking_report: holdout must be in (0, 1), got " << o.holdout;
  std::set<std::string> wanted(workload_keys.begin(), workload_keys.end());
  Split split = split_samples(samples, o);

  RankingReport report;
  for (const auto& [group, valid] : split.valid) {
    if (static_cast<int>(valid.size()) < o.min_records) continue;
    if (!wanted.empty() && !wanted.count(workload_of(group))) continue;
    TaskRanking t;
    t.group = group;
    t.records = static_cast<int>(valid.size());
    t.held_out = static_cast<int>(split.held[group].size());
    report.tasks.push_back(t);
  }
  if (report.tasks.empty()) return report;

  std::unique_ptr<CostModel> within = make_xgboost_model(o.seed);
  within->update(split.train);
  for (TaskRanking& t : report.tasks) t.within = score_on(*within, samples, split.held[t.group], o.tie, &t.within_pairs);

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
  return report;
}

}  // namespace kiln::tuner
