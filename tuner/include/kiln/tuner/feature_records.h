/** \file
 * Features in the tuning DB: the stored form of Features (a FeatureSet) and
 * the cost-model samples of a database's records.
 *
 * Extractors "kiln-nest-v4", "kiln-nest-v3" and "kiln-store-v2" store their
 * collapsed rows with one more column, the row's count, last; so the DB
 * schema and its JSON Lines form stay as they were. Records of
 * "kiln-store-v1" (one row per store, no count) still load, each row
 * counting once. The earlier extractors' rows lack v4's intensity columns:
 * they load with those NaN, which XGBoost takes as missing, so they still
 * train the model; migrate_features replaces those of a task by this
 * extractor's.
 */
#ifndef KILN_TUNER_FEATURE_RECORDS_H
#define KILN_TUNER_FEATURE_RECORDS_H

#include <optional>
#include <vector>

#include "kiln/tuner/cost_model.h"
#include "kiln/tuner/features.h"
#include "kiln/tuner/schedule_rules.h"
#include "kiln/tuning_db/database.h"

namespace kiln::tuner {

/** The stored form of features of this extractor (the count column appended). */
tuning_db::FeatureSet to_feature_set(const Features& f);
/** Features of a stored set of this extractor or an earlier one (collapsed); nullopt for another extractor or a wrong shape. */
std::optional<Features> from_feature_set(const tuning_db::FeatureSet& f);

/**
 * Cost-model samples from every record of the DB with features of this
 * extractor or an earlier one; each (workload, target) is one group, and a
 * sample's throughput is 1 / median time (0 for failures).
 */
std::vector<Sample> load_training_samples(const tuning_db::Database& db);

/**
 * Gives the records of `task`'s workload whose features an earlier extractor
 * made this extractor's features instead: each record's trace is replayed on
 * the task and its candidate_features stored in place (one transaction).
 * Records whose trace no longer applies or lowers keep their old features.
 * Returns how many records were migrated; 0 (cheaply) once none is left.
 */
int64_t migrate_features(tuning_db::Database& db, const Task& task);

}  // namespace kiln::tuner

#endif  // KILN_TUNER_FEATURE_RECORDS_H
