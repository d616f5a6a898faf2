// fuse_ops and wrap_ops (passes.h): operator fusion by post-dominators.
//
// For each operator, in topo order, its immediate post-dominator d is the
// first node every path from it to the graph's outputs passes through. The
// operator's group may take every node on those paths (and d) when they are
// light enough for the group's kind:
//  - a group led by a conv/matmul or a reduction takes elementwise and
//    broadcast nodes (its epilogue: bias, residual add, activation);
//  - an elementwise/broadcast/injective group takes injective nodes, and may
//    end in a reduction (the reduction reads its producers inline).
// Taking whole paths to d keeps every intermediate value inside its group.
// Groups then become "kiln.fused" nodes, in a topological order of groups.
#include <algorithm>
#include <map>
#include <set>
#include <functional>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/support/error.h"

namespace kiln::graph {

namespace {

const OpDef& fused_op() {
  static const OpDef& def = register_op([] {
    OpDef d;
    d.name = "kiln.fused";
    d.doc = "a fused group: runs its body as one kernel (made by fuse_ops)";
    d.min_inputs = 0;
    d.max_inputs = 1 << 20;
    d.pattern = Pattern::Opaque;
    d.sharding = replicated_rule();  // made after distribution (each rank compiles its own graph)
    d.infer = [](const OpCall& call) -> std::vector<TensorType> { call.fail("kiln.fused nodes are made by fuse_ops, with their body"); };
    return d;
  }());
  return def;
}

struct Grouping {
  std::vector<const OpNode*> nodes;  // topo order
  std::vector<int> group;            // per node: its group id (a representative node)
};

// Rebuilds g with one kiln.fused node per group.
Graph build_groups(const Graph& g, const Grouping& gr) {
  const auto& nodes = gr.nodes;
  std::unordered_map<const NodeObj*, int> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = static_cast<int>(i);
  auto group_of_value = [&](const Value& v) -> int {
    auto it = v.defined() ? index.find(v.node.get()) : index.end();
    return it == index.end() ? -1 : gr.group[it->second];
  };
  // Members per group, and which member outputs leave their group.
  std::map<int, std::vector<int>> members;
  for (size_t i = 0; i < nodes.size(); ++i) members[gr.group[i]].push_back(static_cast<int>(i));
  std::unordered_set<const NodeObj*> graph_out_nodes;
  std::set<std::pair<const NodeObj*, int>> escaping;
  for (const Value& v : g.outputs()) escaping.insert({v.node.get(), v.index});
  std::unordered_map<int, std::set<int>> deps;  // group -> groups it reads
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value& v : nodes[i]->inputs) {
      int pg = group_of_value(v);
      if (pg >= 0 && pg != gr.group[i]) {
        escaping.insert({v.node.get(), v.index});
        deps[gr.group[i]].insert(pg);
      }
    }
  // Groups in a topological order (Kahn; ties by first member, so the order follows the graph's).
  std::vector<int> order;
  std::map<int, int> pending;
  std::map<int, std::vector<int>> readers;
  for (auto& [gid, m] : members) {
    pending[gid] = static_cast<int>(deps[gid].size());
    for (int d : deps[gid]) readers[d].push_back(gid);
  }
  std::set<std::pair<int, int>> ready;  // (first member, group)
  for (auto& [gid, n] : pending)
    if (n == 0) ready.insert({members[gid].front(), gid});
  while (!ready.empty()) {
    int gid = ready.begin()->second;
    ready.erase(ready.begin());
    order.push_back(gid);
    for (int r : readers[gid])
      if (--pending[r] == 0) ready.insert({members[r].front(), r});
  }
  KILN_CHECK(order.size() == members.size()) << "fusion made a cycle between groups";

  std::unordered_map<const NodeObj*, std::vector<Value>> mapped;  // original op node -> new outputs
  auto outer = [&](const Value& v) -> Value {
    if (!v.defined()) return v;
    auto it = mapped.find(v.node.get());
    return it == mapped.end() ? v : it->second[v.index];
  };
  for (int gid : order) {
    const std::vector<int>& m = members[gid];
    std::vector<Value> ext;  // external (non-constant) inputs, original values, in order of first use
    std::vector<Ref<InputNode>> body_inputs;
    std::unordered_map<const NodeObj*, std::vector<Value>> inner;
    auto body_value = [&](const Value& v) -> Value {
      if (!v.defined() || v.node->kind == NodeKind::Constant) return v;
      if (group_of_value(v) == gid) return inner.at(v.node.get())[v.index];
      for (size_t k = 0; k < ext.size(); ++k)
        if (ext[k] == v) return body_inputs[k]->output();
      ext.push_back(v);
      std::string name = v.node->name + (v.node->num_outputs() > 1 ? ":" + std::to_string(v.index) : "");
      if (name.empty()) name = "in" + std::to_string(ext.size() - 1);
      // Node names need not be unique (a Builder names nodes by their op); a body's inputs must be.
      for (const auto& b : body_inputs)
        if (b->name == name) name += "#" + std::to_string(ext.size() - 1);
      body_inputs.push_back(make_input(name, v.type()));
      return body_inputs.back()->output();
    };
    std::vector<Value> body_outputs, escaping_values;
    std::string ops;
    for (int i : m) {
      const OpNode& n = *nodes[i];
      std::vector<Value> in;
      for (const Value& v : n.inputs) in.push_back(body_value(v));
      Ref<OpNode> copy(new OpNode(n.name, n.op, n.attrs, std::move(in), n.types, n.body));
      std::vector<Value> outs;
      for (int k = 0; k < n.num_outputs(); ++k) {
        outs.push_back(copy->output(k));
        if (escaping.count({&n, k})) {
          body_outputs.push_back(outs.back());
          escaping_values.push_back(n.output(k));
        }
      }
      inner[&n] = std::move(outs);
      ops += (ops.empty() ? "" : "+") + n.op->name;
    }
    std::vector<Value> outer_inputs;
    for (const Value& v : ext) outer_inputs.push_back(outer(v));
    std::vector<TensorType> types;
    for (const Value& v : body_outputs) types.push_back(v.type());
    Graph body = Graph::make(body_inputs, body_outputs);
    Attrs attrs;
    attrs.set("ops", ops);
    Ref<OpNode> fused(new OpNode(nodes[m.front()]->name, &fused_op(), attrs, std::move(outer_inputs), std::move(types), body));
    for (size_t k = 0; k < escaping_values.size(); ++k) {
      auto& slot = mapped[escaping_values[k].node.get()];
      slot.resize(escaping_values[k].node->num_outputs());
      slot[escaping_values[k].index] = fused->output(static_cast<int>(k));
    }
  }
  std::vector<Value> outputs;
  for (const Value& v : g.outputs()) outputs.push_back(outer(v));
  return Graph::make(g.inputs(), std::move(outputs), g.output_names());
}

}  // namespace

Graph wrap_ops(const Graph& g) {
  Grouping gr;
  gr.nodes = g.op_nodes();
  gr.group.resize(gr.nodes.size());
  std::iota(gr.group.begin(), gr.group.end(), 0);
  return build_groups(g, gr);
}

Graph fuse_ops(const Graph& g, int max_group_size) {
  Grouping gr;
  gr.nodes = g.op_nodes();
  const auto& nodes = gr.nodes;
  int n = static_cast<int>(nodes.size());
  std::unordered_map<const NodeObj*, int> index;
  for (int i = 0; i < n; ++i) index[nodes[i]] = i;
  std::vector<std::vector<int>> consumers(n);
  std::vector<bool> is_output(n, false);
  for (int i = 0; i < n; ++i)
    for (const Value& v : nodes[i]->inputs) {
      auto it = v.defined() ? index.find(v.node.get()) : index.end();
      if (it != index.end() && (consumers[it->second].empty() || consumers[it->second].back() != i)) consumers[it->second].push_back(i);
    }
  for (const Value& v : g.outputs()) {
    auto it = index.find(v.node.get());
    if (it != index.end()) is_output[it->second] = true;
  }
  // Immediate post-dominators (-1: only the graph's exit), in reverse topo order.
  std::vector<int> ipdom(n, -1), depth(n, 0);
  auto lca = [&](int a, int b) {
    while (a != b) {
      if (a < 0 || b < 0) return -1;
      if (depth[a] >= depth[b]) a = ipdom[a]; else b = ipdom[b];
    }
    return a;
  };
  for (int i = n - 1; i >= 0; --i) {
    if (is_output[i] || consumers[i].empty()) continue;
    int d = consumers[i][0];
    for (size_t k = 1; k < consumers[i].size() && d >= 0; ++k) d = lca(d, consumers[i][k]);
    ipdom[i] = d;
    depth[i] = d < 0 ? 0 : depth[d] + 1;
  }
  // Union-find over nodes; the root keeps the group's pattern and size.
  gr.group.resize(n);
  std::iota(gr.group.begin(), gr.group.end(), 0);
  std::function<int(int)> find = [&](int x) { return gr.group[x] == x ? x : gr.group[x] = find(gr.group[x]); };
  std::vector<Pattern> pattern(n);
  std::vector<int> size(n, 1);
  for (int i = 0; i < n; ++i) pattern[i] = pattern_of(*nodes[i]);
  auto unite = [&](int a, int b) {
    a = find(a), b = find(b);
    if (a == b) return;
    if (a > b) std::swap(a, b);  // the earliest member represents the group
    gr.group[b] = a;
    pattern[a] = std::max(pattern[a], pattern[b]);
    size[a] += size[b];
  };
  for (int i = 0; i < n; ++i) {
    int d = ipdom[i];
    if (d < 0) continue;
    Pattern gp = pattern[find(i)];
    if (gp == Pattern::Opaque || pattern_of(*nodes[d]) == Pattern::Opaque) continue;
    bool heavy = gp == Pattern::OutputFusable || gp == Pattern::Reduction;
    // Every node strictly between i and d, by a walk along consumers that stops at d.
    std::vector<int> path, stack(consumers[i].begin(), consumers[i].end());
    std::unordered_set<int> seen;
    bool ok = true;
    while (!stack.empty() && ok) {
      int x = stack.back();
      stack.pop_back();
      if (x == d || !seen.insert(x).second) continue;
      path.push_back(x);
      Pattern px = pattern[find(x)];
      ok = heavy ? px <= Pattern::Broadcast : px <= Pattern::Injective;
      stack.insert(stack.end(), consumers[x].begin(), consumers[x].end());
    }
    Pattern pd = pattern[find(d)];
    if (heavy) ok = ok && pd <= Pattern::Broadcast;
    else ok = ok && (pd <= Pattern::Injective || pd == Pattern::Reduction);
    int total = size[find(i)] + size[find(d)];
    for (int x : path) total += find(x) == find(i) ? 0 : size[find(x)];
    if (!ok || total > max_group_size) continue;
    for (int x : path) unite(i, x);
    unite(i, d);
  }
  for (int i = 0; i < n; ++i) gr.group[i] = find(i);
  return build_groups(g, gr);
}

}  // namespace kiln::graph
