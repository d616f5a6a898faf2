/** \file
 * Graph-level tuning: the choices the graph compiler otherwise makes by its
 * defaults, measured on the whole model.
 *
 * The choices are those of a LayoutPlan (kiln/graph/layout_plan.h): each
 * convolution's channel-block cap (layout_block_choices: one or two
 * vectors); for each 3x3 convolution that takes Winograd by default, its
 * largest Winograd tile (F(4x4), F(2x2) or direct); and for each depthwise
 * conv whose output a 1x1 conv alone reads, whether the two run as one group
 * (fuse_depthwise_pointwise; by default a size rule decides). The search starts
 * from the plan compile(db=) would take (a stored tuned plan, else the one
 * choose_layout_plan estimates from the records) and tries moves from it
 * greedily, coarse first: every convolution at one cap; every depthwise
 * conv fused with its 1x1 conv, or none; Winograd off, or at F(2x2), for all;
 * each depthwise+1x1 pair the other way, those nearest the size rule's
 * threshold first; each stage (convolutions of one output size) at one cap;
 * then each Winograd convolution alone, then each convolution's cap alone,
 * the most FLOPs first. Each candidate is compiled as the whole model with
 * the database's loop schedules (kiln::graph::compile, db=), its output
 * checked against the incumbent's, and timed against the incumbent in
 * interleaved rounds in this process (both compiles build only schedules
 * compile(db=) would run anyway; a compile or run error costs the
 * candidate, not the search). A move becomes the incumbent where its ratio
 * to the incumbent (the larger of the median per-round ratio and the ratio
 * of the fastest rounds) is below 1 - min_gain in each of two sets of rounds
 * on its own (the second set is measured only where the first shows a win).
 *
 * Every candidate's outcome goes into the tuning database (graph_candidates,
 * keyed by the model's key, the hardware, the candidate and its rival), and
 * the incumbent into graph_plans after each win and at the end, so compile
 * (db=) takes it and a resumed search re-uses every outcome it finds
 * instead of measuring it again.
 */
#ifndef KILN_TUNER_GRAPH_SEARCH_H
#define KILN_TUNER_GRAPH_SEARCH_H

#include <string>
#include <vector>

#include "kiln/graph/executor.h"
#include "kiln/graph/layout_plan.h"

namespace kiln::tuner {

struct GraphSearchOptions {
  int max_candidates = 16;   ///< candidates to measure (outcomes found in the database are free)
  double time_budget_s = 0;  ///< stop starting candidates after this (0: none)
  int rounds = 5;            ///< interleaved rounds per set (two sets where the first looks like a win)
  double round_ms = 20;      ///< per round and side: back-to-back calls of at least this long
  double min_gain = 0.02;    ///< a move must be this much faster (its decisive ratio, see above) to be taken
  bool progress = true;      ///< a line per candidate on stderr
  uint64_t seed = 0;         ///< of the random inputs
};

struct GraphSearchResult {
  std::string model_key;       ///< kiln::graph::model_key of the model
  graph::LayoutPlan plan;      ///< the winner (stored in the database)
  std::string plan_json;
  std::string start_json;      ///< the plan the search started from
  double time = 0;             ///< seconds, the winner's median in its last comparison
  double start_time = 0;       ///< seconds, the starting plan's median in its first comparison
  int measured = 0;            ///< candidates measured in this session
  int reused = 0;              ///< outcomes found in the database (not measured again)
  int taken = 0;               ///< moves that became the incumbent
  int moves = 0;               ///< the moves the space has from the final incumbent's search
  std::vector<std::string> log;       ///< one line per candidate looked at
  std::string skipped;                ///< why no search ran ("" when one did)
};

/**
 * Searches the graph-level choices of `g` (a static model; options.db
 * required, options.target an llvm one) and stores the winner; see the file
 * comment. A model without convolutions, with symbolic dims, or compiled
 * without the blocked layout has nothing to search: `skipped` says why.
 */
GraphSearchResult search_graph_plan(const graph::Graph& g, const graph::CompileOptions& options, const GraphSearchOptions& search = {});

}  // namespace kiln::tuner

#endif  // KILN_TUNER_GRAPH_SEARCH_H
