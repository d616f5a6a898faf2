/** \file
 * Private to tune*.cpp and progress.cpp: the evolutionary search policy, the
 * tuning database glue, the progress line and the curve plot.
 */
#ifndef KILN_TUNER_SRC_TUNE_INTERNAL_H
#define KILN_TUNER_SRC_TUNE_INTERNAL_H

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kiln/tuner/cost_model.h"
#include "kiln/tuner/features.h"
#include "kiln/tuner/schedule_rules.h"
#include "kiln/tuner/tune.h"
#include "kiln/tuning_db/database.h"

namespace kiln::tuner::detail {

// ---------------------------------------------------------------- tune_db.cpp

// The target facts records are keyed on (kiln/ops/best_record.h: the lookup
// builds use reads what the tuner writes).
using ops::detail::debug_logging;
using ops::detail::kColdInputsSuffix;
using ops::detail::kConfirmedSuffix;
using ops::detail::kKilnVersion;
using ops::detail::record_targets;
using ops::detail::same_hardware;
using ops::detail::target_info;

/** Records of a GPU session run in the simulator (MeasureOptions::gpu_simulate): never a build's schedule. */
inline constexpr const char* kSimulatedSuffix = " [simulated]";
/** The canonical JSON of a trace: the DB's form, so equal schedules are equal strings. */
std::string canonical_trace(const te::Trace& trace);
tuning_db::ErrorKind to_error_kind(MeasureError e);
/**
 * Cost-model samples from every record of the DB with features of this
 * extractor (or the legacy one), throughputs normalised within each (workload, target) group:
 * best / time, 0 for failures.
 */
std::vector<Sample> training_samples(const tuning_db::Database& db);

// ---------------------------------------------------------------- tune_claims.cpp

/**
 * Keeps a session's claims (tuning_db::Database::claim) alive: renews them
 * every third of their lifetime on a thread of its own, so a batch that takes
 * longer than the lifetime to measure stays claimed, while a crashed
 * session's claims lapse within one lifetime. Destroying it stops the thread
 * and releases every claim of the owner.
 */
class ClaimKeeper {
 public:
  ClaimKeeper(tuning_db::Database& db, std::string owner, double ttl_s);
  ClaimKeeper(const ClaimKeeper&) = delete;
  ClaimKeeper& operator=(const ClaimKeeper&) = delete;
  ~ClaimKeeper();
  const std::string& owner() const { return owner_; }
  double ttl_s() const { return ttl_s_; }

 private:
  void loop();
  tuning_db::Database& db_;
  std::string owner_;
  double ttl_s_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// ---------------------------------------------------------------- tune_search.cpp

/** A candidate with its schedule trace in canonical JSON (its identity). */
struct Entry {
  Candidate cand;
  std::string key;
};

struct SearchParams {
  int population = 64;       ///< candidates per generation
  int generations = 3;
  double mutate_prob = 0.85; ///< else crossover
  double eps_random = 0.2;   ///< share of each batch picked at random (exploration)
  int measured_seeds = 16;   ///< best measured candidates put into each initial population
  int threads = 2;           ///< for lowering candidates to features
  bool seeds = true;         ///< the first batch starts with SearchSpace::seeds()
  bool random_only = false;  ///< never evolve by the model: random samples only (TuneOptions::random_search)
};

/**
 * Ansor's search policy: evolution of complete candidates scored by the cost
 * model. It owns the feature cache (by trace key) so that no candidate is
 * lowered twice.
 */
class EvolutionarySearch {
 public:
  EvolutionarySearch(const Task& task, const SearchSpace& space, const CostModel& model, uint64_t seed, SearchParams params);
  /**
   * Up to n new candidates to measure, none of them in `measured` (this
   * session), `busy` (claimed this round: by this session, or by another
   * one that is measuring them) or `known` (the DB); candidates the search
   * would have picked but that the DB already has are counted in *skipped
   * (each trace once). `elite` are the best measured candidates of the
   * session, best first.
   */
  std::vector<Entry> next_batch(int n, const std::vector<Entry>& elite, const std::unordered_set<std::string>& measured,
                                const std::unordered_set<std::string>& known, int* skipped,
                                const std::unordered_set<std::string>* busy = nullptr);
  /** Counts a trace the DB turned out to have (found when claiming it) in *skipped, once per trace, as next_batch does. */
  void note_known(const std::string& key, int* skipped);
  /** Features of a candidate of this search (nullptr when it does not lower). */
  const Features* features(const std::string& key) const;
  /**
   * Candidates found invalid so far (a user error while applying their
   * schedule): counted, never measured. Internal errors are not counted; they
   * propagate. (A candidate that applies but does not lower is measured, and
   * counted as a build error there.)
   */
  int invalid_count() const { return invalid_; }
  /** Candidates whose features were extracted (lowered) so far, and the seconds that took, summed over the threads. */
  int featurized_count() const { return featurized_; }
  double feature_seconds() const { return feature_seconds_; }
  /** The message of the last invalid candidate (for the debug log); empty when none. */
  const std::string& last_invalid() const { return last_invalid_; }

 private:
  /** Materialises a candidate; false when it is invalid. */
  bool materialize(Candidate* c, std::string* key);
  /** Lowers the entries that have no cached features yet (in parallel) and caches them. */
  void featurize(const std::vector<Entry>& entries);
  std::vector<double> score(const std::vector<Entry>& entries);
  std::vector<Entry> evolve(const std::vector<Entry>& elite);

  const Task& task_;
  const SearchSpace& space_;
  const CostModel& model_;
  std::mt19937_64 rng_;
  SearchParams params_;
  /** key -> features; a null entry marks a candidate that failed to lower. */
  std::unordered_map<std::string, std::shared_ptr<Features>> features_;
  std::unordered_set<std::string> skipped_keys_;
  bool seeded_ = false;
  int invalid_ = 0;
  std::string last_invalid_;
  int featurized_ = 0;
  double feature_seconds_ = 0;
};

// ---------------------------------------------------------------- progress.cpp

/** One status line on stderr: rewritten in place on a terminal, plain lines (at most every few seconds) otherwise. */
class Progress {
 public:
  Progress(bool enabled, std::string name, int budget);
  void update(int done, int skipped, int errors, double best_gflops);
  /** A message on its own line, without breaking the status line. */
  void note(const std::string& line);
  /** Ends the status line. */
  void finish();
  double elapsed() const;

 private:
  bool enabled_, tty_;
  std::string name_;
  int budget_;
  std::chrono::steady_clock::time_point start_, last_print_;
  bool line_open_ = false;
  std::string last_line_;
};

/** The summary printed at the end of a session (several lines, no trailing newline). */
std::string format_summary(const Task& task, const TuneResult& r, int64_t record_id, double db_best_before);

}  // namespace kiln::tuner::detail

#endif  // KILN_TUNER_SRC_TUNE_INTERNAL_H
