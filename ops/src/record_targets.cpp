// The target facts tuning records are keyed on (best_record.h): written by
// tuning sessions, read by best_record, so both agree on what "this
// hardware" means.
#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "kiln/ops/best_record.h"

namespace kiln::ops::detail {

namespace {

// The CPU's marketing name: what makes a record's timings comparable to ours.
std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    v.erase(v.find_last_not_of(" \t\r") + 1);
    return v;
  }
  return "unknown";
}

std::vector<std::string> sorted_unique(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

tuning_db::TargetInfo target_info(const Target& target, bool cold_inputs, bool confirmed) {
  tuning_db::TargetInfo t;
  t.target = target.str() + (cold_inputs ? kColdInputsSuffix : "") + (confirmed ? kConfirmedSuffix : "");
  t.kiln_version = kKilnVersion;
  if (target.kind == Target::Kind::CUDA) {
    t.gpu_arch = target.arch;
  } else {
    static const std::string model = cpu_model_name();
    t.cpu_model = model;
    t.cpu_features = sorted_unique(target.features);
  }
  return t;
}

std::vector<tuning_db::TargetInfo> record_targets(const Target& target) {
  std::vector<tuning_db::TargetInfo> out;
  for (auto [cold, confirmed] : {std::pair{true, true}, {false, true}, {true, false}, {false, false}})
    out.push_back(target_info(target, cold, confirmed));
  return out;
}

bool same_hardware(const tuning_db::TargetInfo& a, const tuning_db::TargetInfo& b) {
  return a.target == b.target && a.cpu_model == b.cpu_model && a.gpu_arch == b.gpu_arch && sorted_unique(a.cpu_features) == sorted_unique(b.cpu_features);
}

bool debug_logging() {
  const char* v = std::getenv("KILN_LOG");
  return v && std::string(v) == "debug";
}

}  // namespace kiln::ops::detail
