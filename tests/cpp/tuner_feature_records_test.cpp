// Collapsed feature rows (tuner/include/kiln/tuner/features.h) and their DB
// form (feature_records.h): the extractor emits each distinct row once with
// its count, the cost model scores a collapsed candidate exactly as its
// expanded form, and records of the old, uncollapsed extractor still load
// and train.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>

#include "kiln/ops/nn.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"
#include "kiln/te/workload_key.h"
#include "kiln/tuner/cost_model.h"
#include "kiln/tuner/feature_records.h"
#include "kiln/tuner/features.h"
#include "kiln/tuner/schedule_rules.h"
#include "tuning_db_tools/test_util.h"

namespace kiln {
namespace {

using tuner::Features;
using tuner::Sample;

/** The uncollapsed form: each row repeated count times, in place (first-seen order is kept). */
Features expand(const Features& f) {
  Features out;
  out.cols = f.cols;
  for (int r = 0; r < f.rows; ++r)
    for (int k = 0; k < static_cast<int>(f.count(r)); ++k) {
      const float* row = f.values.data() + static_cast<size_t>(r) * f.cols;
      out.values.insert(out.values.end(), row, row + f.cols);
      ++out.rows;
    }
  return out;
}

/** An earlier extractor's form of f's rows: its first num_earlier_feature_columns() columns. */
Features earlier(const Features& f) {
  const int keep = tuner::num_earlier_feature_columns();
  Features out = f;
  out.cols = keep;
  out.values.clear();
  for (int r = 0; r < f.rows; ++r) {
    const float* row = f.values.data() + static_cast<size_t>(r) * f.cols;
    out.values.insert(out.values.end(), row, row + keep);
  }
  return out;
}

/** f's values with the columns the earlier extractors lack made NaN: what their records load as. */
std::vector<float> with_missing_intensity(const Features& f) {
  std::vector<float> v = f.values;
  for (int r = 0; r < f.rows; ++r)
    for (int c = tuner::num_earlier_feature_columns(); c < f.cols; ++c) v[static_cast<size_t>(r) * f.cols + c] = std::nanf("");
  return v;
}

/** Equal bit for bit (NaN equals NaN). */
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int col(const std::string& name) {
  const auto& names = tuner::feature_names();
  return static_cast<int>(std::find(names.begin(), names.end(), name) - names.begin());
}

/** Candidates of a 3x3 NCHWc conv (64 -> 64 channels, 56x56): the seeds (unrolled register tiles) and random ones. */
struct ConvCandidates {
  tuner::Task task;
  std::vector<te::Trace> traces;
  std::vector<PrimFunc> funcs;  // fully lowered: what the earlier extractors read
  ConvCandidates(int random, uint64_t seed) {
    const DataType f32 = DataType::Float(32);
    auto [cb, kb] = ops::nchwc_blocks(64, 64);
    te::Tensor X = te::placeholder({1, 64 / cb, 56, 56, cb}, f32, "X");
    te::Tensor W = te::placeholder({64 / kb, 64 / cb, 3, 3, cb, kb}, f32, "W");
    std::vector<te::Tensor> args = {X, W, ops::conv2d_nchwc(X, W, 1, 1, "conv")};
    task = tuner::make_task(args, Target::parse("llvm"), "conv3x3");
    tuner::SearchSpace space(task);
    std::vector<tuner::Candidate> cands = space.seeds();
    std::mt19937_64 rng(seed);
    for (int i = 0; i < random; ++i) cands.push_back(space.sample(rng));
    for (const tuner::Candidate& c : cands) {
      traces.push_back(c.trace);
      funcs.push_back(te::lower(te::Schedule::from_trace(task.outputs, c.trace), task.args, "main"));
    }
  }
};

const ConvCandidates& conv() {
  static const ConvCandidates c(12, 7);
  return c;
}

TEST(TunerFeatureRecords, ConvRowsCollapseWithCountsAndTiming) {
  double ms = 0, stores = 0, rows = 0;
  for (const PrimFunc& f : conv().funcs) {
    auto t0 = std::chrono::steady_clock::now();
    Features x = tuner::extract_features(f);
    ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(x.counts.size(), static_cast<size_t>(x.rows));
    // Every row distinct, and the counts carry the work: shares sum to 1 over the stores.
    Features again = tuner::collapse_rows(x);
    EXPECT_EQ(again.rows, x.rows);
    EXPECT_EQ(again.values, x.values);
    EXPECT_EQ(again.counts, x.counts);
    double share = 0;
    for (int r = 0; r < x.rows; ++r) {
      share += x.count(r) * x.values[static_cast<size_t>(r) * x.cols + col("work_share")];
      EXPECT_FLOAT_EQ(x.values[static_cast<size_t>(r) * x.cols + col("func_stores")], std::log2(1.0 + x.total_rows()));
    }
    EXPECT_NEAR(share, 1.0, 1e-4);
    // The expanded form collapses back to exactly this.
    Features back = tuner::collapse_rows(expand(x));
    EXPECT_EQ(back.values, x.values);
    EXPECT_EQ(back.counts, x.counts);
    stores += x.total_rows();
    rows += x.rows;
  }
  const double n = static_cast<double>(conv().funcs.size());
  EXPECT_LT(rows, stores);  // the unrolled seeds have many equal rows
  std::printf("[ conv3x3 nchwc ] %g candidates: extract_features %.2f ms each; %.1f stores -> %.1f rows each\n", n, ms / n, stores / n, rows / n);
}

// The tuner's features come from the nest with the loop marks kept: the same
// longest vector and the same elements stored as the expanded nest, far fewer
// rows, and cheaper to make.
TEST(TunerFeatureRecords, CandidateFeaturesReadTheLoopMarks) {
  double ms_nest = 0, ms_full = 0;
  int vectorized = 0, fewer = 0;
  for (size_t i = 0; i < conv().traces.size(); ++i) {
    te::Schedule s = te::Schedule::from_trace(conv().task.outputs, conv().traces[i]);
    auto t0 = std::chrono::steady_clock::now();
    Features nest = tuner::candidate_features(s, conv().task.args);
    auto t1 = std::chrono::steady_clock::now();
    Features full = tuner::extract_features(te::lower(s, conv().task.args, "main"));
    auto t2 = std::chrono::steady_clock::now();
    ms_nest += std::chrono::duration<double, std::milli>(t1 - t0).count();
    ms_full += std::chrono::duration<double, std::milli>(t2 - t1).count();
    // An unrolled loop is one store in the nest (its length a column), many in the expanded form.
    EXPECT_LE(nest.total_rows(), full.total_rows()) << i;
    fewer += nest.total_rows() < full.total_rows();
    // The elements stored are the same however the loops are written out.
    auto elements = [](const Features& f) {
      double n = 0;
      for (int r = 0; r < f.rows; ++r) n += f.count(r) * (std::exp2(f.values[static_cast<size_t>(r) * f.cols + col("store_elems")]) - 1);
      return n;
    };
    EXPECT_NEAR(elements(nest), elements(full), 1e-3 * elements(full)) << i;
    // The longest vector of the candidate is the same, read from marks or from lanes.
    auto longest = [](const Features& f) {
      float v = 0;
      for (int r = 0; r < f.rows; ++r) v = std::max(v, f.values[static_cast<size_t>(r) * f.cols + col("vec_len")]);
      return v;
    };
    EXPECT_FLOAT_EQ(longest(nest), longest(full)) << i;
    vectorized += longest(nest) > 0;
  }
  EXPECT_GT(vectorized, 0);
  EXPECT_GT(fewer, 0);  // the seeds unroll their register tiles
  const double n = static_cast<double>(conv().traces.size());
  std::printf("[ conv3x3 nchwc ] %g candidates: candidate_features %.2f ms each; full lowering + extraction %.2f ms each\n", n,
              ms_nest / n, ms_full / n);
}

/** Fake but deterministic throughputs: the model must have something to rank. */
std::vector<Sample> conv_samples(bool expanded) {
  std::vector<Sample> out;
  for (size_t i = 0; i < conv().funcs.size(); ++i) {
    Features f = tuner::extract_features(conv().funcs[i]);
    double t = 1.0 + static_cast<double>((i * 7) % 11) + f.total_rows() / 100.0;
    out.push_back({expanded ? expand(f) : f, t, "conv"});
  }
  return out;
}

TEST(TunerFeatureRecords, CollapsedScoresEqualExpandedScores) {
  std::vector<Sample> collapsed = conv_samples(false), expanded = conv_samples(true);
  auto a = tuner::make_xgboost_model(3), b = tuner::make_xgboost_model(3);
  a->update(collapsed);
  b->update(expanded);
  ASSERT_TRUE(a->trained() && b->trained());
  std::vector<Features> fc, fe;
  for (size_t i = 0; i < collapsed.size(); ++i) fc.push_back(collapsed[i].features), fe.push_back(expanded[i].features);
  std::vector<double> sa = a->predict(fc), se = a->predict(fe), sb = b->predict(fc);
  bool spread = false;
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i], se[i]) << "candidate " << i;  // one model: collapsed == rows x counts
    EXPECT_EQ(sa[i], sb[i]) << "candidate " << i;  // trained on either form: the same model
    spread = spread || sa[i] != sa[0];
  }
  EXPECT_TRUE(spread);
  // Save and load keep the counts (the file stores collapsed rows).
  std::string path = ::testing::TempDir() + "kiln_feature_records_model.bin";
  a->save(path);
  auto c = tuner::make_xgboost_model(3);
  c->load(path);
  EXPECT_EQ(c->predict(fc), sa);
  c->update({});
  EXPECT_EQ(c->predict(fc), sa);  // retrained on the loaded (collapsed) samples: the same model
  std::remove(path.c_str());
}

TEST(TunerFeatureRecords, BadCountsAreErrors) {
  Features f = tuner::extract_features(conv().funcs[0]);
  auto m = tuner::make_xgboost_model(1);
  Features wrong = f;
  wrong.counts.pop_back();
  EXPECT_THROW(m->update({{wrong, 1.0, "g"}}), Error);
  wrong = f;
  wrong.counts[0] = 0;
  EXPECT_THROW(m->update({{wrong, 1.0, "g"}}), Error);
}

TEST(TunerFeatureRecords, FeatureSetForm) {
  Features f = tuner::extract_features(conv().funcs[0]);
  tuning_db::FeatureSet s = tuner::to_feature_set(f);
  EXPECT_EQ(s.extractor, tuner::feature_extractor_name());
  EXPECT_EQ(s.cols, f.cols + 1);
  auto back = tuner::from_feature_set(s);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->values, f.values);
  EXPECT_EQ(back->counts, f.counts);
  // The first extractor's form: one row per store, no count column, no
  // intensity columns (they load as NaN: missing).
  Features e = earlier(expand(f));
  auto old = tuner::from_feature_set({tuner::legacy_feature_extractor_name(), e.rows, e.cols, e.values});
  ASSERT_TRUE(old);
  EXPECT_EQ(old->cols, f.cols);
  EXPECT_TRUE(same_bits(old->values, with_missing_intensity(f)));
  EXPECT_EQ(old->counts, f.counts);
  // v3's: collapsed with counts, no intensity columns.
  tuning_db::FeatureSet v3 = tuner::to_feature_set(earlier(f));
  v3.extractor = tuner::previous_feature_extractor_name();
  auto prev = tuner::from_feature_set(v3);
  ASSERT_TRUE(prev);
  EXPECT_TRUE(same_bits(prev->values, with_missing_intensity(f)));
  EXPECT_EQ(prev->counts, f.counts);
  // Each extractor's rows have their own width.
  EXPECT_FALSE(tuner::from_feature_set({tuner::previous_feature_extractor_name(), s.rows, s.cols, s.values}));
  // Another extractor, a wrong shape or a count below 1: not ours.
  EXPECT_FALSE(tuner::from_feature_set({"other-v1", s.rows, s.cols, s.values}));
  EXPECT_FALSE(tuner::from_feature_set({tuner::feature_extractor_name(), e.rows, e.cols, e.values}));
  s.values[static_cast<size_t>(s.cols) - 1] = 0;
  EXPECT_FALSE(tuner::from_feature_set(s));
}

// A database written by the old extractor (one row per store, "kiln-store-v1")
// next to new records: both load, as the same samples, and train.
TEST(TunerFeatureRecords, OldDatabaseLoadsAndTrains) {
  using namespace tuning_db::testing;
  TempDir dir;
  const std::string key = "00000000c0c0c0c0";
  std::vector<Sample> fresh = conv_samples(false);
  {
    tuning_db::Database db = tuning_db::Database::open(dir.file("old.db"));
    db.add_workload(sample_workload(key, "conv3x3"));
    std::vector<tuning_db::Record> records;
    for (size_t i = 0; i < fresh.size(); ++i) {
      tuning_db::Record r = sample_record(key, 1.0 / fresh[i].throughput, static_cast<int>(i));
      Features e = earlier(expand(fresh[i].features));
      r.features = tuning_db::FeatureSet{tuner::legacy_feature_extractor_name(), e.rows, e.cols, e.values};
      records.push_back(std::move(r));
    }
    db.add_records(records);
  }
  tuning_db::Database db = tuning_db::Database::open(dir.file("old.db"));
  std::vector<Sample> loaded = tuner::load_training_samples(db);
  ASSERT_EQ(loaded.size(), fresh.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_TRUE(same_bits(loaded[i].features.values, with_missing_intensity(fresh[i].features))) << i;
    EXPECT_EQ(loaded[i].features.counts, fresh[i].features.counts) << i;
    EXPECT_NEAR(loaded[i].throughput, fresh[i].throughput, 1e-9 * fresh[i].throughput);
  }
  auto m = tuner::make_xgboost_model(5);
  m->update(loaded);
  EXPECT_TRUE(m->trained());
  // New records join the old ones.
  tuning_db::Record r = sample_record(key, 0.5, 1000);
  r.features = tuner::to_feature_set(fresh[0].features);
  db.add_records({r});
  EXPECT_EQ(tuner::load_training_samples(db).size(), fresh.size() + 1);
}

// A cost model file of version 1 (kiln-store-v1 samples: distinct rows plus a
// row -> distinct index per store, without the intensity columns) still
// loads, and retrains on its samples, widened.
TEST(TunerFeatureRecords, VersionOneModelFileLoads) {
  std::string bytes = "KILNCM01";
  auto put = [&](const auto& v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  auto put_string = [&](const std::string& s) { put(static_cast<uint64_t>(s.size())), bytes += s; };
  std::vector<Sample> fresh = conv_samples(false);
  put(uint32_t{1});
  put_string(tuner::legacy_feature_extractor_name());
  put(int32_t{tuner::num_earlier_feature_columns()});
  put(static_cast<uint64_t>(fresh.size()));
  std::vector<Sample> widened;
  for (const Sample& s : fresh) {
    put_string(s.group);
    put(s.throughput);
    put(static_cast<int32_t>(s.features.total_rows()));
    put(static_cast<uint32_t>(s.features.rows));
    Features old = earlier(s.features);
    bytes.append(reinterpret_cast<const char*>(old.values.data()), old.values.size() * sizeof(float));
    for (int r = 0; r < s.features.rows; ++r)
      for (int k = 0; k < static_cast<int>(s.features.count(r)); ++k) put(static_cast<uint32_t>(r));
    widened.push_back({tuner::widen_earlier_features(expand(old)), s.throughput, s.group});
  }
  put_string("");  // untrained
  std::string path = ::testing::TempDir() + "kiln_feature_records_v1.bin";
  tuning_db::testing::write_bytes(path, bytes);
  auto m = tuner::make_xgboost_model(3);
  m->load(path);
  EXPECT_FALSE(m->trained());
  m->update({});
  ASSERT_TRUE(m->trained());
  auto ref = tuner::make_xgboost_model(3);
  ref->update(widened);
  std::vector<Features> f;
  for (const Sample& s : fresh) f.push_back(s.features);
  EXPECT_EQ(m->predict(f), ref->predict(f));  // the same samples: the same model
  std::remove(path.c_str());
}

// Records of an earlier extractor are re-extracted from their traces once;
// a trace that no longer applies keeps what it had.
TEST(TunerFeatureRecords, MigrateFeaturesReExtractsEarlierRecords) {
  using namespace tuning_db::testing;
  TempDir dir;
  const tuner::Task& task = conv().task;
  tuning_db::Database db = tuning_db::Database::open(dir.file("v2.db"));
  db.add_workload({task.workload_key, task.name, te::dag_json(task.outputs)});
  std::vector<tuning_db::Record> records;
  for (size_t i = 0; i < conv().traces.size(); ++i) {
    tuning_db::Record r = sample_record(task.workload_key, 1e-3 * static_cast<double>(i + 1), static_cast<int>(i));
    r.trace = conv().traces[i].to_json();
    tuning_db::FeatureSet old = tuner::to_feature_set(earlier(tuner::extract_features(conv().funcs[i])));
    old.extractor = tuner::expanded_feature_extractor_name();
    r.features = old;
    records.push_back(std::move(r));
  }
  tuning_db::Record broken = sample_record(task.workload_key, 1.0, 999);
  broken.trace = R"([{"kind":"split","stage":"nowhere","axis":"x","factors":[2]}])";
  broken.features = tuning_db::FeatureSet{tuner::legacy_feature_extractor_name(), 1, tuner::num_earlier_feature_columns(),
                                          std::vector<float>(static_cast<size_t>(tuner::num_earlier_feature_columns()), 1.f)};
  records.push_back(broken);
  std::vector<int64_t> ids = db.add_records(records);

  EXPECT_EQ(tuner::migrate_features(db, task), static_cast<int64_t>(conv().traces.size()));
  for (size_t i = 0; i < conv().traces.size(); ++i) {
    std::optional<tuning_db::Record> r = db.record(ids[i], true);
    ASSERT_TRUE(r && r->features);
    EXPECT_EQ(r->features->extractor, tuner::feature_extractor_name());
    Features want = tuner::candidate_features(te::Schedule::from_trace(task.outputs, conv().traces[i]), task.args);
    auto got = tuner::from_feature_set(*r->features);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->values, want.values) << i;
    EXPECT_EQ(got->counts, want.counts) << i;
  }
  std::optional<tuning_db::Record> kept = db.record(ids.back(), true);
  ASSERT_TRUE(kept && kept->features);
  EXPECT_EQ(kept->features->extractor, tuner::legacy_feature_extractor_name());
  EXPECT_EQ(tuner::migrate_features(db, task), 0);  // nothing left that replays
  EXPECT_EQ(tuner::load_training_samples(db).size(), records.size());  // every record still trains
}

TEST(TunerFeatureRecords, ModelFileNamesItsExtractor) {
  auto m = tuner::make_xgboost_model(3);
  m->update(conv_samples(false));
  std::string path = ::testing::TempDir() + "kiln_feature_records_extractor.bin";
  m->save(path);
  EXPECT_EQ(tuner::cost_model_file_extractor(path), tuner::feature_extractor_name());
  tuning_db::testing::write_bytes(path, "not a model");
  EXPECT_THROW(tuner::cost_model_file_extractor(path), Error);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln
