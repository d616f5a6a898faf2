/** \file
 * Features of a candidate for the cost model, extracted from its lowered
 * loop nest (after the pass pipeline), in the manner of Ansor: one row per
 * buffer store, with the counts of float/int arithmetic by kind, the
 * vectorize/unroll/parallel annotations around it and their lengths, the
 * loop extents around it, and for each buffer touched the bytes, unique
 * bytes, the stride of the innermost access, the reuse distance, plus
 * allocation sizes. Rows have a fixed number of columns.
 */
#ifndef KILN_TUNER_FEATURES_H
#define KILN_TUNER_FEATURES_H

#include <string>
#include <vector>

#include "kiln/ir/function.h"

namespace kiln::tuner {

/** A row-major matrix of float32: one row per store. */
struct Features {
  int rows = 0, cols = 0;
  std::vector<float> values;
};

/** The name of this extractor and its version (stored with features in the tuning DB). */
const std::string& feature_extractor_name();
int num_feature_columns();
/** Column names, for debugging and tests. */
const std::vector<std::string>& feature_names();

Features extract_features(const PrimFunc& lowered);

}  // namespace kiln::tuner

#endif  // KILN_TUNER_FEATURES_H
