// JSON Lines exchange: one self-contained record per line, plus the error
// kind names and canonical JSON used everywhere.
#include "kiln/tuning_db/jsonl.h"

#include <cstdio>
#include <fstream>
#include <istream>
#include <ostream>

#include <nlohmann/json.hpp>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln/tuning_db/detail.h"

namespace kiln::tuning_db {

using json = nlohmann::json;

namespace {
const char* const kErrorKindNames[] = {"none", "build_error", "run_error", "timeout",
                                       "wrong_result"};
}

std::string to_string(ErrorKind kind) { return kErrorKindNames[static_cast<int>(kind)]; }

ErrorKind parse_error_kind(const std::string& text) {
  for (int i = 0; i < 5; ++i)
    if (text == kErrorKindNames[i]) return static_cast<ErrorKind>(i);
  KILN_USER_ERROR() << "unknown error kind '" << text << "'; use one of none, build_error, "
                    << "run_error, timeout, wrong_result";
  return ErrorKind::none;
}

std::string canonical_json(const std::string& text, const std::string& what) {
  try {
    // nlohmann::json keeps object keys sorted, so dump() is a canonical form.
    return json::parse(text).dump();
  } catch (const json::exception& e) {
    throw Error(what + " is not valid JSON (" + e.what() + "); pass JSON text");
  }
}

// ---- one line <-> ExchangeRecord ----

namespace {

// Lines are written with ordered_json so "format" leads and fields read in a
// sensible order; embedded JSON (trace, DAG) is canonical, so its keys stay sorted.
using ojson = nlohmann::ordered_json;

ojson optional_number(const std::optional<double>& v) { return v ? ojson(*v) : ojson(nullptr); }

ojson target_json(const TargetInfo& t) {
  return {{"target", t.target},
          {"cpu_model", t.cpu_model},
          {"cpu_features", t.cpu_features},
          {"gpu_arch", t.gpu_arch},
          {"kiln_version", t.kiln_version}};
}

ojson run_json(const TuningRun& r) {
  return {{"uid", r.uid},       {"started_at", r.started_at},
          {"ended_at", optional_number(r.ended_at)},
          {"budget", r.budget}, {"seed", r.seed},
          {"machine", r.machine}};
}

ojson features_json(const FeatureSet& f) {
  return {{"extractor", f.extractor}, {"rows", f.rows}, {"cols", f.cols}, {"values", f.values}};
}

/** Reads field `key` of `obj` as T, or throws naming the field and the expected type. */
template <typename T>
T field(const json& obj, const char* key, const char* type) {
  auto it = obj.find(key);
  KILN_USER_CHECK(it != obj.end()) << "field '" << key << "' is missing";
  try {
    if constexpr (std::is_same_v<T, std::string>) {
      KILN_USER_CHECK(it->is_string()) << "field '" << key << "' must be " << type;
    } else if constexpr (std::is_arithmetic_v<T>) {
      KILN_USER_CHECK(it->is_number()) << "field '" << key << "' must be " << type;
    }
    return it->get<T>();
  } catch (const json::exception&) {
    throw Error(std::string("field '") + key + "' must be " + type);
  }
}

std::optional<double> optional_field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  KILN_USER_CHECK(it->is_number()) << "field '" << key << "' must be a number or null";
  return it->get<double>();
}

const json& object_field(const json& obj, const char* key) {
  auto it = obj.find(key);
  KILN_USER_CHECK(it != obj.end() && it->is_object()) << "field '" << key << "' must be an object";
  return *it;
}

TargetInfo parse_target(const json& t) {
  return {field<std::string>(t, "target", "a string"), field<std::string>(t, "cpu_model", "a string"),
          field<std::vector<std::string>>(t, "cpu_features", "an array of strings"),
          field<std::string>(t, "gpu_arch", "a string"), field<std::string>(t, "kiln_version", "a string")};
}

TuningRun parse_run(const json& r) {
  TuningRun run;
  run.uid = field<std::string>(r, "uid", "a string");
  run.started_at = field<double>(r, "started_at", "a number");
  run.ended_at = optional_field(r, "ended_at");
  run.budget = field<int64_t>(r, "budget", "an integer");
  run.seed = field<int64_t>(r, "seed", "an integer");
  run.machine = field<std::string>(r, "machine", "a string");
  return run;
}

FeatureSet parse_features(const json& f) {
  return {field<std::string>(f, "extractor", "a string"), field<int64_t>(f, "rows", "an integer"),
          field<int64_t>(f, "cols", "an integer"),
          field<std::vector<float>>(f, "values", "an array of numbers")};
}

}  // namespace

namespace {
ExchangeRecord parse_json_object(const json& line);
std::string write_json_object(const ExchangeRecord& e);
}  // namespace

std::string to_json_line(const ExchangeRecord& e) {
  try {
    return write_json_object(e);
  } catch (const json::exception& err) {
    throw Error("tuning record " + e.record.uid + " cannot be written as JSON (" + err.what() +
                "); its trace and compute DAG must be valid JSON text");
  }
}

namespace {

std::string write_json_object(const ExchangeRecord& e) {
  const Record& r = e.record;
  ojson line = {
      {"format", kJsonlFormat},
      {"format_version", kJsonlVersion},
      {"uid", r.uid},
      {"workload", {{"key", e.workload.key}, {"name", e.workload.name},
                    {"compute_dag", ojson::parse(e.workload.compute_dag)}}},
      {"target", target_json(r.target)},
      {"trace", ojson::parse(r.trace)},
      {"run_times", r.run_times},
      {"min_time", optional_number(r.min_time)},
      {"median_time", optional_number(r.median_time)},
      {"error_kind", to_string(r.error_kind)},
      {"error_msg", r.error_msg},
      {"build_time", optional_number(r.build_time)},
      {"timestamp", r.timestamp},
      {"tuning_run", e.run ? run_json(*e.run) : ojson(nullptr)},
      {"features", r.features ? features_json(*r.features) : ojson(nullptr)},
  };
  return line.dump();
}

}  // namespace

ExchangeRecord parse_json_line(const std::string& text) {
  try {
    return parse_json_object(json::parse(text));
  } catch (const json::exception& e) {
    throw Error(std::string("not a valid kiln tuning record (") + e.what() + ")");
  }
}

namespace {

ExchangeRecord parse_json_object(const json& line) {
  KILN_USER_CHECK(line.is_object() && line.value("format", "") == kJsonlFormat)
      << "not a kiln tuning record: expected an object with \"format\": \"" << kJsonlFormat << "\"";
  int version = field<int>(line, "format_version", "an integer");
  KILN_USER_CHECK(version >= 1 && version <= kJsonlVersion)
      << "format_version " << version << " is newer than this kiln reads (" << kJsonlVersion
      << "); import it with a newer kiln";
  ExchangeRecord e;
  const json& w = object_field(line, "workload");
  e.workload = {field<std::string>(w, "key", "a string"), field<std::string>(w, "name", "a string"),
                field<json>(w, "compute_dag", "JSON").dump()};
  Record& r = e.record;
  r.uid = field<std::string>(line, "uid", "a string");
  r.workload_key = e.workload.key;
  r.target = parse_target(object_field(line, "target"));
  r.trace = field<json>(line, "trace", "a JSON array").dump();
  r.run_times = field<std::vector<double>>(line, "run_times", "an array of numbers");
  r.min_time = optional_field(line, "min_time");
  r.median_time = optional_field(line, "median_time");
  r.error_kind = parse_error_kind(field<std::string>(line, "error_kind", "a string"));
  r.error_msg = field<std::string>(line, "error_msg", "a string");
  r.build_time = optional_field(line, "build_time");
  r.timestamp = field<double>(line, "timestamp", "a number");
  if (line.contains("tuning_run") && !line["tuning_run"].is_null()) {
    e.run = parse_run(object_field(line, "tuning_run"));
    r.run_uid = e.run->uid;
  }
  if (line.contains("features") && !line["features"].is_null())
    r.features = parse_features(object_field(line, "features"));
  return e;
}


// ---- Database export / import ----

/** Workloads and runs met while exporting, each read once. */
struct ExportCache {
  std::map<std::string, Workload> workloads;
  std::map<std::string, TuningRun> runs;
};

const Workload& cached_workload(detail::Connection& conn, ExportCache& cache, const std::string& key) {
  auto it = cache.workloads.find(key);
  if (it != cache.workloads.end()) return it->second;
  detail::Stmt q = conn.query("SELECT name, compute_dag FROM workloads WHERE workload_key = ?");
  q.bind(1, key);
  KILN_CHECK(q.step()) << "workload " << key << " vanished during export";
  return cache.workloads[key] = Workload{key, q.col_text(0), q.col_text(1)};
}

const TuningRun& cached_run(detail::Connection& conn, ExportCache& cache, const std::string& uid) {
  auto it = cache.runs.find(uid);
  if (it != cache.runs.end()) return it->second;
  detail::Stmt q = conn.query(
      "SELECT started_at, ended_at, budget, seed, machine FROM tuning_runs WHERE uid = ?");
  q.bind(1, uid);
  KILN_CHECK(q.step()) << "tuning run " << uid << " vanished during export";
  return cache.runs[uid] = TuningRun{uid, q.col_double(0), q.col_opt_double(1), q.col_int(2),
                                     q.col_int(3), q.col_text(4)};
}

}  // namespace

int64_t Database::write_jsonl(std::ostream& out, const RecordFilter& filter) const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  // A read transaction gives one consistent snapshot while other processes write.
  detail::Transaction tx(s.conn, /*write=*/false);
  ExportCache cache;
  int64_t count = 0;
  detail::Stmt q = s.conn.query(detail::filter_sql(filter));
  detail::bind_filter(q, filter);
  while (q.step()) {
    std::vector<Record> one{detail::read_record(q)};
    detail::load_features(s.conn, one);
    ExchangeRecord e;
    e.workload = cached_workload(s.conn, cache, one.front().workload_key);
    e.record = std::move(one.front());
    if (!e.record.run_uid.empty()) e.run = cached_run(s.conn, cache, e.record.run_uid);
    out << to_json_line(e) << '\n';
    ++count;
  }
  KILN_USER_CHECK(out.good()) << "writing the JSON Lines export of '" << s.path
                              << "' failed; check the disk space and the output path";
  return count;
}

int64_t Database::export_jsonl(const std::string& file, const RecordFilter& filter) const {
  // Write beside the target and rename: a reader never sees a half-written file.
  std::string tmp = file + ".tmp";
  int64_t count = 0;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    KILN_USER_CHECK(out.good()) << "cannot create export file '" << tmp
                                << "'; check that the directory exists and is writable";
    try {
      count = write_jsonl(out, filter);
      out.close();
      KILN_USER_CHECK(!out.fail()) << "closing export file '" << tmp << "' failed";
    } catch (...) {
      std::remove(tmp.c_str());
      throw;
    }
  }
  KILN_USER_CHECK(std::rename(tmp.c_str(), file.c_str()) == 0)
      << "cannot move '" << tmp << "' to '" << file << "'; check the permissions";
  return count;
}

ImportResult Database::read_jsonl(std::istream& in) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ImportResult result;
  detail::InsertCache cache;
  detail::Transaction tx(s.conn);
  std::string text;
  for (int64_t line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
    try {
      ExchangeRecord e = parse_json_line(text);
      detail::upsert_workload(s.conn, e.workload);
      if (e.run) detail::upsert_run(s.conn, *e.run);
      Record r = detail::normalise_record(e.record);
      if (detail::insert_record(s.conn, cache, r, /*skip_known_uid=*/true))
        ++result.added;
      else
        ++result.skipped;
    } catch (const Exception& err) {
      rethrow_as(err, "import into '" + s.path + "': line " + std::to_string(line_no) + ": " + err.what() + "; nothing was imported");
    }
  }
  KILN_USER_CHECK(!in.bad()) << "import into '" << s.path << "': reading the input failed";
  tx.commit();
  return result;
}

ImportResult Database::import_jsonl(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  KILN_USER_CHECK(in.good()) << "cannot open '" << file << "' for import; check the path";
  return read_jsonl(in);
}

}  // namespace kiln::tuning_db
