/** \file
 * Features of a candidate for the cost model, extracted from its lowered
 * loop nest, in the manner of Ansor: one row per
 * buffer store, with the counts of float/int arithmetic by kind, the
 * vectorize/unroll/parallel annotations around it and their lengths, the
 * loop extents around it, and for each buffer touched the bytes, unique
 * bytes, the stride of the innermost access, the reuse distance, plus
 * allocation sizes. Rows have a fixed number of columns.
 *
 * Unrolled copies of a store make identical rows (a 3x3 conv candidate has
 * ~750 stores but a few dozen distinct rows), so a Features holds each
 * distinct row once with how many stores it stands for. The cost model
 * weighs a row's prediction by that count: the score is the one of the
 * expanded matrix.
 */
#ifndef KILN_TUNER_FEATURES_H
#define KILN_TUNER_FEATURES_H

#include <string>
#include <vector>

#include "kiln/ir/function.h"
#include "kiln/te/schedule.h"

namespace kiln::tuner {

/** A row-major matrix of float32: one row per distinct store row, with its multiplicity. */
struct Features {
  int rows = 0, cols = 0;
  std::vector<float> values;
  /** How many stores each row stands for (rows entries, each >= 1); empty: 1 each (features of the old, uncollapsed form). */
  std::vector<float> counts;
  double count(int row) const { return counts.empty() ? 1.0 : static_cast<double>(counts[static_cast<size_t>(row)]); }
  /** The number of stores: the rows of the expanded matrix. */
  double total_rows() const;
};

/** Merges identical rows (first-seen order), adding their counts; the result always has counts. */
Features collapse_rows(const Features& f);

/**
 * Rows of an earlier extractor (num_earlier_feature_columns() wide) widened
 * to this one's: the columns they lack are NaN, which the cost model takes
 * as missing. Counts are kept.
 */
Features widen_earlier_features(const Features& f);

/** Throws kiln::Error (naming `what`) unless f is rows x num_feature_columns() with counts empty or rows positive finite ones. */
void check_features(const Features& f, const std::string& what);

/**
 * The name of this extractor and its version (stored with features in the
 * tuning DB). "kiln-nest-v4": taken from the nest before unrolling and
 * vectorizing are expanded (candidate_features), rows collapsed with counts;
 * its DB form has one more column, the count, last. Its rows end with the
 * arithmetic-intensity columns (ops per byte at each loop level, and the
 * traffic a 32 KiB and a 512 KiB cache would see) that earlier extractors
 * lack.
 */
const std::string& feature_extractor_name();
/**
 * "kiln-nest-v3": v4 without the intensity columns (the first
 * num_earlier_feature_columns() columns). Its records still train the model,
 * the missing columns NaN (XGBoost's missing value); the tuner re-extracts
 * those of the task it tunes (migrate_features).
 */
const std::string& previous_feature_extractor_name();
/** "kiln-store-v2": the columns and DB form of v3, but taken from the expanded nest (10x slower to make). */
const std::string& expanded_feature_extractor_name();
/** "kiln-store-v1": as v2, one row per store (no counts). */
const std::string& legacy_feature_extractor_name();
int num_feature_columns();
/** The columns of the earlier extractors' rows (v1-v3): a prefix of this one's. */
int num_earlier_feature_columns();
/** Column names, for debugging and tests. */
const std::vector<std::string>& feature_names();

/** The features of any lowered function (whatever passes ran over it). */
Features extract_features(const PrimFunc& lowered);

/**
 * The features of a scheduled candidate, as the tuner stores them: `sch`
 * lowered for `args` up to loop partitioning, with the Unrolled and
 * Vectorized marks still on the loops (te::LowerOptions::expand_loops off),
 * then extract_features. Throws what te::lower throws.
 */
Features candidate_features(const te::Schedule& sch, const std::vector<te::Tensor>& args);

}  // namespace kiln::tuner

#endif  // KILN_TUNER_FEATURES_H
