// fuse_depthwise_pointwise (passes.h): a depthwise conv's group and the 1x1
// conv's group that alone reads it become one group.
//
// After fuse_ops a MobileNet-style block is "DepthwiseConvNCHWc+Add+Clip"
// (bias, ReLU6) then "ConvNCHWc+Add[+Add]" (the projection, its bias and the
// residual). The depthwise output goes to memory between them, and is read
// back once; merged, the group's schedule (kiln/ops/cpu_dwpw.h) keeps one
// row of it in the cache instead. The merged body is the two bodies joined
// at that value; the group's other inputs are both groups' inputs, shared
// ones once.
//
// Where the depthwise output fits the caches the unfused kernels already
// read it from there, and their schedules (tiled across rows, tuned) beat
// the fused one: measured on a 2-core Xeon (AVX-512, 2 MB L2) per block,
// fused / unfused 0.67-0.96 where the depthwise input or output holds 1.2-4.8 MB
// (MobileNetV2's 112x112 and 56x56 blocks, the stride-2 one out of 56x56
// included) and 0.99-1.2 at 0.1-0.6 MB (28x28 and smaller). Hence min_bytes,
// on the larger of the two on one core. On several cores only the output
// counts: the stride-2 56x56 block (1.8 MB in, 0.44 MB out) measured fused /
// unfused 1.15 at 2 threads (0.95 at 1), the 24->24 56x56 one (1.8 MB out)
// 0.95. Likely (not measured apart): the expand conv before the block leaves
// the depthwise input split over the cores' L2s by output channel blocks
// (its parallel loop's outer axis), where an unfused kernel split the same
// way finds it, while the fused group (pixels in parallel, every channel)
// reads half of it from the other core; the 1x1 conv reads the depthwise
// output so, unfused, hence what fusing saves scales with the output.
//
// The size rule is a guess from a few blocks on one machine; a LayoutPlan's
// dwpw_fuse decides pairs one by one instead, and the graph search
// (tuner/graph_search.h) measures those decisions on the whole model.
#include <algorithm>
#include <unordered_map>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/support/error.h"

namespace kiln::graph {

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool is_group(const NodeObj* n) {
  return n && n->kind == NodeKind::Op && static_cast<const OpNode*>(n)->body.defined() && static_cast<const OpNode*>(n)->attrs.has("ops");
}

// The one node of `op` in a group's body, else nullptr.
const OpNode* only_op(const Graph& body, const char* op) {
  const OpNode* found = nullptr;
  for (const OpNode* n : body.op_nodes())
    if (n->op->name == op) {
      if (found) return nullptr;
      found = n;
    }
  return found;
}

// The body input a 1x1, stride-1, unpadded, ungrouped blocked conv group reads its
// conv's input from (-1 when the group is no such conv group).
int pointwise_input(const OpNode& g) {
  if (!starts_with(g.attrs.get_string("ops"), "kiln.ConvNCHWc+") && g.attrs.get_string("ops") != "kiln.ConvNCHWc") return -1;
  Graph body(g.body);
  const OpNode* conv = only_op(body, "kiln.ConvNCHWc");
  if (!conv || conv->inputs.size() != 2) return -1;
  const Shape& w = conv->inputs[1].type().shape;
  bool one = w.size() == 6 && w[2] == 1 && w[3] == 1;
  bool plain = conv->attrs.get_ints("strides") == std::vector<int64_t>{1, 1} && conv->attrs.get_ints("pads") == std::vector<int64_t>{0, 0, 0, 0} &&
               conv->attrs.get_int_or("group_blocks", 0) == 0;
  if (!one || !plain || conv->inputs[0].node->kind != NodeKind::Input) return -1;
  for (size_t k = 0; k < body.inputs().size(); ++k)
    if (body.inputs()[k].get() == conv->inputs[0].node.get()) return static_cast<int>(k);
  return -1;
}

// A depthwise conv group with one output (its epilogue: fuse_ops' elementwise nodes).
bool is_depthwise_group(const OpNode& g) {
  return starts_with(g.attrs.get_string("ops"), "kiln.DepthwiseConvNCHWc") && g.num_outputs() == 1 && only_op(Graph(g.body), "kiln.DepthwiseConvNCHWc");
}

// The depthwise conv's bytes the size rule weighs: on one core the larger of its input and
// output (a stride-2 one reads four times what it writes), on several its output alone.
int64_t depthwise_bytes(const OpNode& g, int num_cores) {
  const OpNode* dw = only_op(Graph(g.body), "kiln.DepthwiseConvNCHWc");
  if (!dw->inputs[0].type().is_static() || !dw->types[0].is_static()) return -1;  // symbolic sizes: the fused schedule needs static ones
  if (num_cores > 1) return dw->types[0].bytes();
  return std::max(dw->inputs[0].type().bytes(), dw->types[0].bytes());
}

// Group a (depthwise) and group b (its 1x1 conv, reading a's output as its input k) as one group.
Ref<OpNode> merge(const OpNode& a, const OpNode& b, int k) {
  Graph ab(a.body), bb(b.body);
  std::vector<Ref<InputNode>> inputs = ab.inputs();
  std::vector<Value> outer = a.inputs;
  std::unordered_map<const NodeObj*, Value> map;  // b's body node -> the merged body's value
  for (size_t i = 0; i < bb.inputs().size(); ++i) {
    const Ref<InputNode>& in = bb.inputs()[i];
    if (static_cast<int>(i) == k) {
      map[in.get()] = ab.outputs()[0];
      continue;
    }
    for (size_t m = 0; m < outer.size() && !map.count(in.get()); ++m)
      if (outer[m] == b.inputs[i]) map[in.get()] = inputs[m]->output();
    if (map.count(in.get())) continue;
    std::string name = in->name;
    for (const auto& have : inputs)
      if (have->name == name) name += "#b" + std::to_string(i);
    inputs.push_back(name == in->name ? in : make_input(name, in->types[0]));
    outer.push_back(b.inputs[i]);
    map[in.get()] = inputs.back()->output();
  }
  std::unordered_map<const NodeObj*, Ref<OpNode>> copies;
  auto value = [&](const Value& v) -> Value {
    if (!v.defined() || v.node->kind == NodeKind::Constant) return v;
    if (v.node->kind == NodeKind::Input) return map.at(v.node.get());
    return copies.at(v.node.get())->output(v.index);
  };
  for (const OpNode* n : bb.op_nodes()) {
    std::vector<Value> in;
    for (const Value& v : n->inputs) in.push_back(value(v));
    copies[n] = Ref<OpNode>(new OpNode(n->name, n->op, n->attrs, std::move(in), n->types, n->body));
  }
  std::vector<Value> outs;
  for (const Value& v : bb.outputs()) outs.push_back(value(v));
  Attrs attrs = b.attrs;
  attrs.set("ops", a.attrs.get_string("ops") + "+" + b.attrs.get_string("ops"));
  return Ref<OpNode>(new OpNode(a.name, a.op, attrs, std::move(outer), b.types, Graph::make(inputs, outs)));
}

}  // namespace

namespace {

// Readers of each value (a graph output counts twice): the depthwise output must have the 1x1 conv as its only one.
std::unordered_map<Value, int, ValueHash> reader_counts(const Graph& g) {
  std::unordered_map<Value, int, ValueHash> readers;
  for (const OpNode* n : g.op_nodes())
    for (const Value& v : n->inputs) readers[v] += v.defined() ? 1 : 0;
  for (const Value& v : g.outputs()) readers[v] += 2;
  return readers;
}

// Where `op` is a 1x1 conv group whose input k is a depthwise group's output that it alone reads: k, else -1.
int pair_input(const OpNode& op, std::unordered_map<Value, int, ValueHash>& readers) {
  int k = is_group(&op) ? pointwise_input(op) : -1;
  if (k < 0) return -1;
  const Value& src = op.inputs[k];
  bool depthwise = is_group(src.node.get()) && is_depthwise_group(static_cast<const OpNode&>(*src.node)) && readers[src] == 1;
  return depthwise ? k : -1;
}

std::string depthwise_name(const OpNode& group) { return only_op(Graph(group.body), "kiln.DepthwiseConvNCHWc")->name; }

}  // namespace

std::vector<DepthwisePointwisePair> depthwise_pointwise_pairs(const Graph& g, const Target& target, int64_t min_bytes) {
  std::vector<DepthwisePointwisePair> out;
  if (target.kind != Target::Kind::LLVM) return out;
  auto readers = reader_counts(g);
  for (const OpNode* op : g.op_nodes()) {
    int k = pair_input(*op, readers);
    if (k < 0) continue;
    const auto& dw = static_cast<const OpNode&>(*op->inputs[k].node);
    DepthwisePointwisePair p;
    p.depthwise = depthwise_name(dw);
    p.pointwise = only_op(Graph(op->body), "kiln.ConvNCHWc")->name;
    p.bytes = depthwise_bytes(dw, target.num_cores);
    p.by_rule = min_bytes >= 0 && p.bytes >= min_bytes;
    if (p.bytes >= 0) out.push_back(p);  // symbolic sizes: never fused
  }
  return out;
}

Graph fuse_depthwise_pointwise(const Graph& g, const Target& target, int64_t min_bytes) { return fuse_depthwise_pointwise(g, target, min_bytes, {}); }

Graph fuse_depthwise_pointwise(const Graph& g, const Target& target, int64_t min_bytes, const std::map<std::string, bool>& decisions) {
  if (target.kind != Target::Kind::LLVM || (min_bytes < 0 && decisions.empty())) return g;
  auto readers = reader_counts(g);
  std::unordered_map<const NodeObj*, std::vector<Value>> mapped;
  auto map = [&](const Value& v) -> Value {
    auto it = v.defined() ? mapped.find(v.node.get()) : mapped.end();
    return it == mapped.end() ? v : it->second[v.index];
  };
  // A pair the plan decides takes its decision; any other the size rule's (none under a negative min_bytes).
  auto fuse = [&](const OpNode& dw) {
    int64_t bytes = depthwise_bytes(dw, target.num_cores);
    if (bytes < 0) return false;  // symbolic sizes: the fused schedule needs static ones
    auto it = decisions.find(depthwise_name(dw));
    return it != decisions.end() ? it->second : min_bytes >= 0 && bytes >= min_bytes;
  };
  bool changed = false;
  for (const auto& n : g.topo_order()) {
    if (n->kind != NodeKind::Op) continue;
    const auto& op = static_cast<const OpNode&>(*n);
    std::vector<Value> inputs;
    for (const Value& v : op.inputs) inputs.push_back(map(v));
    Ref<OpNode> node(new OpNode(op.name, op.op, op.attrs, inputs, op.types, op.body));
    int k = pair_input(op, readers);
    if (k >= 0 && fuse(static_cast<const OpNode&>(*op.inputs[k].node))) {
      const auto& a = static_cast<const OpNode&>(*map(op.inputs[k]).node);
      node = merge(a, *node, k);
      changed = true;
    }
    std::vector<Value> outs;
    for (int i = 0; i < node->num_outputs(); ++i) outs.push_back(node->output(i));
    mapped[n.get()] = std::move(outs);
  }
  if (!changed) return g;
  std::vector<Value> outputs;
  for (const Value& v : g.outputs()) outputs.push_back(map(v));
  return Graph::make(g.inputs(), std::move(outputs), g.output_names());
}

}  // namespace kiln::graph
