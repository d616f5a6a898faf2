/** \file
 * A model's tuned graph plan: the LayoutPlan (channel block cap and largest
 * Winograd tile per convolution, depthwise+pointwise fusion per pair) a graph-level search measured fastest
 * (tuner/graph_search.h), stored in the tuning database beside the records,
 * keyed by the model's key and the hardware, and taken by compile(db=).
 *
 * The plan's text is JSON:
 *   {"version": 1, "max_block": 0, "winograd": 4,
 *    "conv_max_block": {"/layer1/conv1/Conv": 16}, "conv_winograd": {"/layer2/conv2/Conv": 0},
 *    "dwpw_fuse": {"/features.2/conv/conv.1/Conv": false}}
 * dwpw_fuse (per depthwise conv, whether it runs fused with the 1x1 conv after
 * it) is written only where the plan decides a pair, and a plan without it
 * (stored before it existed) reads as deciding none.
 * A plan that cannot be used (its checksum does not match its text, the
 * text does not parse, it names a convolution the model lacks or a cap the
 * target does not offer) is ignored with a warning on stderr naming the
 * database, the model key and the fix: the plan only ever changes speed,
 * never results, so a damaged row should not make a model that compiles
 * without it fail to compile; the records-based choice (choose_layout_plan)
 * takes its place.
 */
#ifndef KILN_GRAPH_TUNED_PLAN_H
#define KILN_GRAPH_TUNED_PLAN_H

#include <optional>
#include <string>
#include <vector>

#include "kiln/graph/layout_plan.h"

namespace kiln {
struct Target;
}

namespace kiln::graph {

class Graph;

/**
 * The key a model's graph plan is stored under: a hash of the printed graph
 * (operators, attributes, types, wiring and node names; constants by type,
 * not data), so re-importing a model, or new weights, keeps the key.
 */
std::string model_key(const Graph& g);

/** The plan's JSON text (keys sorted: equal plans, equal text). likely_sizes is not part of it. */
std::string plan_to_json(const LayoutPlan& plan);
/** Parses plan_to_json's text; a malformed one throws kiln::Error saying what is wrong. */
LayoutPlan plan_from_json(const std::string& text);

/**
 * The names of the convolutions of `g` as alter_conv_layout meets them
 * (after the folding passes before it), in graph order: the names a plan uses.
 */
std::vector<std::string> plan_conv_names(const Graph& g);

/** Throws kiln::Error where `plan` does not fit `g` on `target`: a convolution it names is not one of g's, or a cap is not one of layout_block_choices. */
void check_plan_fits(const LayoutPlan& plan, const Graph& g, const Target& target);

/**
 * The tuned plan stored for `g` on this hardware in `db`, checked (see the
 * file comment); none when there is none or it cannot be used (then a
 * warning on stderr). With `decisions`, one line per convolution saying
 * the plan chose its cap.
 */
std::optional<LayoutPlan> tuned_graph_plan(const Graph& g, const Target& target, const std::string& db,
                                           std::vector<LayoutDecision>* decisions = nullptr);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_TUNED_PLAN_H
