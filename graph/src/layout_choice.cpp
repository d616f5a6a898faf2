// choose_layout_plan (layout_plan.h): each convolution's channel block from
// the tuning records of its group under every cap the target allows.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>

#include "kiln/graph/layout_plan.h"
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/to_te.h"
#include "kiln/ops/best_record.h"

namespace kiln::graph {

namespace {

// Used when the database has no LayoutTransform record to measure it by:
// a copy on these machines moves 5-15 GB/s; the low end does not hide a cost.
constexpr double kFallbackBandwidth = 5e9;
// How much less a plan's records must sum to than the default plan's to replace it.
constexpr double kPlanMargin = 0.03;

bool is_conv_group(const std::string& ops) { return ops.rfind("kiln.ConvNCHWc", 0) == 0 || ops.rfind("kiln.DepthwiseConvNCHWc", 0) == 0; }

// The conv a group of a Winograd conv belongs to (alter_conv_layout names
// the output transform as the conv, the others with a suffix), or "".
std::string winograd_conv_of(const OpNode& group) {
  const std::string ops = group.attrs.get_string("ops");
  if (ops.rfind("kiln.Winograd", 0) != 0) return "";
  for (const char* suffix : {".winograd_input", ".winograd_matmul"}) {
    const std::string s = suffix;
    if (group.name.size() > s.size() && group.name.compare(group.name.size() - s.size(), s.size(), s) == 0) return group.name.substr(0, group.name.size() - s.size());
  }
  return group.name;
}

/** What the database says of the groups of `g` optimized under one cap. */
struct PlanTimes {
  std::map<std::string, double> conv_time;  // conv name -> its group's best (0: no record)
  double bandwidth = 0;                     // bytes/s of the best-measured LayoutTransform group
  double total = 0;                         // the sum over every group (0: some group has no record)
};

// The best record of a group (0: none), through a cache by workload key.
double group_time(const OpNode& node, const Target& target, const std::string& db, std::map<std::string, double>* cache) {
  GraphDag dag = to_te(Graph(node.body));
  ops::Task task = ops::make_task(dag.args(), target, node.attrs.get_string("ops"));
  auto it = cache->find(task.workload_key);
  if (it == cache->end()) {
    auto best = ops::best_record(task, db);
    it = cache->emplace(task.workload_key, best ? best->median_time : 0.0).first;
  }
  return it->second;
}

// The groups of `g` under `plan`, each with its best record.
PlanTimes times_under(const Graph& g, const Target& target, const LayoutPlan& plan, const std::string& db, std::map<std::string, double>* cache) {
  PipelineOptions o;
  o.layout_plan = plan;
  Graph fused = optimize(g, target, o);
  PlanTimes out;
  bool complete = true;
  for (const OpNode* node : fused.op_nodes()) {
    std::string ops = node->attrs.get_string("ops");
    double t = group_time(*node, target, db, cache);
    complete = complete && t > 0;
    out.total += t;
    if (ops == "kiln.LayoutTransform") {
      if (t > 0) out.bandwidth = std::max(out.bandwidth, static_cast<double>(node->inputs[0].type().bytes() + node->types[0].bytes()) / t);
    } else if (is_conv_group(ops)) {
      out.conv_time[node->name] = t;
    } else if (std::string conv = winograd_conv_of(*node); !conv.empty()) {
      // A Winograd conv costs its three groups; one without a record has no time.
      auto [it, first] = out.conv_time.emplace(conv, t);
      if (!first) it->second = it->second > 0 && t > 0 ? it->second + t : 0;
    }
  }
  if (!complete) out.total = 0;
  return out;
}

/** The convolution whose output (through elementwise ops and pools) feeds `v`, or nullptr. */
const OpNode* producer_conv(const Value& v, int depth = 8) {
  if (!v.defined() || v.node->kind != NodeKind::Op || depth == 0) return nullptr;
  const auto& op = static_cast<const OpNode&>(*v.node);
  if (op.op->name == "Conv") return &op;
  bool passes_blocks = op.op->pattern <= Pattern::Broadcast || op.op->name == "MaxPool" || op.op->name == "AveragePool";
  if (!passes_blocks) return nullptr;
  for (const Value& in : op.inputs)
    if (const OpNode* c = producer_conv(in, depth - 1)) return c;
  return nullptr;
}

/** The block a cap gives a convolution's input (in) or output (out) channels: alter_conv_layout's rule. */
int64_t conv_block(const OpNode& conv, bool out, int64_t cap, int64_t lanes) {
  int64_t channels = out ? conv.types[0].shape[1] : conv.inputs[0].type().shape[1];
  return channel_block_for(channels, cap, lanes);
}

}  // namespace

LayoutPlan choose_layout_plan(const Graph& g, const Target& target, const std::string& db, std::vector<LayoutDecision>* decisions, int winograd) {
  auto uniform = [winograd](int64_t cap) {
    LayoutPlan p{cap, {}};
    p.winograd = winograd;
    return p;
  };
  LayoutPlan plan = uniform(0);
  if (db.empty() || !std::filesystem::exists(db) || target.kind != Target::Kind::LLVM) return plan;
  const std::vector<int64_t> caps = layout_block_choices(target);
  const int64_t lanes = caps.front(), fallback_cap = caps.back();
  std::map<std::string, double> cache;
  std::vector<PlanTimes> times;
  double bandwidth = 0;
  for (int64_t cap : caps) {
    times.push_back(times_under(g, target, uniform(cap), db, &cache));
    bandwidth = std::max(bandwidth, times.back().bandwidth);
  }
  if (bandwidth <= 0) bandwidth = kFallbackBandwidth;
  // The convolutions in graph order, as the layout pass meets them.
  Graph pre = eliminate_common_subexpr(fold_batch_norm(fold_constants(fold_transposes(remove_identity(g)))));
  std::vector<LayoutDecision> mixed;
  std::map<std::string, int64_t> default_caps;  // per conv, its cap without records
  for (const OpNode* conv : pre.op_nodes()) {
    if (conv->op->name != "Conv" || conv->types.empty() || conv->types[0].ndim() != 4) continue;
    const OpNode* prev = producer_conv(conv->inputs[0]);
    int64_t prev_block = prev ? conv_block(*prev, true, plan.cap_of(prev->name, fallback_cap), lanes) : 0;
    LayoutDecision d;
    d.conv = conv->name;
    d.cap = default_caps[d.conv] = default_conv_cap(*conv, target);
    d.why = "default (no record)";
    double best = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < caps.size(); ++i) {
      auto it = times[i].conv_time.find(conv->name);
      if (it == times[i].conv_time.end() || it->second <= 0) continue;
      // A producer blocked otherwise costs a relayout of this input (there and back through its block).
      bool relayout = prev_block > 0 && prev_block != conv_block(*conv, false, caps[i], lanes);
      double transform = relayout ? 2.0 * static_cast<double>(conv->inputs[0].type().bytes()) / bandwidth : 0;
      if (it->second + transform < best) {
        best = it->second + transform;
        d.cap = caps[i];
        d.conv_time = it->second;
        d.transform_time = transform;
        d.why = "records";
      }
    }
    plan.conv_max_block[conv->name] = d.cap;
    mixed.push_back(d);
  }
  // The per-conv choice changes the graph beyond each conv: a residual Add
  // between convs blocked differently no longer fuses into the conv, and
  // relayouts appear, all as groups the tuning never saw. So every
  // candidate plan (the per-conv one, and each cap for all convs, which is
  // what tuning measured) is costed by the records of every group it
  // compiles to, and the cheapest one whose groups all have a record wins.
  // The default plan (what compiling without records runs) is tuned too,
  // a candidate of its own where it is not one of the uniform ones.
  struct Candidate {
    LayoutPlan plan;
    std::string why;
    double total;  // the sum of its groups' best records (0: some group has none)
  };
  std::vector<Candidate> candidates = {{plan, "per-conv choice", times_under(g, target, plan, db, &cache).total}};
  for (size_t i = 0; i < caps.size(); ++i)
    candidates.push_back({uniform(caps[i]), "every conv at cap " + std::to_string(caps[i]), times[i].total});
  LayoutPlan defaults = default_layout_plan(g, target);
  defaults.winograd = winograd;
  size_t default_index = candidates.size();
  if (defaults.max_block == 0) {
    candidates.push_back({defaults, "the default caps", times_under(g, target, defaults, db, &cache).total});
  } else {
    for (size_t i = 0; i < caps.size(); ++i)
      if (caps[i] == defaults.max_block) default_index = 1 + i;
  }
  double best_total = 0;
  size_t pick = candidates.size();
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].total > 0 && (pick == candidates.size() || candidates[i].total < best_total)) best_total = candidates[i].total, pick = i;
  // The default plan is the incumbent: records timed alone, each on its own
  // noisy day, must promise a clear gain before the graph is changed.
  if (pick < candidates.size() && default_index < candidates.size() && candidates[default_index].total > 0 &&
      best_total > (1 - kPlanMargin) * candidates[default_index].total)
    best_total = candidates[default_index].total, pick = default_index;
  if (pick == candidates.size()) {
    // No plan has a record for each of its groups: the default, as untuned.
    if (decisions) {
      for (LayoutDecision d : mixed) {
        d.cap = default_caps.at(d.conv), d.conv_time = d.transform_time = 0, d.why = "default (no plan has a record for every group)";
        decisions->push_back(d);
      }
    }
    return uniform(0);
  }
  const LayoutPlan& chosen = candidates[pick].plan;
  if (decisions) {
    for (LayoutDecision d : mixed) {
      if (pick != 0) {
        d.cap = chosen.cap_of(d.conv, default_caps.at(d.conv));
        d.transform_time = 0;
        d.conv_time = 0;
        for (size_t i = 0; i < caps.size(); ++i) {
          auto it = times[i].conv_time.find(d.conv);
          if (caps[i] == d.cap && it != times[i].conv_time.end()) d.conv_time = it->second;
        }
      }
      char total[64];
      std::snprintf(total, sizeof total, " (plan total %.3f ms)", best_total * 1e3);
      d.why = candidates[pick].why + total;
      decisions->push_back(d);
    }
  }
  return chosen;
}

}  // namespace kiln::graph
