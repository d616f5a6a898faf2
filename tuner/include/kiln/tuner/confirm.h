/** \file
 * Confirming a task's best record: its few best schedules in the DB and the
 * default schedule, measured again in interleaved rounds, the new timings
 * stored as records of their own, on the target facts with " [confirmed]"
 * after the timing's suffix: best_record ranks confirmed records first.
 *
 * A search measures each candidate once, on a machine that other work may
 * share: the fastest record of thousands is as much the luckiest measurement
 * as the fastest schedule, and on a shared 2-core machine the same kernel
 * measures 1.3 to 4 ms from one batch to the next. Measuring the contenders
 * again side by side, round after round, ranks them on equal terms; the
 * default schedule competes too, so a task's best is never one that loses to
 * what the task gets without tuning.
 *
 * The default is the incumbent: a record replaces it only where it was
 * faster by a margin, round by round and in its fastest round
 * (confirmed_winner). Ranked by the medians alone, five contenders of equal
 * speed under load each won a fifth of the time, and a record a few per
 * cent slower than the default often did (SqueezeNet, 160 trials, load 9:
 * confirmed medians 2-7x the search's minima, from one round to the next).
 * Only the winner is stored: the latest confirmation of a workload decides
 * what compile takes (best_record.h), not a median from another day's load.
 */
#ifndef KILN_TUNER_CONFIRM_H
#define KILN_TUNER_CONFIRM_H

#include <string>
#include <vector>

#include "kiln/tuner/schedule_rules.h"

namespace kiln::tuner {

struct ConfirmOptions {
  int top = 4;               ///< the best distinct schedules of the DB (by min time, any timing) that compete
  int rounds = 3;            ///< each measures every contender once (repeat 3, >= 10 ms each)
  bool cold_inputs = true;   ///< time them with cold inputs (MeasureOptions::cold_inputs)
  double margin = 0.03;      ///< how much faster than the default a record must be to replace it (confirmed_winner)
  bool fastest_call = false; ///< MeasureOptions::fastest_call
};

struct ConfirmResult {
  int contenders = 0;        ///< schedules measured (the default included); 0 when the task has no valid record
  double before = 0;         ///< the DB's best min time before (seconds)
  double after = 0;          ///< the median time of the winner of the rounds (seconds)
  bool changed = false;      ///< the winner is not the schedule with the best time before
  bool default_won = false;  ///< the winner is the default schedule
};

/**
 * The winner of a confirmation: round_times[i][r] is contender i's fastest
 * time in round r (empty: it failed and does not compete). A contender
 * other than the default (default_index) wins only where the median of its
 * per-round ratios to the default and its fastest round over the default's
 * both are at most 1 - margin; of those, the lowest median ratio. Without a
 * default that measured, the lowest median time. round_times.size(): none.
 */
size_t confirmed_winner(const std::vector<std::vector<double>>& round_times, size_t default_index, double margin);

/** Measures and stores as described above; the DB at db_path must exist. */
ConfirmResult confirm_best(const Task& task, const std::string& db_path, const ConfirmOptions& options = {});

}  // namespace kiln::tuner

#endif  // KILN_TUNER_CONFIRM_H
