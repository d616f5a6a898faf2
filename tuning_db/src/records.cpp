// Reading record rows, target matching, and small helpers shared by the
// query, insert and export code.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kiln/support/error.h"
#include "kiln/tuning_db/detail.h"

namespace kiln::tuning_db::detail {

const char* const kRecordSelect =
    "SELECT r.id, r.uid, w.workload_key, t.target, t.cpu_model, t.cpu_features, t.gpu_arch, "
    "t.kiln_version, r.trace, r.run_times, r.min_time, r.median_time, r.error_kind, "
    "r.error_msg, r.build_time, tr.uid, r.created_at "
    "FROM records r JOIN workloads w ON w.id = r.workload_id "
    "JOIN targets t ON t.id = r.target_id "
    "LEFT JOIN tuning_runs tr ON tr.id = r.run_id ";

Record read_record(const Stmt& s) {
  Record r;
  r.id = s.col_int(0);
  r.uid = s.col_text(1);
  r.workload_key = s.col_text(2);
  r.target.target = s.col_text(3);
  r.target.cpu_model = s.col_text(4);
  r.target.cpu_features = split_features(s.col_text(5));
  r.target.gpu_arch = s.col_text(6);
  r.target.kiln_version = s.col_text(7);
  r.trace = s.col_text(8);
  // run_times were written by us as a JSON array of numbers; anything else is damage.
  auto times = nlohmann::json::parse(s.col_text(9), nullptr, /*allow_exceptions=*/false);
  KILN_USER_CHECK(times.is_array())
      << "tuning database: record " << r.id << " has unreadable run times; the file is "
      << "damaged, delete the record or restore the file from a backup";
  for (const auto& t : times) r.run_times.push_back(t.is_number() ? t.get<double>() : 0.0);
  r.min_time = s.col_opt_double(10);
  r.median_time = s.col_opt_double(11);
  r.error_kind = parse_error_kind(s.col_text(12));
  r.error_msg = s.col_text(13);
  r.build_time = s.col_opt_double(14);
  r.run_uid = s.col_text(15);
  r.timestamp = s.col_double(16);
  return r;
}

namespace {

/** Features are stored as little-endian float32, whatever the host. */
std::vector<float> decode_floats(const std::vector<unsigned char>& blob) {
  std::vector<float> values(blob.size() / sizeof(float));
  std::memcpy(values.data(), blob.data(), values.size() * sizeof(float));
  if constexpr (std::endian::native == std::endian::big) {
    for (float& v : values) {
      uint32_t bits = std::bit_cast<uint32_t>(v);
      v = std::bit_cast<float>(__builtin_bswap32(bits));
    }
  }
  return values;
}

}  // namespace

std::vector<unsigned char> encode_floats(const std::vector<float>& values) {
  std::vector<unsigned char> blob(values.size() * sizeof(float));
  std::vector<float> copy = values;
  if constexpr (std::endian::native == std::endian::big) {
    for (float& v : copy) v = std::bit_cast<float>(__builtin_bswap32(std::bit_cast<uint32_t>(v)));
  }
  std::memcpy(blob.data(), copy.data(), blob.size());
  return blob;
}

void load_features(Connection& conn, std::vector<Record>& records) {
  for (Record& r : records) {
    Stmt s = conn.query(
        "SELECT extractor, num_rows, num_cols, data FROM record_features WHERE record_id = ?");
    s.bind(1, r.id);
    if (!s.step()) continue;
    FeatureSet f;
    f.extractor = s.col_text(0);
    f.rows = s.col_int(1);
    f.cols = s.col_int(2);
    f.values = decode_floats(s.col_blob(3));
    r.features = std::move(f);
  }
}

std::string target_condition(TargetMatch match) {
  switch (match) {
    case TargetMatch::string_only:
      return "t.target = ?";
    case TargetMatch::hardware:
      return "t.target = ? AND t.cpu_model = ? AND t.cpu_features = ? AND t.gpu_arch = ?";
    case TargetMatch::exact:
      return "t.target = ? AND t.cpu_model = ? AND t.cpu_features = ? AND t.gpu_arch = ? "
             "AND t.kiln_version = ?";
  }
  KILN_UNREACHABLE() << "unknown TargetMatch " << static_cast<int>(match);
  return {};
}

int bind_target(Stmt& stmt, int index, const TargetInfo& target, TargetMatch match) {
  stmt.bind(index++, target.target);
  if (match == TargetMatch::string_only) return index;
  stmt.bind(index++, target.cpu_model);
  stmt.bind(index++, join_features(target.cpu_features));
  stmt.bind(index++, target.gpu_arch);
  if (match == TargetMatch::hardware) return index;
  stmt.bind(index++, target.kiln_version);
  return index;
}

std::string join_features(std::vector<std::string> features) {
  // Sorted and unique, so the same feature set always compares equal.
  std::sort(features.begin(), features.end());
  features.erase(std::unique(features.begin(), features.end()), features.end());
  std::string out;
  for (const auto& f : features) {
    KILN_USER_CHECK(!f.empty() && f.find(',') == std::string::npos)
        << "target cpu feature '" << f << "' is invalid: features must be non-empty and "
        << "contain no comma (e.g. \"avx2\")";
    if (!out.empty()) out += ',';
    out += f;
  }
  return out;
}

std::vector<std::string> split_features(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string new_uid() {
  // 48 bits of milliseconds then 80 random bits (like UUIDv7), in 32 hex digits:
  // unique across processes and machines without coordination, and increasing
  // in time, so new uids append to the end of the uid index instead of dirtying
  // a random page of it per record. Reseeded after fork(), so a parent and its
  // child never share a random sequence.
  static std::mutex mu;
  static std::mt19937_64 gen;
  static pid_t seeded_for = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (seeded_for != ::getpid()) {
    seeded_for = ::getpid();
    std::random_device rd;
    auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
    std::seed_seq seq{rd(), rd(), rd(), rd(), static_cast<unsigned>(ticks),
                      static_cast<unsigned>(seeded_for)};
    gen.seed(seq);
  }
  static const char kHex[] = "0123456789abcdef";
  auto hex = [](uint64_t bits, int digits) {
    std::string out(digits, '0');
    for (int j = digits - 1; j >= 0; --j, bits >>= 4) out[j] = kHex[bits & 0xf];
    return out;
  };
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch()).count();
  return hex(static_cast<uint64_t>(ms), 12) + hex(gen(), 16) + hex(gen(), 4);
}

}  // namespace kiln::tuning_db::detail
