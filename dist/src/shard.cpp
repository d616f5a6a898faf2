// The distribution pass: spec propagation over the graph, producers first,
// with resharding ops inserted where a consumer needs another spec than its
// producer gives (see shard.h), and the dump with specs.
#include <algorithm>
#include <set>
#include <sstream>
#include <unordered_set>

#include "kiln/dist/shard.h"
#include "kiln/graph/op_registry.h"
#include "kiln/graph/rewrite.h"
#include "kiln/support/error.h"

namespace kiln::dist {

using namespace graph;

namespace {

// The node's rule from its registry entry; an op without one is refused, not guessed.
const ShardingRule& rule_of(const OpNode& node) {
  const ShardingRule& rule = node.op->sharding;
  KILN_USER_CHECK(rule.defined()) << "kiln.dist.shard: " << node.op->name << " node '" << node.name << "' cannot be distributed: the operator " << node.op->name
                                  << " has no sharding rule; register a sharding rule in its OpDef (OpDef::sharding, e.g. replicated_rule() to gather "
                                     "its inputs, elementwise_rule(), or its own: kiln/graph/sharding_rule.h)";
  return rule;
}

bool is_prefix(const std::vector<int>& p, const std::vector<int>& v) {
  return p.size() <= v.size() && std::equal(p.begin(), p.end(), v.begin());
}

class Sharder {
 public:
  Sharder(const Mesh& mesh, SpecMap& specs) : mesh_(mesh), specs_(specs) {}

  // The value with spec `to`, made from `v` (spec `from`) by collectives and local slices.
  Value reshard(Value v, const ShardingSpec& to) {
    ShardingSpec cur = specs_.at(v);
    if (cur == to) return v;
    std::string key = to.str(mesh_);
    auto memo = memo_.find({v, key});
    if (memo != memo_.end()) return memo->second;
    Value start = v;
    // 1. Pending sums: a reduce-scatter when the target splits a dim on that axis next, else an all-reduce.
    for (int a : std::vector<int>(cur.partial)) {
      if (to.is_partial(a)) continue;
      cur.partial.erase(std::find(cur.partial.begin(), cur.partial.end(), a));
      int d = to.dim_of_axis(a);
      if (d >= 0 && is_prefix(cur.dims[d], to.dims[d]) && to.dims[d][cur.dims[d].size()] == a) {
        cur.dims[d].push_back(a);
        v = emit("kiln.ReduceScatter", v, a, cur, {{"dim", int64_t{d}}});
      } else {
        v = emit("kiln.AllReduce", v, a, cur, {});
      }
    }
    // 2. Splits the target does not have: an all-to-all when the axis moves to a dim that can take it next, else an all-gather.
    for (int d = 0; d < cur.ndim(); ++d) {
      while (!is_prefix(cur.dims[d], to.dims[d])) {
        int a = cur.dims[d].back();
        cur.dims[d].pop_back();
        int e = to.dim_of_axis(a);
        if (e >= 0 && e != d && is_prefix(cur.dims[e], to.dims[e]) && to.dims[e][cur.dims[e].size()] == a) {
          cur.dims[e].push_back(a);
          v = emit("kiln.AllToAll", v, a, cur, {{"split_dim", int64_t{e}}, {"concat_dim", int64_t{d}}});
        } else {
          v = emit("kiln.AllGather", v, a, cur, {{"dim", int64_t{d}}});
        }
      }
    }
    // 3. Splits the target adds: each rank keeps its block (free).
    for (int d = 0; d < cur.ndim(); ++d)
      while (cur.dims[d].size() < to.dims[d].size()) {
        int a = to.dims[d][cur.dims[d].size()];
        cur.dims[d].push_back(a);
        v = emit("kiln.Shard", v, a, cur, {{"dim", int64_t{d}}});
      }
    // 4. A sum the target wants pending: one rank of the axis keeps the value, the others zero.
    for (int a : to.partial)
      if (!cur.is_partial(a)) {
        cur.partial.push_back(a);
        std::sort(cur.partial.begin(), cur.partial.end());
        v = emit("kiln.ToPartial", v, a, cur, {});
      }
    KILN_CHECK(cur == to) << "resharding ended at " << cur.str(mesh_) << " instead of " << to.str(mesh_);
    memo_[{start, key}] = v;
    return v;
  }

 private:
  Value emit(const std::string& op, Value v, int axis, const ShardingSpec& result, std::map<std::string, AttrValue> extra) {
    const TensorType& t = v.type();
    std::vector<int64_t> ls = local_shape(t.shape, result, mesh_, "value of '" + v.node->name + "'");
    int64_t bytes = TensorType{ls, t.dtype}.bytes();
    std::map<std::string, AttrValue> attrs{{"axis", mesh_.axis_name(axis)}, {"size", int64_t{mesh_.axis_size(axis)}}, {"local", int64_t{0}}};
    if (is_collective(op)) attrs["bytes"] = bytes;
    for (auto& [k, x] : extra) attrs[k] = x;
    Value out = make_op(op, {v}, Attrs(attrs), op.substr(5) + "(" + v.node->name + ")")->output();
    specs_[out] = result;
    return out;
  }

  struct KeyHash {
    size_t operator()(const std::pair<Value, std::string>& k) const { return ValueHash()(k.first) ^ std::hash<std::string>()(k.second); }
  };
  const Mesh& mesh_;
  SpecMap& specs_;
  std::unordered_map<std::pair<Value, std::string>, Value, KeyHash> memo_;
};

}  // namespace

ShardedGraph shard_graph(const Graph& g, const Mesh& mesh, const std::map<std::string, std::string>& given, const ShardOptions& options) {
  ShardedGraph sg{mesh, Graph(), {}};
  SpecMap& specs = sg.specs;
  std::unordered_set<const NodeObj*> free;  // leaves whose spec the first consumer picks
  std::set<std::string> used;
  std::unordered_map<const NodeObj*, Ref<NodeObj>> remap;
  Sharder sharder(mesh, specs);
  std::map<std::pair<const NodeObj*, std::string>, Value> weight_copies;
  for (const auto& n : g.topo_order()) {
    if (n->kind != NodeKind::Op) {
      Value v = n->output();
      auto it = given.find(n->name);
      if (it != given.end()) {
        used.insert(n->name);
        ShardingSpec s = parse_spec(it->second, mesh, n->types[0].ndim(), "'" + n->name + "'");
        KILN_USER_CHECK(s.partial.empty()) << "kiln.dist.shard: the spec of '" << n->name << "' (" << it->second
                                           << ") has partial sums; inputs and weights are given whole or split (R / S(axis))";
        local_shape(n->types[0].shape, s, mesh, "'" + n->name + "'");  // checks divisibility
        specs[v] = s;
      } else {
        specs[v] = ShardingSpec::replicated(n->types[0].ndim());
        free.insert(n.get());
      }
      remap[n.get()] = n;
      continue;
    }
    const auto& node = static_cast<const OpNode&>(*n);
    std::vector<Value> ins;
    for (const Value& v : node.inputs) ins.push_back(v.defined() ? Value{remap.at(v.node.get()), v.index} : Value{});
    Ref<OpNode> cur = with_inputs(node, ins);
    RuleInput ri{*cur, mesh, {}, {}};
    for (size_t i = 0; i < ins.size(); ++i) {
      ri.in.push_back(ins[i].defined() ? specs.at(ins[i]) : ShardingSpec{});
      ri.free.push_back(ins[i].defined() && free.count(ins[i].node.get()));
    }
    RuleOutput ro = rule_of(node).propagate(ri);
    bool changed = false;
    for (size_t i = 0; i < ins.size(); ++i) {
      if (!ins[i].defined() || node.op->reads_at_compile_time(static_cast<int>(i))) continue;
      ShardingSpec need = ro.in[i];
      if (ri.free[i] && need.partial.empty()) {
        specs[ins[i]] = need;  // the consumer constrains the leaf: weights get sliced, not gathered
        free.erase(ins[i].node.get());
      } else if (specs.at(ins[i]) != need) {
        if (ri.free[i]) free.erase(ins[i].node.get());
        if (ins[i].node->kind == NodeKind::Constant && need.partial.empty()) {
          // A weight wanted another way costs nothing: the same data (by reference) as a second constant, sliced its own way.
          auto key = std::make_pair(ins[i].node.get(), need.str(mesh));
          auto it = weight_copies.find(key);
          if (it == weight_copies.end()) {
            const auto& c = static_cast<const ConstantNode&>(*ins[i].node);
            Value copy = make_constant(c.name, c.data)->output();
            specs[copy] = need;
            it = weight_copies.emplace(key, copy).first;
          }
          ins[i] = it->second;
        } else {
          ins[i] = sharder.reshard(ins[i], need);
        }
        changed = true;
      }
    }
    if (changed) cur = with_inputs(*cur, ins);
    for (int o = 0; o < cur->num_outputs(); ++o) specs[cur->output(o)] = ro.out[o];
    remap[n.get()] = cur;
  }
  for (const auto& [name, spec] : given)
    KILN_USER_CHECK(used.count(name)) << "kiln.dist.shard: specs name '" << name << "', which is no input or weight of the graph";
  std::vector<Value> outs;
  for (const Value& v : g.outputs()) {
    Value nv{remap.at(v.node.get()), v.index};
    free.erase(nv.node.get());
    ShardingSpec need = options.keep_outputs_sharded ? specs.at(nv).without_partial() : ShardingSpec::replicated(nv.type().ndim());
    outs.push_back(sharder.reshard(nv, need));
  }
  sg.graph = Graph::make(g.inputs(), outs, g.output_names());
  return sg;
}

ShardedGraph reshard_graph(const TensorType& t, const Mesh& mesh, const std::string& from, const std::string& to) {
  ShardedGraph sg{mesh, Graph(), {}};
  auto x = make_input("x", t);
  sg.specs[x->output()] = parse_spec(from, mesh, t.ndim(), "the input");
  local_shape(t.shape, sg.specs[x->output()], mesh, "the input");
  ShardingSpec target = parse_spec(to, mesh, t.ndim(), "the output");
  local_shape(t.shape, target, mesh, "the output");
  Sharder sharder(mesh, sg.specs);
  sg.graph = Graph::make({x}, {sharder.reshard(x->output(), target)});
  return sg;
}

std::string ShardedGraph::str() const {
  // The graph printer's format, with each value's spec after its type.
  std::ostringstream os;
  std::unordered_map<const NodeObj*, std::string> names;
  auto name_of = [&](const Value& v) {
    if (!v.defined()) return std::string("_");
    std::string base = names.at(v.node.get());
    return v.node->num_outputs() > 1 ? base + "." + std::to_string(v.index) : base;
  };
  auto spec_of = [&](const Value& v) {
    auto it = specs.find(v);
    return it == specs.end() ? std::string("?") : it->second.str(mesh);
  };
  os << "sharded graph on " << mesh.str() << " (";
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    const auto& in = graph.inputs()[i];
    names[in.get()] = "%" + in->name;
    os << (i ? ", " : "") << "%" << in->name << ": " << in->types[0].str() << " " << spec_of(in->output());
  }
  os << ") {\n";
  int next = 0, constants = 0;
  for (const auto& n : graph.topo_order()) {
    if (n->kind == NodeKind::Input) continue;
    if (n->kind == NodeKind::Constant) {
      names[n.get()] = "%c" + std::to_string(constants++);
      os << "  " << names[n.get()] << " = constant " << n->types[0].str() << "  " << spec_of(n->output()) << "  # " << n->name << "\n";
      continue;
    }
    const auto& op = static_cast<const OpNode&>(*n);
    names[n.get()] = "%" + std::to_string(next++);
    os << "  " << names[n.get()] << " = " << op.op->name << "(";
    for (size_t i = 0; i < op.inputs.size(); ++i) os << (i ? ", " : "") << name_of(op.inputs[i]);
    os << ")";
    Attrs shown = op.attrs;
    if (op.op->name.rfind("kiln.", 0) == 0) {
      // The global graph's collectives: local and size say nothing a reader needs here.
      std::map<std::string, AttrValue> a = shown.values();
      a.erase("local");
      a.erase("size");
      if (!is_collective(op.op->name)) a.erase("bytes");
      shown = Attrs(a);
    }
    if (!shown.values().empty()) os << " {" << shown.str() << "}";
    os << " :";
    for (int o = 0; o < op.num_outputs(); ++o) os << (o ? "," : "") << " " << op.types[o].str() << " " << spec_of(op.output(o));
    os << "\n";
  }
  os << "  return ";
  for (size_t i = 0; i < graph.outputs().size(); ++i) os << (i ? ", " : "") << name_of(graph.outputs()[i]);
  os << "\n}";
  return os.str();
}

}  // namespace kiln::dist
