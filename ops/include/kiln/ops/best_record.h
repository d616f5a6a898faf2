/** \file
 * The tuned schedule of a task: the best record of its workload in a tuning
 * database, replayed. Builds read it (the graph compiler's kernel builder,
 * kiln.compile(db=)) and tuning sessions write what it reads, so the target
 * facts records are keyed on live here too, below both: the lookup needs
 * SQLite (kiln_tuning_db), never the tuner's cost model or search.
 */
#ifndef KILN_OPS_BEST_RECORD_H
#define KILN_OPS_BEST_RECORD_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/ops/task.h"
#include "kiln/te/schedule.h"
#include "kiln/tuning_db/database.h"

namespace kiln::ops {

/** The best record of the task in the DB with its schedule replayed (for callers that log what they apply). */
struct BestRecord {
  te::Schedule schedule;
  std::string trace_json;
  int64_t record_id = 0;
  double median_time = 0;  ///< seconds
};
/**
 * Among valid records of the workload on the same hardware (target string,
 * CPU model and features), of the first kind the workload has of: confirmed
 * with cold inputs, confirmed warm (confirm.h), cold inputs, warm: a
 * confirmed kind's newest record (a confirmation stores only its winner, so
 * the latest decides), else the lowest median; records that no longer
 * replay are passed over. No file: nullopt. With KILN_LOG=debug, says on stderr which record is used or why none.
 */
std::optional<BestRecord> best_record(const Task& task, const std::string& db_path);

/** The schedule of best_record, if any (its trace in *trace_json). */
std::optional<te::Schedule> best_schedule(const Task& task, const std::string& db_path, std::string* trace_json = nullptr);

/**
 * The targets that are the task's but for -num-cores, on the same hardware,
 * with valid records of its workload: the nearest count first, the larger
 * on ties. A build does not take their records: a schedule tuned for one
 * core count is not fitted to another (on ResNet-18, Zen 3, the records of
 * a 3000-trial session for 2 cores ran 1.02x slower at 1 core than the
 * default schedules). They tell a user whose build found no record of its
 * own what the database was tuned for. No file, or CUDA: empty.
 */
std::vector<std::string> other_core_count_targets(const Task& task, const std::string& db_path);

namespace detail {

// The target facts of the records (shared with the tuner, which writes them; record_targets.cpp).

/** The version written into the tuning DB's target facts (the project's version). */
inline constexpr const char* kKilnVersion = "0.1.0";
/**
 * The target facts the DB keys on: target string, CPU model (/proc/cpuinfo),
 * features, GPU arch. Records timed with cold inputs (MeasureOptions::cold_inputs)
 * carry kColdInputsSuffix on the target string: their times are not comparable
 * with warm ones, and the DB's target facts are where comparability lives.
 */
tuning_db::TargetInfo target_info(const Target& target, bool cold_inputs = false, bool confirmed = false);
inline constexpr const char* kColdInputsSuffix = " [cold inputs]";
/**
 * Records of a confirmation (confirm.h: contenders measured side by side in
 * rounds) carry this after the timing's suffix: ranked among themselves, a
 * search's single lucky measurement of one contender cannot outrank them.
 */
inline constexpr const char* kConfirmedSuffix = " [confirmed]";
/**
 * The target facts a target's records carry, in the order best_record
 * prefers them: confirmed cold, confirmed warm, cold, warm.
 */
std::vector<tuning_db::TargetInfo> record_targets(const Target& target);
/** Whether a stored record's target is the same hardware as `t` (TargetMatch::hardware). */
bool same_hardware(const tuning_db::TargetInfo& a, const tuning_db::TargetInfo& b);
/** True when KILN_LOG=debug: debug messages go to stderr. */
bool debug_logging();

}  // namespace detail

}  // namespace kiln::ops

#endif  // KILN_OPS_BEST_RECORD_H
