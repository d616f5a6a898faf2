/** \file
 * The JSON Lines exchange format: one self-contained record per line.
 *
 * A line carries the record with its workload (key, name, compute DAG), its
 * target facts, its tuning run and its features, so it can be imported into
 * any database on any machine without other context. See tuning_db/README.md.
 */
#ifndef KILN_TUNING_DB_JSONL_H
#define KILN_TUNING_DB_JSONL_H

#include <optional>
#include <string>

#include "kiln/tuning_db/types.h"

namespace kiln::tuning_db {

/** The value of the "format" field of every line. */
inline constexpr const char* kJsonlFormat = "kiln-tuning-record";
/** The version of the line format ("format_version"); readers refuse higher ones. */
inline constexpr int kJsonlVersion = 1;

/** Everything one line holds. */
struct ExchangeRecord {
  Record record;
  Workload workload;
  std::optional<TuningRun> run;
};

/** Serialises one record to a single line of JSON (no trailing newline). */
std::string to_json_line(const ExchangeRecord& entry);
/** Parses one line; throws kiln::Error naming the missing or malformed field. */
ExchangeRecord parse_json_line(const std::string& line);

/** Parses JSON text and returns its canonical form (compact, keys sorted). */
std::string canonical_json(const std::string& text, const std::string& what);

}  // namespace kiln::tuning_db

#endif  // KILN_TUNING_DB_JSONL_H
