/** \file
 * The records gate: each record judged where it runs, inside the model.
 *
 * Records are chosen kernel by kernel, each timed alone; in the model the
 * kernels run after one another, with their neighbours' data in the caches
 * and the thread pool in the state the one before left it. Chosen so,
 * SqueezeNet's records (160 trials, confirmed) ran the model 1.15-1.24x
 * slower than the defaults at load 9. Timed alone on a loaded machine, a
 * kernel on both cores is hit whenever either thread is descheduled, one on
 * a single core (a parallel loop of extent 1) only when its own thread is:
 * the search and the confirmation favoured such records (SqueezeNet's
 * classifier conv: 2.2 ms alone against the default's 6.1; in the model
 * 2.25 against the default's 1.16, half the cores). Only the model can say.
 *
 * The gate compiles the model twice under the plan compile(db=) takes, once
 * with the records and once with the default schedules, and
 *  1. times both whole, interleaved round by round (ratio, tuned_time,
 *     default_time: what the records as they are give);
 *  2. profiles both, interleaved round by round, and judges each workload
 *     run from a record on the sum of its groups' times in the model: the
 *     record stays where it is faster than the default by the margin in the
 *     median per-round ratio and in its fastest round (confirmed_winner);
 *     the others get a confirmation of their default schedule (the latest
 *     confirmation decides: confirm.h), so compile(db=) runs the default;
 *  3. compiles the model with the records that stayed and times it against
 *     the defaults whole: where it is slower either way (median per-round
 *     ratio or fastest rounds above 1), what a record leaves its neighbours
 *     cost more than it gained, and those records are reverted too.
 *  4. where the plan compile(db=) takes (a graph search's, graph_search.h)
 *     builds other groups than the one it takes without a database: the model as compile(db=)
 *     now builds it against the untuned model, whole; where it is slower
 *     either way, the untuned plan is stored as the model's plan. (SqueezeNet,
 *     160 trials at load 13: the search took every conv at cap 16 by its
 *     rounds, 0.85 of the incumbent, then cap 32 again; a plan measured at
 *     such load is a gamble the untuned model must check.)
 * Steps 3 and 4 keep the tuned side only where it is not slower by the
 * median round nor by the fastest: the defaults are the incumbent, and a
 * tie goes to them. (Keeping it unless it lost both ways, MobileNetV2 tuned
 * 2000 trials under load ran 1.11x its untuned time: at load 3-5 the
 * fastest rounds of two equal-looking sides rarely both lose.)
 * Outputs that differ between the two compiles revert every record.
 * The cost: five compiles and 4 x rounds x 2 model runs of >= round_ms.
 */
#ifndef KILN_TUNER_RECORDS_GATE_H
#define KILN_TUNER_RECORDS_GATE_H

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/graph/executor.h"

namespace kiln::tuner {

struct RecordsGateOptions {
  int rounds = 5;            ///< interleaved rounds (who goes first alternates), for each of the three timings
  double round_ms = 20;      ///< per round and side: back-to-back calls (or profiled runs) of at least this long
  double margin = 0.02;      ///< a record must be this much faster in the model (median per-round ratio and fastest rounds both)
  bool per_record = true;    ///< judge each record in the model (false: all records stay or go together, by the whole model's ratio)
  bool check_plan = true;    ///< step 4: the stored graph plan must not lose to the untuned model
  bool cold_inputs = true;   ///< how the default schedules' confirmations are timed (confirm.h)
  bool fastest_call = false; ///< the same (MeasureOptions::fastest_call)
  uint64_t seed = 0;         ///< of the random inputs
};

/** One workload run from a record, judged in the model. */
struct RecordVerdict {
  std::string workload_key;
  std::string ops;
  int groups = 0;              ///< the model's groups that run it
  double record_time = 0;      ///< seconds per model run in those groups with the record (median over rounds)
  double default_time = 0;     ///< the same with the default schedule
  double ratio = 0;            ///< record / default, the median per-round ratio
  bool kept = false;
};

struct RecordsGateResult {
  std::string skipped;       ///< why the gate did not time the model ("" when it did)
  double ratio = 0;          ///< all records / defaults, whole model: the larger of the median per-round ratio and the fastest rounds' ratio
  double tuned_time = 0;     ///< seconds, the fastest round with all the records
  double default_time = 0;   ///< seconds, the fastest round with the defaults
  std::vector<RecordVerdict> records;  ///< per workload run from a record (empty with per_record false)
  double kept_ratio = 0;     ///< the kept records / defaults, whole model, as `ratio` (0: none kept, or not per record)
  double kept_time = 0;      ///< seconds, the fastest round with the kept records
  bool kept = false;         ///< some record stays
  int reverted = 0;          ///< workloads given back their default schedule
  std::string mismatch;      ///< where the two compiles' outputs differed (the records are then reverted too)
  double plan_ratio = 0;     ///< step 4: the tuned model / the untuned one, as `ratio` (0: not checked, or their outputs differed)
  bool plan_reverted = false;  ///< step 4 stored the untuned plan
};

/** Times, judges and reverts as described above; options.db must exist. */
RecordsGateResult gate_records(const graph::Graph& g, const graph::CompileOptions& options, const RecordsGateOptions& gate = {});

/**
 * Steps 3 and 4's rule: the tuned side (records kept, or the stored plan)
 * holds against the defaults only where neither the median of the per-round
 * ratios tuned / default nor the ratio of the two fastest rounds is above 1.
 */
bool tuned_side_holds(const std::vector<double>& round_ratios, double fastest_tuned, double fastest_default);

/**
 * Step 2's judgement alone: per plan step its workload key ("" for a step
 * that runs no record) and, per round, each step's time with the records
 * (with_records[round][step]) and with the defaults. One verdict per key, in
 * the order the steps first name it; `ops` and `groups` as the steps give.
 */
std::vector<RecordVerdict> judge_records(const std::vector<std::string>& step_keys, const std::vector<std::vector<double>>& with_records,
                                         const std::vector<std::vector<double>>& with_defaults, double margin);

}  // namespace kiln::tuner

#endif  // KILN_TUNER_RECORDS_GATE_H
