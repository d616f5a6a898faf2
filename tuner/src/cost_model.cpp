// The XGBoost cost model. A candidate is a set of rows (one per store) and
// its score is the sum of the booster's outputs on them, as in Ansor, each
// weighted by the row's share of the work (see ModelOptions::share_weighted)
// and by its count (a row of Features stands for that many equal stores).
// By default the booster learns a pairwise ranking of the candidates of each
// task (throughput normalised by the task's best) on those scores, through
// custom gradients (XGBoosterBoostOneIter); the alternatives are Ansor's
// squared error on the scores and XGBoost's own rank:pairwise on the rows.
// Every update retrains from all the samples seen.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string_view>
#include <unordered_map>

#include "cost_model_internal.h"
#include "features_internal.h"
#include "kiln/tuner/features.h"

namespace kiln::tuner {
namespace detail {

DMatrix::DMatrix(const float* data, size_t rows, size_t cols) {
  // NaN marks missing values, so a feature of 0 stays a real 0.
  KILN_XGB_CALL(XGDMatrixCreateFromMat(data, rows, cols, std::nanf(""), &h_));
}
DMatrix::~DMatrix() {
  if (h_) XGDMatrixFree(h_);
}

Booster::Booster(DMatrixHandle cache) {
  DMatrixHandle dm[] = {cache};
  KILN_XGB_CALL(XGBoosterCreate(dm, cache ? 1 : 0, &h_));
}
Booster::~Booster() {
  if (h_) XGBoosterFree(h_);
}
Booster& Booster::operator=(Booster&& o) noexcept {
  if (this != &o) {
    if (h_) XGBoosterFree(h_);
    h_ = o.h_;
    o.h_ = nullptr;
  }
  return *this;
}
void Booster::set(const std::string& key, const std::string& value) { KILN_XGB_CALL(XGBoosterSetParam(h_, key.c_str(), value.c_str())); }

namespace {

/** The samples flattened for XGBoost: the rows, which candidate owns each, and a label per candidate. */
struct TrainSet {
  std::vector<float> values;
  std::vector<size_t> owner;      // row -> candidate
  std::vector<double> scale;      // row -> its factor in the candidate's score
  std::vector<double> scale_sum;  // candidate -> the sum of its rows' factors
  std::vector<size_t> first;      // candidate -> its first row (and first[n] = total rows)
  std::vector<double> label;      // candidate -> throughput / best of its task, in [0, 1]
  std::vector<int> group;         // candidate -> task index
  std::vector<std::pair<uint32_t, uint32_t>> pairs;  // PackSumPairwise: (faster, slower) candidates of one task
  size_t rows() const { return owner.size(); }
  size_t candidates() const { return label.size(); }
};

/**
 * The distinct rows of a candidate, each with its factor in the candidate's
 * score: its work share (or 1) times how many stores it stands for (its
 * count, summed over equal rows). The extractor already collapses unrolled
 * copies (Features::counts); records of the old form (one row per store)
 * collapse here, and both forms give the same rows and factors, bit for bit.
 */
std::vector<std::pair<const float*, double>> distinct_rows(const Features& f, const ModelOptions& o) {
  std::vector<std::pair<const float*, double>> out;
  std::unordered_map<std::string_view, size_t> seen;
  const size_t bytes = static_cast<size_t>(f.cols) * sizeof(float);
  for (int r = 0; r < f.rows; ++r) {
    const float* row = f.values.data() + static_cast<size_t>(r) * f.cols;
    auto [it, fresh] = seen.emplace(std::string_view(reinterpret_cast<const char*>(row), bytes), out.size());
    if (fresh) out.emplace_back(row, f.count(r));
    else out[it->second].second += f.count(r);
  }
  // Counts are whole numbers (exact in a double): scaling once keeps both forms equal.
  for (auto& [row, n] : out) n *= o.share_weighted ? static_cast<double>(row[work_share]) : 1.0;
  return out;
}

/**
 * The ordered pairs of candidates of one task for PackSumPairwise: all of
 * them in a small task, else `kPartners` random partners per candidate, so
 * that a gradient stays linear in the number of candidates.
 */
void make_pairs(TrainSet* t, size_t begin, size_t end, std::mt19937_64& rng) {
  constexpr size_t kPartners = 64;
  auto add = [&](size_t i, size_t j) {
    if (t->label[i] == t->label[j]) return;
    if (t->label[i] < t->label[j]) std::swap(i, j);
    t->pairs.emplace_back(static_cast<uint32_t>(i), static_cast<uint32_t>(j));
  };
  const size_t n = end - begin;
  if (n <= 2 * kPartners) {
    for (size_t i = begin; i < end; ++i)
      for (size_t j = i + 1; j < end; ++j) add(i, j);
    return;
  }
  for (size_t i = begin; i < end; ++i)
    for (size_t k = 0; k < kPartners; ++k) {
      size_t j = begin + rng() % (n - 1);
      add(i, j >= i ? j + 1 : j);
    }
}

/** Orders candidates by task (rank:pairwise wants each group's rows together) and normalises throughput. */
TrainSet make_train_set(const std::vector<Sample>& samples, const ModelOptions& o, uint64_t seed) {
  std::map<std::string, std::vector<size_t>> by_group;
  for (size_t i = 0; i < samples.size(); ++i)
    if (samples[i].features.rows > 0) by_group[samples[i].group].push_back(i);
  TrainSet t;
  std::mt19937_64 rng(seed);
  int g = 0;
  for (const auto& [name, members] : by_group) {
    double best = 0;
    for (size_t i : members)
      if (std::isfinite(samples[i].throughput)) best = std::max(best, samples[i].throughput);
    const size_t group_begin = t.candidates();
    for (size_t i : members) {
      const Sample& s = samples[i];
      double y = best > 0 && std::isfinite(s.throughput) && s.throughput > 0 ? s.throughput / best : 0.0;
      t.first.push_back(t.rows());
      t.label.push_back(y);
      t.group.push_back(g);
      double total = 0;
      for (const auto& [row, a] : distinct_rows(s.features, o)) {
        t.values.insert(t.values.end(), row, row + s.features.cols);
        t.owner.push_back(t.candidates() - 1);
        t.scale.push_back(a);
        total += a;
      }
      t.scale_sum.push_back(total);
    }
    if (o.objective == Objective::PackSumPairwise) make_pairs(&t, group_begin, t.candidates(), rng);
    ++g;
  }
  t.first.push_back(t.rows());
  return t;
}

/** Per-candidate scores: the scaled sums of per-row margins. */
std::vector<double> pack_sum(const float* row_pred, const TrainSet& t) {
  std::vector<double> s(t.candidates(), 0.0);
  for (size_t r = 0; r < t.rows(); ++r) s[t.owner[r]] += t.scale[r] * row_pred[r];
  return s;
}

/**
 * Gradient and hessian of the loss with respect to each candidate's score;
 * boost_packed hands them on to the candidate's rows (Ansor's pack-sum).
 */
void candidate_gradients(const ModelOptions& o, const TrainSet& t, const std::vector<double>& sum, std::vector<double>* g, std::vector<double>* h) {
  const size_t n = t.candidates();
  g->assign(n, 0.0);
  h->assign(n, 0.0);
  if (o.objective == Objective::PackSumSquare) {
    for (size_t c = 0; c < n; ++c) {
      double w = std::max(t.label[c], o.min_weight);
      (*g)[c] = w * (sum[c] - t.label[c]);
      (*h)[c] = w;
    }
    return;
  }
  // Pairwise logistic loss log(1 + exp(-(s_hi - s_lo))) within a task.
  for (const auto& [hi, lo] : t.pairs) {
    double p = 1.0 / (1.0 + std::exp(std::clamp(sum[hi] - sum[lo], -30.0, 30.0)));  // chance of the wrong order
    (*g)[hi] -= p;
    (*g)[lo] += p;
    (*h)[hi] += p * (1 - p);
    (*h)[lo] += p * (1 - p);
  }
  for (size_t c = 0; c < n; ++c) (*h)[c] = std::max((*h)[c], 1e-6);
}

void set_common_params(Booster& b, const ModelOptions& o, uint64_t seed) {
  b.set("booster", "gbtree");
  b.set("tree_method", "hist");
  b.set("max_depth", std::to_string(o.max_depth));
  b.set("eta", std::to_string(o.eta));
  b.set("min_child_weight", std::to_string(o.min_child_weight));
  b.set("lambda", std::to_string(o.lambda));
  b.set("subsample", std::to_string(o.subsample));
  b.set("colsample_bytree", std::to_string(o.colsample));
  b.set("nthread", std::to_string(o.nthread));
  b.set("seed", std::to_string(seed % 2147483647));
  b.set("verbosity", "0");
  // Scores are sums over rows: a constant per row would reward more rows.
  b.set("base_score", "0");
}

class XGBoostModel : public CostModel {
 public:
  XGBoostModel(const ModelOptions& o, uint64_t seed) : opt_(o), seed_(seed) {}

  void update(const std::vector<Sample>& samples) override {
    for (const Sample& s : samples) check_features(s.features, "cost model: a sample of task '" + s.group + "'");
    std::lock_guard<std::mutex> lock(mu_);
    samples_.insert(samples_.end(), samples.begin(), samples.end());
    retrain();
  }

  std::vector<double> predict(const std::vector<Features>& candidates) const override;

  bool trained() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<bool>(booster_);
  }

  void save(const std::string& path) const override {
    std::lock_guard<std::mutex> lock(mu_);
    ModelFile file;
    file.cols = num_feature_columns();
    file.samples = samples_;
    if (booster_) {
      bst_ulong len = 0;
      const char* bytes = nullptr;
      KILN_XGB_CALL(XGBoosterSaveModelToBuffer(booster_.get(), R"({"format": "ubj"})", &len, &bytes));
      file.booster.assign(bytes, len);
    }
    write_model_file(path, file);
  }

  void load(const std::string& path) override {
    ModelFile file = read_model_file(path);
    Booster b;
    if (!file.booster.empty()) {
      b = Booster(nullptr);
      KILN_XGB_CALL(XGBoosterLoadModelFromBuffer(b.get(), file.booster.data(), file.booster.size()));
      b.set("nthread", std::to_string(opt_.nthread));
    }
    std::lock_guard<std::mutex> lock(mu_);
    samples_ = std::move(file.samples);
    booster_ = std::move(b);
  }

 private:
  void retrain();
  void boost_packed(Booster& b, const DMatrix& dm, const TrainSet& t);
  void boost_rows(Booster& b, const DMatrix& dm, const TrainSet& t);

  ModelOptions opt_;
  uint64_t seed_;
  mutable std::mutex mu_;
  std::vector<Sample> samples_;
  Booster booster_;
};

void XGBoostModel::retrain() {
  TrainSet t = make_train_set(samples_, opt_, seed_);
  // Nothing to learn from yet: no rows, or every candidate of a task as good as the others.
  bool spread = std::any_of(t.label.begin(), t.label.end(), [&](double y) { return y != t.label.front(); });
  if (t.rows() == 0 || !spread || (opt_.objective == Objective::PackSumPairwise && t.pairs.empty())) return;
  DMatrix dm(t.values.data(), t.rows(), static_cast<size_t>(num_feature_columns()));
  Booster b(dm.get());
  set_common_params(b, opt_, seed_);
  if (opt_.objective == Objective::RowPairwise) boost_rows(b, dm, t);
  else boost_packed(b, dm, t);
  booster_ = std::move(b);
}

void XGBoostModel::boost_packed(Booster& b, const DMatrix& dm, const TrainSet& t) {
  std::vector<float> grad(t.rows()), hess(t.rows());
  std::vector<double> g, h;
  for (int round = 0; round < opt_.rounds; ++round) {
    std::vector<double> sum(t.candidates(), 0.0);
    if (round > 0) {
      bst_ulong len = 0;
      const float* pred = nullptr;
      // training=1: the margins of the trees so far, from XGBoost's prediction cache.
      KILN_XGB_CALL(XGBoosterPredict(b.get(), dm.get(), 1, 0, 1, &len, &pred));
      KILN_CHECK(len == t.rows()) << "XGBoost predicted " << len << " rows for " << t.rows();
      sum = pack_sum(pred, t);
    }
    candidate_gradients(opt_, t, sum, &g, &h);
    // Row r moves its candidate's score by scale[r] per unit; moving every
    // row of the candidate together moves it by scale_sum, which is the
    // curvature a row's Newton step has to respect.
    for (size_t r = 0; r < t.rows(); ++r) {
      size_t c = t.owner[r];
      grad[r] = static_cast<float>(t.scale[r] * g[c]);
      hess[r] = static_cast<float>(t.scale[r] * t.scale_sum[c] * h[c]);
    }
    KILN_XGB_CALL(XGBoosterBoostOneIter(b.get(), dm.get(), grad.data(), hess.data(), t.rows()));
  }
}

void XGBoostModel::boost_rows(Booster& b, const DMatrix& dm, const TrainSet& t) {
  std::vector<float> labels(t.rows());
  for (size_t r = 0; r < t.rows(); ++r) labels[r] = static_cast<float>(t.label[t.owner[r]]);
  KILN_XGB_CALL(XGDMatrixSetFloatInfo(dm.get(), "label", labels.data(), labels.size()));
  std::vector<unsigned> sizes;
  for (size_t c = 0; c < t.candidates(); ++c) {
    if (c == 0 || t.group[c] != t.group[c - 1]) sizes.push_back(0);
    sizes.back() += static_cast<unsigned>(t.first[c + 1] - t.first[c]);
  }
  KILN_XGB_CALL(XGDMatrixSetUIntInfo(dm.get(), "group", sizes.data(), sizes.size()));
  b.set("objective", "rank:pairwise");
  for (int round = 0; round < opt_.rounds; ++round) KILN_XGB_CALL(XGBoosterUpdateOneIter(b.get(), round, dm.get()));
}

std::vector<double> XGBoostModel::predict(const std::vector<Features>& candidates) const {
  std::vector<double> scores(candidates.size(), 0.0);
  std::lock_guard<std::mutex> lock(mu_);
  if (!booster_) return scores;  // untrained: the search samples at random
  const int cols = num_feature_columns();
  std::vector<float> values;
  std::vector<size_t> owner;
  std::vector<double> scale;
  for (size_t c = 0; c < candidates.size(); ++c) {
    const Features& f = candidates[c];
    if (f.rows <= 0) continue;
    check_features(f, "cost model: candidate " + std::to_string(c));
    for (const auto& [row, a] : distinct_rows(f, opt_)) {
      values.insert(values.end(), row, row + cols);
      owner.push_back(c);
      scale.push_back(a);
    }
  }
  if (owner.empty()) return scores;
  DMatrix dm(values.data(), owner.size(), static_cast<size_t>(cols));
  const char* config = R"({"type": 1, "training": false, "iteration_begin": 0, "iteration_end": 0, "strict_shape": false})";
  const bst_ulong* shape = nullptr;
  bst_ulong dim = 0;
  const float* pred = nullptr;
  KILN_XGB_CALL(XGBoosterPredictFromDMatrix(booster_.get(), dm.get(), config, &shape, &dim, &pred));
  for (size_t r = 0; r < owner.size(); ++r) scores[owner[r]] += scale[r] * pred[r];
  return scores;
}

}  // namespace

std::unique_ptr<CostModel> make_xgboost_model(const ModelOptions& options, uint64_t seed) {
  return std::make_unique<XGBoostModel>(options, seed);
}

}  // namespace detail

std::unique_ptr<CostModel> make_xgboost_model(uint64_t seed) { return detail::make_xgboost_model(detail::ModelOptions{}, seed); }

namespace {
/** Ranks from 1, ties sharing their mean rank. */
std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = (static_cast<double>(i + j) / 2.0) + 1.0;
    i = j + 1;
  }
  return r;
}
}  // namespace

double rank_correlation(const std::vector<double>& a, const std::vector<double>& b) {
  KILN_USER_CHECK(a.size() == b.size()) << "rank_correlation: the lists differ in length (" << a.size() << " and " << b.size() << ")";
  if (a.size() < 2) return 0;
  // Spearman's rho is Pearson's correlation of the ranks (this form handles ties).
  std::vector<double> ra = ranks(a), rb = ranks(b);
  double n = static_cast<double>(a.size()), ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += ra[i], mb += rb[i];
  ma /= n, mb /= n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  if (saa == 0 || sbb == 0) return 0;  // a constant list ranks nothing
  return sab / std::sqrt(saa * sbb);
}

}  // namespace kiln::tuner
