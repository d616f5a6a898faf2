/** \file
 * The records gate: the model compiled with its tuning records, timed
 * against the same model with the default schedules (the same layout plan),
 * interleaved round by round; where the records do not win by a margin,
 * every workload of the model whose record is not its default schedule gets
 * a confirmation of its default schedule (confirm.h: the latest
 * confirmation decides), so compile(db=) runs the defaults again.
 *
 * Records are chosen kernel by kernel, each timed alone; in the model the
 * kernels run after one another, with their neighbours' data in the caches
 * and the thread pool in the state the one before left it. Chosen so,
 * SqueezeNet's records (160 trials, confirmed) ran the model 1.15-1.24x
 * slower than the defaults at load 9, and 1.17x still after confirming
 * them with the default as incumbent. Only the whole model can say whether
 * the records pay.
 */
#ifndef KILN_TUNER_RECORDS_GATE_H
#define KILN_TUNER_RECORDS_GATE_H

#include <cstdint>
#include <string>

#include "kiln/graph/executor.h"

namespace kiln::tuner {

struct RecordsGateOptions {
  int rounds = 5;            ///< interleaved rounds (who goes first alternates)
  double round_ms = 20;      ///< per round and side: back-to-back calls of at least this long
  double margin = 0.02;      ///< the records must be this much faster (the decisive ratio: median per-round and fastest rounds both)
  bool cold_inputs = true;   ///< how the default schedules' confirmations are timed (confirm.h)
  uint64_t seed = 0;         ///< of the random inputs
};

struct RecordsGateResult {
  std::string skipped;       ///< why the gate did not time the model ("" when it did)
  double ratio = 0;          ///< with records / defaults: the larger of the median per-round ratio and the fastest rounds' ratio
  double tuned_time = 0;     ///< seconds, the fastest round with the records
  double default_time = 0;   ///< seconds, the fastest round with the defaults
  bool kept = false;         ///< the records won and stay
  int reverted = 0;          ///< workloads given back their default schedule
  std::string mismatch;      ///< where the two compiles' outputs differed (the records are then reverted too)
};

/** Times and, where the records lose, reverts as described above; options.db must exist. */
RecordsGateResult gate_records(const graph::Graph& g, const graph::CompileOptions& options, const RecordsGateOptions& gate = {});

}  // namespace kiln::tuner

#endif  // KILN_TUNER_RECORDS_GATE_H
