/** \file
 * The search policy and the user-facing entry point of the auto-scheduler.
 *
 * Evolutionary search over complete candidates, ranked by the cost model:
 * each round takes the best measured candidates plus random samples as a
 * population, evolves it (mutation, crossover) for a few generations scored
 * by the model, and measures a batch picked mostly by predicted score with
 * some random exploration. Early stop when no improvement for a set number
 * of rounds. Every measurement (errors too) goes into the tuning DB; traces
 * already in the DB for the task are never measured again. Sessions tuning
 * the same task at once share the work: each claims the traces of a batch in
 * the DB before measuring them and passes over those another live session
 * has claimed, and each learns from the records the others store.
 */
#ifndef KILN_TUNER_TUNE_H
#define KILN_TUNER_TUNE_H

#include <functional>
#include <optional>
#include <string>

#include "kiln/ops/best_record.h"
#include "kiln/tuner/measure.h"

namespace kiln::tuner {

struct TuneOptions {
  int trials = 200;                 ///< candidates to measure (the budget)
  int batch_size = 32;              ///< measured per round
  int early_stop_rounds = 8;        ///< rounds without improvement before stopping
  uint64_t seed = 0;
  std::string db_path = "kiln_tuning.db";
  double timeout_s = 10;            ///< per candidate run (this one applies, not measure.timeout_s)
  MeasureOptions measure;
  bool progress = true;             ///< live progress line on the terminal (stderr)
  std::string curve_png;            ///< if set, write best GFLOP/s against trials as a PNG
  std::string model_path;           ///< if set, load/save the cost model here
  /** Candidates per generation of the evolutionary search (each is lowered for its features: ~10-80 ms). */
  int population = 64;
  int generations = 3;              ///< generations evolved per round
  /** Measure random samples of the space only (after the seeds), never asking the cost model: the baseline the model-guided search is judged against. */
  bool random_search = false;
  /**
   * Seconds a claim on a candidate being measured lasts without renewal. The
   * session renews its claims every third of this while it runs, so it
   * bounds only how long the candidates of a session that crashed stay
   * barred to other sessions.
   */
  double claim_ttl_s = 60;
};

/**
 * The best_* fields describe the DB's best valid record of the task on this
 * hardware after the session (earlier sessions included), checked against
 * the unscheduled function; all zero/empty when there is none.
 */
struct TuneResult {
  std::string best_trace;           ///< JSON
  double best_time = 0;             ///< seconds (median)
  double best_gflops = 0;
  double first_valid_time = 0;      ///< the first valid candidate of this session
  int trials_measured = 0;          ///< in this session
  int trials_skipped = 0;           ///< already in the DB (stored by an earlier or a concurrent session)
  /** Candidates passed over because another live session had claimed them (it was measuring them); each trace once. */
  int trials_claimed_elsewhere = 0;
  /** Records of the task that sessions running meanwhile stored, taken in between rounds (traces known, features learned). */
  int records_from_others = 0;
  int errors = 0;                   ///< measured candidates that failed (recorded in the DB with their error kind)
  /** Points of the search space whose schedule did not apply (user errors): skipped before measuring, counted here. */
  int invalid_candidates = 0;
  /** Candidates whose cost-model features the search extracted (each lowered once), and their mean extraction time, milliseconds (the budget: 5). */
  int featurized = 0;
  double feature_ms_per_candidate = 0;
  double elapsed_s = 0;
  std::string db_path;
  /** (trial, best GFLOP/s so far) after each batch. */
  std::vector<std::pair<int, double>> curve;
  /** GFLOP/s of every measured trial of this session in order; 0 for a trial that failed. */
  std::vector<double> trial_gflops;
};

/** A peer library's figure, drawn on the tuning curve as a dashed line. */
struct CurvePeer {
  std::string name;
  double gflops = 0;
};

/**
 * Plots a session as a PNG through plot_curve.py (matplotlib): every trial's
 * GFLOP/s as a dot (failures as crosses at the bottom), the best so far as a
 * step line, and the peer (if given) as a dashed line. Returns "" on
 * success, else why not (e.g. matplotlib is missing); never throws for that.
 */
std::string write_curve_png(const TuneResult& result, const std::string& path, const std::string& title, const CurvePeer* peer = nullptr);

TuneResult tune(const Task& task, const TuneOptions& options);

/** The best record of a task in the DB, which builds read too (kiln/ops/best_record.h). */
using ops::best_record;
using ops::best_schedule;
using ops::BestRecord;
using ops::other_core_count_targets;

}  // namespace kiln::tuner

#endif  // KILN_TUNER_TUNE_H
