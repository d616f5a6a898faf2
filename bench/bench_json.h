// The rows a benchmark writes with --json FILE, merged by bench/scoreboard
// into one table. A row: {"name", "threads", "unit", "kiln_min",
// "kiln_median", optionally "peer", "peer_min", "peer_median",
// "ratio_median", "ratio_min", "ratio_max", "rounds", and "goal", "note"}.
// Times are in the row's unit ("ms", or "us" for overheads); "unit":
// "records/s" rows are rates (higher is better).
#ifndef KILN_BENCH_BENCH_JSON_H
#define KILN_BENCH_BENCH_JSON_H

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace kiln::bench {

/** Collects rows and writes them as {"rows": [...]} (nothing when the path is empty). */
class JsonRows {
 public:
  explicit JsonRows(std::string path) : path_(std::move(path)) {}
  void add(nlohmann::json row) { rows_.push_back(std::move(row)); }
  void write() const {
    if (path_.empty()) return;
    std::ofstream f(path_);
    f << nlohmann::json{{"rows", rows_}}.dump(1) << "\n";
    if (!f) throw std::runtime_error("cannot write " + path_);
  }

 private:
  std::string path_;
  nlohmann::json rows_ = nlohmann::json::array();
};

}  // namespace kiln::bench

#endif  // KILN_BENCH_BENCH_JSON_H
