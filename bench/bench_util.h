// Shared helpers of the benchmarks that time kiln against its peers: the
// interleaved comparison (kiln/tuner/peer.h: the peers run through
// bench/peers/launcher.py), its table cells and its JSON row.
#ifndef KILN_BENCH_BENCH_UTIL_H
#define KILN_BENCH_BENCH_UTIL_H

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_json.h"
#include "kiln/tuner/peer.h"

namespace kiln::bench {

using tuner::median_of;
using tuner::min_of;

inline double max_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

/** "0.95 (0.90..1.02)": the median of the per-round ratios kiln / best peer, with its range. */
inline std::string ratio_cell(const tuner::Comparison& c) {
  if (c.ratios.empty()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f (%.2f..%.2f)", median_of(c.ratios), min_of(c.ratios), max_of(c.ratios));
  return buf;
}

/** Prints the peers that did not run (the comparison goes on without them). */
inline void report_failed_peers(const tuner::Comparison& c) {
  for (const std::string& f : c.failed) std::fprintf(stderr, "peer did not run: %s\n", f.c_str());
}

/** A scoreboard row (times in ms) from a comparison: kiln, the best peer and every peer, the ratio, the goal and a note. */
inline nlohmann::json comparison_row(const std::string& name, int threads, const tuner::Comparison& c, const std::string& goal, const std::string& note = "") {
  nlohmann::json row = {{"name", name}, {"threads", threads}, {"unit", "ms"}, {"kiln_min", min_of(c.kiln) * 1e3}, {"kiln_median", median_of(c.kiln) * 1e3},
                        {"rounds", c.kiln.size()}, {"goal", goal}, {"note", note}};
  if (const tuner::PeerTimes* p = c.best_peer()) {
    row["peer"] = p->label;
    row["peer_min"] = min_of(p->times) * 1e3;
    row["peer_median"] = median_of(p->times) * 1e3;
    row["ratio_median"] = median_of(c.ratios);
    row["ratio_min"] = min_of(c.ratios);
    row["ratio_max"] = max_of(c.ratios);
    nlohmann::json all = nlohmann::json::object();
    for (const tuner::PeerTimes& q : c.peers) all[q.label] = {{"min", min_of(q.times) * 1e3}, {"median", median_of(q.times) * 1e3}};
    row["peers"] = all;
  } else {
    row["peer"] = nullptr;
  }
  if (!c.failed.empty()) row["peers_failed"] = c.failed;
  return row;
}

}  // namespace kiln::bench

#endif  // KILN_BENCH_BENCH_UTIL_H
