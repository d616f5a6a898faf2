// Structural equality and hashing of graphs: two graphs are equal when their
// nodes, in topo order, have the same operators, attributes, types, wiring
// (by position, not name) and constant bytes. Names do not count, so a graph
// and its re-import compare equal, and a pass that changes nothing can be
// recognised in tests.
#include <cstring>
#include <unordered_map>

#include "kiln/graph/graph.h"
#include "kiln/graph/op_registry.h"

namespace kiln::graph {

namespace {

uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ULL + (h >> 29); }

uint64_t hash_bytes(const void* p, int64_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* b = static_cast<const unsigned char*>(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, b + i, 8);
    h = mix(h, w);
  }
  for (; i < n; ++i) h = mix(h, b[i]);
  return h;
}

uint64_t hash_type(uint64_t h, const TensorType& t) {
  h = mix(h, hash_bytes(t.dtype.str().data(), static_cast<int64_t>(t.dtype.str().size())));
  for (int64_t d : t.shape) h = mix(h, static_cast<uint64_t>(d));
  return mix(h, t.shape.size());
}

uint64_t hash_graph(const Graph& g) {
  std::unordered_map<const NodeObj*, uint64_t> index;
  uint64_t h = mix(0, g.inputs().size());
  for (const auto& in : g.inputs()) h = hash_type(h, in->types[0]);
  for (const auto& n : g.topo_order()) {
    index[n.get()] = index.size();
    h = mix(h, static_cast<uint64_t>(n->kind));
    for (const TensorType& t : n->types) h = hash_type(h, t);
    if (n->kind == NodeKind::Constant) {
      const NDArray& d = static_cast<const ConstantNode&>(*n).data;
      h = mix(h, hash_bytes(d.data(), d.nbytes()));
    } else if (n->kind == NodeKind::Op) {
      const auto& op = static_cast<const OpNode&>(*n);
      h = mix(h, hash_bytes(op.op->name.data(), static_cast<int64_t>(op.op->name.size())));
      std::string attrs = op.attrs.str();
      h = mix(h, hash_bytes(attrs.data(), static_cast<int64_t>(attrs.size())));
      for (const Value& v : op.inputs) h = mix(h, v.defined() ? index.at(v.node.get()) * 64 + v.index : ~0ULL);
      if (op.body.defined()) h = mix(h, hash_graph(Graph(op.body)));
    }
  }
  for (const Value& v : g.outputs()) h = mix(h, index.at(v.node.get()) * 64 + v.index);
  return h;
}

bool same_bytes(const NDArray& a, const NDArray& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

bool equal_graph(const Graph& a, const Graph& b) {
  if (a.inputs().size() != b.inputs().size() || a.outputs().size() != b.outputs().size()) return false;
  auto ta = a.topo_order(), tb = b.topo_order();
  if (ta.size() != tb.size()) return false;
  std::unordered_map<const NodeObj*, size_t> ia, ib;
  for (size_t i = 0; i < ta.size(); ++i) {
    ia[ta[i].get()] = i;
    ib[tb[i].get()] = i;
  }
  auto same_value = [&](const Value& x, const Value& y) {
    if (x.defined() != y.defined()) return false;
    return !x.defined() || (ia.at(x.node.get()) == ib.at(y.node.get()) && x.index == y.index);
  };
  for (size_t i = 0; i < a.inputs().size(); ++i)
    if (ia.at(a.inputs()[i].get()) != ib.at(b.inputs()[i].get())) return false;
  for (size_t i = 0; i < ta.size(); ++i) {
    const NodeObj& x = *ta[i];
    const NodeObj& y = *tb[i];
    if (x.kind != y.kind || x.types != y.types) return false;
    if (x.kind == NodeKind::Constant &&
        !same_bytes(static_cast<const ConstantNode&>(x).data, static_cast<const ConstantNode&>(y).data))
      return false;
    if (x.kind != NodeKind::Op) continue;
    const auto& ox = static_cast<const OpNode&>(x);
    const auto& oy = static_cast<const OpNode&>(y);
    if (ox.op != oy.op || !(ox.attrs == oy.attrs) || ox.inputs.size() != oy.inputs.size()) return false;
    for (size_t k = 0; k < ox.inputs.size(); ++k)
      if (!same_value(ox.inputs[k], oy.inputs[k])) return false;
    if (ox.body.defined() != oy.body.defined()) return false;
    if (ox.body.defined() && !equal_graph(Graph(ox.body), Graph(oy.body))) return false;
  }
  for (size_t i = 0; i < a.outputs().size(); ++i)
    if (!same_value(a.outputs()[i], b.outputs()[i])) return false;
  return true;
}

}  // namespace

bool structural_equal(const Graph& a, const Graph& b) { return equal_graph(a, b); }
uint64_t structural_hash(const Graph& a) { return hash_graph(a); }

}  // namespace kiln::graph
