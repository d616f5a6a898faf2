// Automatic sharding (auto_shard.h): the estimate of a sharded graph, the
// choices per parameter and input, and the search over them.
#include "kiln/dist/auto_shard.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "kiln/graph/op_registry.h"
#include "kiln/support/error.h"

namespace kiln::dist {

using namespace graph;

namespace {

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f ms", s * 1e3);
  return buf;
}

std::string mb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MB", bytes / 1e6);
  return buf;
}

std::vector<int64_t> local_dims(const ShardedGraph& sg, const Value& v) {
  return local_shape(v.type().shape, sg.specs.at(v), sg.mesh, v.node->name);
}

int64_t local_bytes(const ShardedGraph& sg, const Value& v) { return TensorType{local_dims(sg, v), v.type().dtype}.bytes(); }

int64_t output_bytes(const ShardedGraph& sg, const OpNode& op) {
  int64_t b = 0;
  for (int o = 0; o < op.num_outputs(); ++o) b += local_bytes(sg, op.output(o));
  return b;
}

// The registry's cost of a rank's share of the op: its OpCost with local input and output types.
OpCost local_cost(const ShardedGraph& sg, const OpNode& op) {
  OpCall call = op_call(op);
  for (size_t i = 0; i < op.inputs.size(); ++i)
    if (op.inputs[i].defined()) call.input_types[i].shape = local_dims(sg, op.inputs[i]);
  std::vector<TensorType> outs;
  for (int o = 0; o < op.num_outputs(); ++o) outs.push_back(TensorType{local_dims(sg, op.output(o)), op.types[o].dtype});
  return op_cost(call, outs);
}

// Seconds and bytes sent of one collective in a ring over its group.
std::pair<double, int64_t> collective_cost(const OpNode& op, const CostParams& c) {
  int64_t n = op.attrs.get_int("size"), result = op.attrs.get_int("bytes");
  if (n <= 1) return {0.0, 0};
  const std::string& name = op.op->name;
  double sent = 0, steps = double(n - 1);
  if (name == "kiln.AllReduce") sent = 2.0 * double(n - 1) / double(n) * double(result), steps *= 2;
  else if (name == "kiln.ReduceScatter") sent = double(n - 1) * double(result);  // (n-1)/n of the n-times larger input
  else sent = double(n - 1) / double(n) * double(result);                         // all-gather, all-to-all
  bool large = c.large_message_bytes > 0 && c.large_link_bytes_per_s > 0 && double(result) > c.large_message_bytes;
  double rate = large ? c.large_link_bytes_per_s : c.link_bytes_per_s, latency = c.latency_s;
  if (!c.axis_links.empty() && op.attrs.has("axis")) {
    auto it = c.axis_links.find(op.attrs.get_string("axis"));
    if (it != c.axis_links.end()) rate = it->second.first, latency = it->second.second;
  }
  return {sent / rate + steps * latency + c.collective_s + c.peer_wait_s, static_cast<int64_t>(sent)};
}

// The GEMM rate for a contraction of this many output rows (OpCost::rows: a
// matmul's M, a conv's batch and spatial dims): flops_per_s, lowered toward
// few_rows_flops_per_s below many_rows rows.
double gemm_rate(double rows, const CostParams& c) {
  if (c.few_rows_flops_per_s <= 0 || c.many_rows <= c.few_rows) return c.flops_per_s;
  if (rows >= c.many_rows) return c.flops_per_s;
  if (rows <= c.few_rows) return c.few_rows_flops_per_s;
  double t = std::log(rows / c.few_rows) / std::log(c.many_rows / c.few_rows);
  return c.few_rows_flops_per_s + t * (c.flops_per_s - c.few_rows_flops_per_s);
}

// A rank's seconds for one non-collective op (by its registry cost): its
// multiply-adds at the GEMM rate, or else the bytes it streams; plus the
// fixed cost of a kernel where it starts one.
double op_seconds(const ShardedGraph& sg, const OpNode& op, const CostParams& c) {
  double s = 0;
  Pattern p = op.op->pattern;
  if (p != Pattern::Elementwise && p != Pattern::Broadcast && p != Pattern::Injective) s += c.kernel_s;
  OpCost cost = local_cost(sg, op);
  if (cost.macs > 0) return s + 2 * cost.macs / gemm_rate(cost.rows, c);
  return s + cost.bytes / c.memory_bytes_per_s;
}

}  // namespace

std::vector<double> op_times(const Graph& g, const CostParams& cost) {
  ShardedGraph sg = shard_graph(g, Mesh({{"one", 1}}), {});
  // shard_graph keeps every op of g (a mesh of one inserts nothing), in the same topo order.
  std::vector<double> out;
  for (const OpNode* op : sg.graph.op_nodes()) out.push_back(op_seconds(sg, *op, cost));
  KILN_CHECK(out.size() == g.op_nodes().size()) << "op_times: the graph changed under a mesh of one";
  return out;
}

std::string PlanEstimate::str() const {
  std::ostringstream os;
  os << ms(total_s()) << " (compute " << ms(compute_s) << " + comm " << ms(comm_s) << ", " << collectives << " collective"
     << (collectives == 1 ? "" : "s") << ", " << mb(comm_bytes) << " sent), memory " << mb(memory_bytes);
  return os.str();
}

PlanEstimate estimate_plan(const ShardedGraph& sg, const CostParams& c) {
  PlanEstimate e;
  std::vector<const OpNode*> ops = sg.graph.op_nodes();
  // Leaves are held for the whole run.
  std::unordered_set<const NodeObj*> leaves;
  for (const auto& in : sg.graph.inputs()) leaves.insert(in.get());
  for (const OpNode* op : ops)
    for (const Value& v : op->inputs)
      if (v.defined() && v.node->kind != NodeKind::Op) leaves.insert(v.node.get());
  for (const NodeObj* n : leaves) e.memory_bytes += local_bytes(sg, n->output());
  // Intermediates live from their op to their last reader (outputs: to the end).
  std::unordered_map<const NodeObj*, size_t> last_use;
  for (size_t i = 0; i < ops.size(); ++i)
    for (const Value& v : ops[i]->inputs)
      if (v.defined() && v.node->kind == NodeKind::Op) last_use[v.node.get()] = i;
  for (const Value& v : sg.graph.outputs()) last_use[v.node.get()] = ops.size();
  // Each op's bytes once; an op nothing reads dies where it is made.
  std::vector<int64_t> made(ops.size());
  std::vector<std::vector<size_t>> dies(ops.size() + 1);
  for (size_t i = 0; i < ops.size(); ++i) {
    made[i] = output_bytes(sg, *ops[i]);
    auto it = last_use.find(ops[i]);
    dies[it == last_use.end() ? i : it->second].push_back(i);
  }
  e.compute_s += c.run_s;
  int64_t live = 0, peak = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpNode& op = *ops[i];
    live += made[i];
    peak = std::max(peak, live);
    for (size_t d : dies[i]) live -= made[d];
    if (is_collective(op.op->name)) {
      auto [s, sent] = collective_cost(op, c);
      e.comm_s += s;
      e.comm_bytes += sent;
      ++e.collectives;
      continue;
    }
    e.compute_s += op_seconds(sg, op, c);
  }
  e.memory_bytes += peak;
  return e;
}

namespace {

// One decision: a value (by name) and the spec texts it may take.
struct Choice {
  std::string name;
  std::vector<std::string> options;  ///< options[0] replicates
  bool batch = false;                ///< a data input (options[1 + a]: its first dim split over axis a)
  std::string type;                  ///< a weight's type: tied weights must agree in it (fc1 and fc2 differ)
};

std::string spec_with(int ndim, int dim, const std::string& split) {
  std::string s;
  for (int d = 0; d < ndim; ++d) s += (d ? " " : "") + (d == dim ? split : std::string("R"));
  return s;
}

// A weight an op's sharding rule names (ShardingRule::weight_splits: a
// MatMul's 2-D B, a Conv's W) gets R / a split of each of its dims per axis;
// other graph inputs R / batch split per axis / over all axes.
// With all_axes (and a mesh of several axes), a weight may also be split over all of them at once
// (each rank a 1/size block, gathered where used: fully sharded data parallel).
std::vector<Choice> choices_of(const Graph& g, const Mesh& mesh, bool all_axes) {
  std::vector<Choice> out;
  std::unordered_set<std::string> weights;
  for (const OpNode* op : g.op_nodes()) {
    const WeightSplitsFn& splits = op->op->sharding.weight_splits;
    WeightSplits ws = splits ? splits(*op) : WeightSplits{};
    if (ws.dims.empty() || ws.input >= static_cast<int>(op->inputs.size()) || !op->inputs[ws.input].defined()) continue;
    const Value& w = op->inputs[ws.input];
    if (w.node->kind == NodeKind::Op || !weights.insert(w.node->name).second) continue;
    int nd = w.type().ndim();
    Choice c{w.node->name, {spec_with(nd, -1, "")}, false, w.type().str()};
    std::string every;
    for (int a = 0; a < mesh.ndim(); ++a) {
      for (int d : ws.dims) c.options.push_back(spec_with(nd, d, "S(" + mesh.axis_name(a) + ")"));
      every += (a ? "," : "") + mesh.axis_name(a);
    }
    if (all_axes && mesh.ndim() > 1)
      for (int d : ws.dims) c.options.push_back(spec_with(nd, d, "S(" + every + ")"));
    out.push_back(c);
  }
  for (const auto& in : g.inputs()) {
    int nd = in->types[0].ndim();
    if (nd == 0 || weights.count(in->name)) continue;
    Choice c{in->name, {spec_with(nd, -1, "")}, true};
    std::string all;
    for (int a = 0; a < mesh.ndim(); ++a) {
      c.options.push_back(spec_with(nd, 0, "S(" + mesh.axis_name(a) + ")"));
      all += (a ? "," : "") + mesh.axis_name(a);
    }
    if (mesh.ndim() > 1) c.options.push_back(spec_with(nd, 0, "S(" + all + ")"));
    out.push_back(c);
  }
  return out;
}

// The name with each run of digits as '#': "h.12.fc1" and "h.3.fc1" are one layer's weight.
std::string layer_pattern(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(name[i]))) {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += name[i];
    }
  }
  return out;
}

// With tie_repeated, the choices of weights with one layer pattern, type and the same options merge into
// one, named by the first, whose pick every member takes (members lists them all). A weight's
// optimizer state ("<weight>.<state>", of its rank) follows the weight's split.
std::vector<Choice> tied(std::vector<Choice> cs, std::vector<std::vector<std::string>>& members) {
  std::vector<Choice> out;
  std::map<std::tuple<std::string, std::string, std::vector<std::string>>, size_t> at;
  std::map<std::string, size_t> weight_at;
  for (Choice& c : cs) {
    if (c.batch) {
      size_t dot = c.name.rfind('.');
      auto w = dot == std::string::npos ? weight_at.end() : weight_at.find(c.name.substr(0, dot));
      if (w != weight_at.end() && out[w->second].options[0] == c.options[0]) {  // the same rank: the same spec texts apply
        members[w->second].push_back(c.name);
        continue;
      }
    } else {
      weight_at[c.name] = 0;  // set below, once its choice is known
    }
    auto key = std::make_tuple(c.batch ? c.name : layer_pattern(c.name), c.type, c.options);
    auto it = at.find(key);
    if (it != at.end()) {
      members[it->second].push_back(c.name);
      if (!c.batch) weight_at[c.name] = it->second;
      continue;
    }
    if (!c.batch) weight_at[c.name] = out.size();
    at[key] = out.size();
    members.push_back({c.name});
    out.push_back(std::move(c));
  }
  return out;
}

struct Scored {
  bool valid = false;
  PlanEstimate est;
  ShardedGraph sg;
};

class Search {
 public:
  Search(const Graph& g, const Mesh& mesh, const AutoShardOptions& o) : g_(g), mesh_(mesh), o_(o), choices_(choices_of(g, mesh, o.weights_over_all_axes)) {
    if (o.tie_repeated) choices_ = tied(choices_, members_);
    else
      for (const Choice& c : choices_) members_.push_back({c.name});
  }

  const std::vector<Choice>& choices() const { return choices_; }
  int evaluated() const { return evaluated_; }
  int64_t least_memory() const { return least_memory_; }

  std::map<std::string, std::string> specs_of(const std::vector<int>& pick) const {
    std::map<std::string, std::string> s;
    for (size_t i = 0; i < choices_.size(); ++i)
      for (const std::string& m : members_[i]) s[m] = choices_[i].options[pick[i]];
    return s;
  }

  std::vector<int> pick_of(const std::map<std::string, std::string>& specs) const {
    std::vector<int> pick(choices_.size(), 0);
    for (size_t i = 0; i < choices_.size(); ++i) {
      auto s = specs.find(choices_[i].name);
      auto it = s == specs.end() ? choices_[i].options.end() : std::find(choices_[i].options.begin(), choices_[i].options.end(), s->second);
      pick[i] = it == choices_[i].options.end() ? 0 : static_cast<int>(it - choices_[i].options.begin());
    }
    return pick;
  }

  Scored score(const std::map<std::string, std::string>& specs) {
    ++evaluated_;
    Scored r;
    try {
      ShardOptions so;
      so.keep_outputs_sharded = o_.keep_outputs_sharded;
      r.sg = shard_graph(g_, mesh_, specs, so);
      r.est = estimate_plan(r.sg, o_.cost);
      r.valid = true;
      least_memory_ = std::min(least_memory_, r.est.memory_bytes);
    } catch (const Error&) {
      // A split that does not divide its dimension: not a plan.
    }
    return r;
  }

  // Lower is better; plans over the memory limit after every plan within it.
  double key(const Scored& s) const {
    if (!s.valid) return std::numeric_limits<double>::infinity();
    if (o_.memory_limit > 0 && s.est.memory_bytes > o_.memory_limit) return 1e30 + double(s.est.memory_bytes);
    return s.est.total_s();
  }

 private:
  const Graph& g_;
  const Mesh& mesh_;
  const AutoShardOptions& o_;
  std::vector<Choice> choices_;
  std::vector<std::vector<std::string>> members_;  ///< per choice, the values it decides
  int evaluated_ = 0;
  int64_t least_memory_ = std::numeric_limits<int64_t>::max();
};

std::vector<std::pair<std::string, std::map<std::string, std::string>>> named_strategies(const Graph& g, const Mesh& mesh,
                                                                                         const std::vector<Choice>& choices) {
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> out;
  std::map<std::string, std::string> rep, data;
  for (const Choice& c : choices) rep[c.name] = c.options[0];
  out.push_back({"replicated", rep});
  int data_axis = 0;
  for (int a = 0; a < mesh.ndim(); ++a)
    if (mesh.axis_name(a) == "data") data_axis = a;
  data = rep;
  bool any_batch = false;
  for (const Choice& c : choices)
    if (c.batch) {
      data[c.name] = c.options[1 + data_axis];
      any_batch = true;
    }
  if (any_batch) out.push_back({"data", data});
  int model_axis = mesh.ndim() - 1;
  for (int a = 0; a < mesh.ndim(); ++a)
    if (mesh.axis_name(a) == "model") model_axis = a;
  std::map<std::string, std::string> tensor = rep;
  for (const auto& [name, spec] : megatron_specs(g, mesh, mesh.axis_name(model_axis))) tensor[name] = spec;
  if (tensor != rep) out.push_back({"tensor", tensor});
  return out;
}

}  // namespace

AutoShardResult auto_shard(const Graph& g, const Mesh& mesh, const AutoShardOptions& o) {
  KILN_USER_CHECK(o.memory_limit >= 0 && o.max_plans >= 1 && o.cost.flops_per_s > 0 && o.cost.memory_bytes_per_s > 0 &&
                  o.cost.link_bytes_per_s > 0 && o.cost.latency_s >= 0 && o.cost.kernel_s >= 0 && o.cost.run_s >= 0 &&
                  o.cost.large_message_bytes >= 0 && o.cost.large_link_bytes_per_s >= 0 && o.cost.few_rows_flops_per_s >= 0 &&
                  o.cost.collective_s >= 0 && o.cost.peer_wait_s >= 0)
      << "auto_shard: memory_limit must be >= 0, max_plans >= 1, the rates positive and latency_s, kernel_s, run_s, collective_s, "
         "peer_wait_s >= 0";
  Search search(g, mesh, o);
  const std::vector<Choice>& cs = search.choices();
  AutoShardResult best;
  double best_key = std::numeric_limits<double>::infinity();
  std::vector<int> best_pick(cs.size(), 0);
  auto consider = [&](const std::vector<int>& pick) {
    std::map<std::string, std::string> specs = search.specs_of(pick);
    Scored s = search.score(specs);
    double k = search.key(s);
    if (k < best_key) {
      best_key = k;
      best_pick = pick;
      best.specs = specs;
      best.sharded = s.sg;
      best.estimate = s.est;
    }
    return k;
  };
  // The named strategies: reported beside the choice, and the start of the descent.
  for (auto [name, specs] : named_strategies(g, mesh, cs)) {
    if (o.tie_repeated) specs = search.specs_of(search.pick_of(specs));  // tied choices: every member as its choice
    Scored s = search.score(specs);
    if (s.valid) best.baselines.push_back({name, s.est});
    std::vector<int> pick(cs.size(), 0);
    for (size_t i = 0; i < cs.size(); ++i) {
      auto it = std::find(cs[i].options.begin(), cs[i].options.end(), specs.at(cs[i].name));
      pick[i] = it == cs[i].options.end() ? 0 : static_cast<int>(it - cs[i].options.begin());
    }
    consider(pick);
  }
  double plans = 1;
  for (const Choice& c : cs) plans *= double(c.options.size());
  best.exhaustive = plans <= o.max_plans;
  if (best.exhaustive) {
    std::vector<int> pick(cs.size(), 0);
    for (;;) {
      consider(pick);
      size_t i = 0;
      while (i < cs.size() && ++pick[i] == static_cast<int>(cs[i].options.size())) pick[i++] = 0;
      if (i == cs.size()) break;
    }
  } else {
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < cs.size(); ++i)
        for (int v = 0; v < static_cast<int>(cs[i].options.size()); ++v) {
          if (v == best_pick[i]) continue;
          std::vector<int> pick = best_pick;
          pick[i] = v;
          double before = best_key;
          if (consider(pick) < before) changed = true;
        }
    }
  }
  best.plans_evaluated = search.evaluated();
  KILN_USER_CHECK(best_key < 1e30) << "auto_shard: no plan on " << mesh.str() << " fits the memory limit of " << mb(o.memory_limit)
                                   << " per rank; the least any plan needs is "
                                   << (search.least_memory() == std::numeric_limits<int64_t>::max() ? std::string("unknown (no valid plan)")
                                                                                                   : mb(search.least_memory()))
                                   << "; raise memory_limit or use a larger mesh";
  return best;
}

std::string AutoShardResult::report(int64_t memory_limit) const {
  std::ostringstream os;
  os << "# auto sharding on " << sharded.mesh.str() << ": " << plans_evaluated << " plans scored ("
     << (exhaustive ? "every combination" : "coordinate descent") << ")\n";
  for (const auto& [name, spec] : specs) os << "#   " << name << ": " << spec << "\n";
  os << "# estimate: " << estimate.str() << "\n";
  for (const auto& [name, e] : baselines) {
    os << "# " << name << ": " << e.str();
    if (memory_limit > 0 && e.memory_bytes > memory_limit) os << " (over the limit of " << mb(memory_limit) << ")";
    os << "\n";
  }
  return os.str();
}

}  // namespace kiln::dist
