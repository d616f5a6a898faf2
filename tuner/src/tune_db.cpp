// The tuner's side of the tuning database: canonical traces, error kinds, and
// cost-model samples from stored records (the target facts records are keyed
// on are the operator library's: ops/src/record_targets.cpp).
#include "kiln/tuner/feature_records.h"
#include "kiln/tuning_db/jsonl.h"
#include "tune_internal.h"

namespace kiln::tuner::detail {

std::string canonical_trace(const te::Trace& trace) { return tuning_db::canonical_json(trace.to_json(), "schedule trace"); }

tuning_db::ErrorKind to_error_kind(MeasureError e) {
  switch (e) {
    case MeasureError::None: return tuning_db::ErrorKind::none;
    case MeasureError::BuildError: return tuning_db::ErrorKind::build_error;
    case MeasureError::RunError: return tuning_db::ErrorKind::run_error;
    case MeasureError::Timeout: return tuning_db::ErrorKind::timeout;
    case MeasureError::WrongResult: return tuning_db::ErrorKind::wrong_result;
  }
  return tuning_db::ErrorKind::run_error;
}

std::vector<Sample> training_samples(const tuning_db::Database& db) { return load_training_samples(db); }

}  // namespace kiln::tuner::detail
