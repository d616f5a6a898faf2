// The graph-level search (graph_search.h): moves over a model's LayoutPlan,
// each candidate compiled whole and timed against the incumbent.
#include "kiln/tuner/graph_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "kiln/graph/bind_shapes.h"
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/tuned_plan.h"
#include "kiln/ops/best_record.h"
#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "model_timing.h"

namespace kiln::tuner {

using namespace graph;
using namespace detail;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/** What the moves need to know of one convolution. */
struct ConvInfo {
  std::string name;
  double flop = 0;
  std::string stage;  // its output size, "56x56": convolutions of one stage share their blocks
  int64_t tile = 0;   // the Winograd tile it takes by default (0: direct)
};

std::vector<ConvInfo> conv_infos(const Graph& g, const Target& target, int winograd) {
  Graph pre = eliminate_common_subexpr(fold_batch_norm(fold_constants(fold_transposes(remove_identity(g)))));
  LayoutPlan defaults;
  defaults.winograd = winograd;
  std::map<std::string, int64_t> tiles;
  const Graph blocked = alter_conv_layout(pre, target, defaults);  // a local: op_nodes() points into it
  std::set<std::string> rewritten;  // convolutions the layout pass took (their node keeps the name): the plan touches no other
  for (const OpNode* n : blocked.op_nodes()) {
    if (n->op->name == "kiln.WinogradOutputNCHWc") tiles[n->name] = n->attrs.get_int("tile");
    if (n->op->name.rfind("kiln.", 0) == 0) rewritten.insert(n->name);
  }
  std::vector<ConvInfo> out;
  for (const OpNode* n : pre.op_nodes()) {
    if (n->op->name != "Conv" || n->types.empty() || n->types[0].ndim() != 4 || !rewritten.count(n->name)) continue;
    ConvInfo c;
    c.name = n->name;
    const Shape& y = n->types[0].shape;
    const Shape& w = n->inputs[1].type().shape;
    c.flop = 2.0;
    for (const Dim& d : y) c.flop *= static_cast<double>(d.value());
    for (size_t i = 1; i < w.size(); ++i) c.flop *= static_cast<double>(w[i].value());
    c.stage = std::to_string(y[2].value()) + "x" + std::to_string(y[3].value());
    auto it = tiles.find(n->name);
    c.tile = it == tiles.end() ? 0 : it->second;
    out.push_back(c);
  }
  return out;
}

/** The plan with entries that say nothing dropped, so that equal plans have equal text. */
LayoutPlan normalized(LayoutPlan p) {
  p.likely_sizes.clear();
  for (auto it = p.conv_winograd.begin(); it != p.conv_winograd.end();)
    it = it->second >= p.winograd ? p.conv_winograd.erase(it) : std::next(it);
  if (p.max_block > 0)
    for (auto it = p.conv_max_block.begin(); it != p.conv_max_block.end();)
      it = it->second == p.max_block ? p.conv_max_block.erase(it) : std::next(it);
  return p;
}

/** The depthwise+pointwise pairs of `g` under `plan` (the groups before fuse_depthwise_pointwise merges any), nearest the size rule's threshold first: where the rule is least sure. */
std::vector<DepthwisePointwisePair> dwpw_pairs(const Graph& g, const Target& target, const CompileOptions& options, LayoutPlan plan) {
  if (!options.fuse) return {};
  plan.dwpw_fuse.clear();
  PipelineOptions p{options.fuse, options.layout, false, plan, options.bf16_dot, options.int8};
  p.depthwise_pointwise = 0;
  std::vector<DepthwisePointwisePair> pairs = depthwise_pointwise_pairs(optimize(g, target, p), target, depthwise_pointwise_min_bytes(-1));
  auto distance = [](const DepthwisePointwisePair& a) { return std::fabs(std::log2(std::max<double>(1.0, a.bytes) / kDepthwisePointwiseMinBytes)); };
  std::stable_sort(pairs.begin(), pairs.end(), [&](const auto& a, const auto& b) { return distance(a) < distance(b); });
  return pairs;
}

struct Move {
  std::string label;
  std::function<LayoutPlan(LayoutPlan)> apply;
};

/** The moves, coarse first (graph_search.h); each applies to whatever the incumbent is when its turn comes. */
std::vector<Move> moves_of(const std::vector<ConvInfo>& convs, const std::vector<int64_t>& caps, const std::vector<DepthwisePointwisePair>& pairs) {
  std::vector<Move> moves;
  for (int64_t cap : caps)
    moves.push_back({"every conv at cap " + std::to_string(cap), [cap](LayoutPlan p) {
                       p.max_block = cap;
                       p.conv_max_block.clear();
                       return p;
                     }});
  if (!pairs.empty())
    for (bool fuse : {true, false})
      moves.push_back({fuse ? "every depthwise conv fused with its 1x1 conv" : "every depthwise conv apart from its 1x1 conv", [pairs, fuse](LayoutPlan p) {
                         for (const DepthwisePointwisePair& d : pairs) p.dwpw_fuse[d.depthwise] = fuse;
                         return p;
                       }});
  std::vector<ConvInfo> wino, by_flop = convs;
  std::stable_sort(by_flop.begin(), by_flop.end(), [](const ConvInfo& a, const ConvInfo& b) { return a.flop > b.flop; });
  for (const ConvInfo& c : by_flop)
    if (c.tile > 0) wino.push_back(c);
  if (!wino.empty()) {
    for (int m : {0, 2})
      moves.push_back({m == 0 ? "every Winograd conv direct" : "every Winograd conv at F(2x2) at most", [wino, m](LayoutPlan p) {
                         for (const ConvInfo& c : wino)
                           if (m < c.tile) p.conv_winograd[c.name] = m;
                         return p;
                       }});
  }
  // Each pair the other way from the incumbent's: the size rule's or the plan's decision.
  for (const DepthwisePointwisePair& d : pairs)
    moves.push_back({d.depthwise + " with " + d.pointwise + " the other way (fused or apart)", [d](LayoutPlan p) {
                       auto it = p.dwpw_fuse.find(d.depthwise);
                       p.dwpw_fuse[d.depthwise] = !(it == p.dwpw_fuse.end() ? d.by_rule : it->second);
                       return p;
                     }});
  std::map<std::string, std::vector<std::string>> stages;
  std::vector<std::string> stage_order;
  for (const ConvInfo& c : convs) {
    if (!stages.count(c.stage)) stage_order.push_back(c.stage);
    stages[c.stage].push_back(c.name);
  }
  if (stages.size() > 1)
    for (const std::string& s : stage_order)
      for (int64_t cap : caps)
        moves.push_back({"the " + s + " convs at cap " + std::to_string(cap), [names = stages[s], cap](LayoutPlan p) {
                           for (const std::string& n : names) p.conv_max_block[n] = cap;
                           return p;
                         }});
  for (const ConvInfo& c : wino)
    for (int m : {0, 2, 4})
      if (m <= c.tile)
        moves.push_back({c.name + (m == 0 ? " direct" : " at F(" + std::to_string(m) + "x" + std::to_string(m) + ") at most"), [c, m](LayoutPlan p) {
                           if (m == c.tile) p.conv_winograd.erase(c.name);  // its default
                           else p.conv_winograd[c.name] = m;
                           return p;
                         }});
  for (const ConvInfo& c : by_flop)
    for (int64_t cap : caps)
      moves.push_back({c.name + " at cap " + std::to_string(cap), [c, cap](LayoutPlan p) {
                         p.conv_max_block[c.name] = cap;
                         return p;
                       }});
  return moves;
}

/** The graph a plan compiles to, printed (constants by type: their blocks show, not their data). */
std::string optimized_text(const Graph& g, const Target& target, const CompileOptions& options, const LayoutPlan& plan) {
  PipelineOptions p{options.fuse, options.layout, false, plan, options.bf16_dot, options.int8};
  return optimize(g, target, p).str();
}

}  // namespace

GraphSearchResult search_graph_plan(const Graph& g, const CompileOptions& options, const GraphSearchOptions& search) {
  KILN_USER_CHECK(!options.db.empty()) << "search_graph_plan needs a tuning database to keep its outcomes (db=...)";
  KILN_USER_CHECK(search.rounds > 0 && search.max_candidates >= 0) << "search_graph_plan: rounds must be positive and max_candidates at least 0";
  auto start = Clock::now();
  GraphSearchResult r;
  const Target target = Target::parse(options.target);
  r.model_key = model_key(g);
  if (target.kind != Target::Kind::LLVM) r.skipped = "graph-level choices are made for llvm targets only";
  else if (!options.layout) r.skipped = "the model is compiled without the blocked layout (layout=False)";
  else if (!shape_var_names(g).empty()) r.skipped = "the model has symbolic dimensions";
  const std::vector<ConvInfo> convs = r.skipped.empty() ? conv_infos(g, target, options.layout_plan.winograd) : std::vector<ConvInfo>{};
  if (r.skipped.empty() && convs.empty()) r.skipped = "the model has no convolution in the blocked layout (none, or their weights are not constants)";
  if (!r.skipped.empty()) return r;

  tuning_db::Database db = tuning_db::Database::open(options.db);
  const tuning_db::TargetInfo hw = ops::detail::target_info(target);
  std::map<std::string, tuning_db::GraphCandidate> known;  // "candidate\nagainst" -> outcome
  for (tuning_db::GraphCandidate& c : db.graph_candidates(r.model_key, hw)) known[c.plan + "\n" + c.against] = std::move(c);

  LayoutPlan incumbent;
  if (std::optional<LayoutPlan> tuned = tuned_graph_plan(g, target, options.db)) incumbent = *tuned;
  else incumbent = choose_layout_plan(g, target, options.db, nullptr, options.layout_plan.winograd);
  incumbent.winograd = std::min(incumbent.winograd, options.layout_plan.winograd);
  incumbent = normalized(incumbent);
  r.start_json = plan_to_json(incumbent);
  std::string inc_json = r.start_json;
  double inc_time = 0;

  const std::vector<NDArray> inputs = random_inputs(g, search.seed);
  std::optional<Executor> inc_exe;  // compiled when a candidate is first measured
  std::vector<NDArray> inc_out;
  auto store = [&] {
    tuning_db::GraphPlan p;
    p.model_key = r.model_key;
    p.target = hw;
    p.plan = inc_json;
    if (inc_time > 0) p.time = inc_time;
    if (r.start_time > 0) p.baseline_time = r.start_time;
    db.put_graph_plan(p);
  };
  const std::vector<Move> moves = moves_of(convs, layout_block_choices(target), dwpw_pairs(g, target, options, incumbent));
  r.moves = static_cast<int>(moves.size());
  std::set<std::string> tried;
  std::string inc_graph;  // the incumbent's optimized graph, printed
  for (const Move& m : moves) {
    LayoutPlan cand = normalized(m.apply(incumbent));
    std::string cand_json = plan_to_json(cand);
    if (cand_json == inc_json || !tried.insert(cand_json + "\n" + inc_json).second) continue;
    double ratio = 0, cand_time = 0;
    auto it = known.find(cand_json + "\n" + inc_json);
    if (it != known.end()) {
      ++r.reused;
      ratio = it->second.ratio.value_or(0);
      cand_time = it->second.time.value_or(0);
      r.log.push_back(m.label + ": measured before, " + (ratio > 0 ? std::to_string(ratio).substr(0, 5) + " of the incumbent" : it->second.error_msg));
    } else {
      if (r.measured >= search.max_candidates || (search.time_budget_s > 0 && seconds_since(start) >= search.time_budget_s)) break;
      // A move that compiles to the incumbent's very graph (a cap that gives the same blocks) is nothing to measure.
      if (inc_graph.empty()) inc_graph = optimized_text(g, target, options, incumbent);
      if (optimized_text(g, target, options, cand) == inc_graph) continue;
      ++r.measured;
      tuning_db::GraphCandidate out;
      out.model_key = r.model_key;
      out.target = hw;
      out.plan = cand_json;
      out.against = inc_json;
      std::optional<Executor> cand_exe;
      try {
        if (!inc_exe) {
          inc_exe = compile_under(g, options, incumbent);
          inc_out = inc_exe->run(inputs);
        }
        cand_exe = compile_under(g, options, cand);
        std::string wrong = mismatch(cand_exe->run(inputs), inc_out);
        KILN_USER_CHECK(wrong.empty()) << "wrong result: " << wrong;
        Comparison c;
        compare(*inc_exe, *cand_exe, inputs, search.rounds, search.round_ms, &c);
        ratio = c.decisive();
        // A first set that looks like a win gets a second, which must show the win on its own: pooled, one lucky
        // set of rounds could carry a second that shows none, and a noise win would change the plan.
        if (ratio < 1 - search.min_gain) {
          Comparison again;
          compare(*inc_exe, *cand_exe, inputs, search.rounds, search.round_ms, &again);
          ratio = std::max(ratio, again.decisive());
          c.cand.insert(c.cand.end(), again.cand.begin(), again.cand.end());
          c.inc.insert(c.inc.end(), again.inc.begin(), again.inc.end());
        }
        cand_time = Comparison::median(c.cand);
        inc_time = Comparison::median(c.inc);
        if (r.start_time <= 0) r.start_time = inc_time;
        out.ratio = ratio;
        out.time = cand_time;
      } catch (const Error& e) {
        out.error_msg = e.what();
        cand_exe.reset();
      }
      db.add_graph_candidate(out);
      char line[256];
      if (out.ratio)
        std::snprintf(line, sizeof line, "%.3f of the incumbent (%.3f ms against %.3f ms)", ratio, cand_time * 1e3, inc_time * 1e3);
      else
        std::snprintf(line, sizeof line, "failed: %.180s", out.error_msg.c_str());
      r.log.push_back(m.label + ": " + line);
      if (ratio > 0 && ratio < 1 - search.min_gain && cand_exe) {
        inc_exe = std::move(cand_exe);
        inc_out = inc_exe->run(inputs);
      }
    }
    bool take = ratio > 0 && ratio < 1 - search.min_gain;
    if (search.progress)
      std::fprintf(stderr, "[graph] %d measured, %d reused: %s%s\n", r.measured, r.reused, r.log.back().c_str(), take ? "  -> taken" : "");
    if (!take) continue;
    ++r.taken;
    if (!inc_exe || it != known.end()) inc_exe.reset();  // a reused win: compile the new incumbent when next needed
    incumbent = cand;
    inc_json = cand_json;
    inc_graph.clear();
    inc_time = cand_time;
    store();
  }
  if (r.measured + r.reused > 0) store();
  r.plan = incumbent;
  r.plan_json = inc_json;
  r.time = inc_time;
  return r;
}

}  // namespace kiln::tuner
