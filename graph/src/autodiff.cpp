// Reverse-mode differentiation: walk the nodes between the differentiated
// values and the loss in reverse topological order, asking each op's
// OpDef::gradient for its inputs' gradients and summing (Add) those of a
// value with several consumers.
#include "kiln/graph/autodiff.h"

#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "kiln/support/error.h"

namespace kiln::graph {
namespace {

// Nodes reachable from `roots`, producers first.
std::vector<const NodeObj*> topo_from(const std::vector<Value>& roots) {
  std::vector<const NodeObj*> order;
  std::unordered_set<const NodeObj*> seen;
  std::vector<std::pair<const NodeObj*, size_t>> stack;
  for (auto r = roots.rbegin(); r != roots.rend(); ++r)
    if (seen.insert(r->node.get()).second) stack.push_back({r->node.get(), 0});
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    const auto* op = n->kind == NodeKind::Op ? static_cast<const OpNode*>(n) : nullptr;
    if (op && next < op->inputs.size()) {
      const Value& in = op->inputs[next++];
      if (in.defined() && seen.insert(in.node.get()).second) stack.push_back({in.node.get(), 0});
      continue;
    }
    order.push_back(n);
    stack.pop_back();
  }
  return order;
}

// Gradient accumulation: one entry per value that has received a gradient.
class GradTable {
 public:
  void add(const Value& v, const Value& g, GradBuilder& b) {
    auto [it, fresh] = grads_.emplace(v, g);
    if (!fresh) it->second = b.add(it->second, g);
  }
  // A given gradient of an output (a vector-Jacobian product's seed); one output given twice sums its seeds.
  void seed(const Value& v, const Value& g) {
    auto [it, fresh] = grads_.emplace(v, g);
    if (!fresh) it->second = make_op("Add", {it->second, g}, {}, v.node->name + "/seed_sum")->output();
  }
  Value get(const Value& v) const {
    auto it = grads_.find(v);
    return it == grads_.end() ? Value() : it->second;
  }

 private:
  std::unordered_map<Value, Value, ValueHash> grads_;
};

void check_gradient(const OpNode& node, int i, const Value& g) {
  const TensorType& want = node.inputs[i].type();
  KILN_CHECK(g.type() == want) << node.op->name << " node '" << node.name << "': the gradient of input " << i << " is " << g.type().str()
                               << " but the input is " << want.str();
}

// Runs one node's gradient and adds what it gives to its inputs' entries.
void backprop_node(const OpNode& node, const std::unordered_set<const NodeObj*>& needs, GradTable& table) {
  std::vector<Value> out_grads;
  bool any = false;
  for (int k = 0; k < node.num_outputs(); ++k) {
    out_grads.push_back(table.get(node.output(k)));
    any |= out_grads.back().defined();
  }
  if (!any) return;
  std::vector<bool> wants;
  for (const Value& in : node.inputs) wants.push_back(in.defined() && needs.count(in.node.get()) && in.type().dtype.is_float());
  if (!node.op->gradient)
    KILN_USER_ERROR() << node.op->name << " node '" << node.name << "': the operator " << node.op->name
                      << " has no gradient, so kiln cannot differentiate through it (the loss depends on a trainable value through this node)";
  GradBuilder b(node, wants);
  std::vector<Value> in_grads = node.op->gradient(b, out_grads);
  KILN_CHECK(in_grads.size() <= node.inputs.size()) << node.op->name << ": gradient returned " << in_grads.size() << " values";
  for (size_t i = 0; i < in_grads.size(); ++i) {
    if (!in_grads[i].defined() || !wants[i]) continue;
    check_gradient(node, static_cast<int>(i), in_grads[i]);
    table.add(node.inputs[i], in_grads[i], b);
  }
}

}  // namespace

namespace {

// The nodes on a path from one of `wrt` to a root: only they pass gradients on.
std::unordered_set<const NodeObj*> nodes_needing_gradients(const std::vector<const NodeObj*>& order, const std::vector<Value>& wrt) {
  std::unordered_set<const NodeObj*> needs;
  for (const Value& w : wrt) {
    KILN_USER_CHECK(w.defined()) << "gradients: a value to differentiate for is undefined";
    needs.insert(w.node.get());
  }
  for (const NodeObj* n : order) {
    if (n->kind != NodeKind::Op) continue;
    for (const Value& in : static_cast<const OpNode*>(n)->inputs)
      if (in.defined() && needs.count(in.node.get())) needs.insert(n);
  }
  return needs;
}

std::vector<Value> backprop(const std::vector<const NodeObj*>& order, const std::vector<Value>& wrt, GradTable& table) {
  std::unordered_set<const NodeObj*> needs = nodes_needing_gradients(order, wrt);
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    if ((*it)->kind == NodeKind::Op && needs.count(*it)) backprop_node(*static_cast<const OpNode*>(*it), needs, table);
  std::vector<Value> out;
  for (const Value& w : wrt) out.push_back(table.get(w));
  return out;
}

}  // namespace

std::vector<Value> gradients(const Value& loss, const std::vector<Value>& wrt) {
  KILN_USER_CHECK(loss.defined()) << "gradients: the loss is undefined";
  KILN_USER_CHECK(loss.type().dtype.is_float()) << "gradients: the loss '" << loss.node->name << "' is " << loss.type().str() << "; it must be a float tensor";
  std::vector<const NodeObj*> order = topo_from({loss});
  GradTable table;
  if (loss.node->kind == NodeKind::Op) {
    // d loss / d loss: ones (a non-scalar loss is summed).
    GradBuilder seed(*static_cast<const OpNode*>(loss.node.get()), {});
    Value one = seed.scalar(1.0, loss.type().dtype);
    table.add(loss, seed.expand(one, loss.type().shape), seed);
  }
  return backprop(order, wrt, table);
}

std::vector<Value> vjp(const std::vector<Value>& outputs, const std::vector<Value>& output_grads, const std::vector<Value>& wrt) {
  KILN_USER_CHECK(outputs.size() == output_grads.size())
      << "vjp: " << outputs.size() << " outputs but " << output_grads.size() << " output gradients; give one gradient per output";
  GradTable table;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Value& y = outputs[k];
    const Value& g = output_grads[k];
    KILN_USER_CHECK(y.defined() && g.defined()) << "vjp: output " << k << " or its gradient is undefined";
    KILN_USER_CHECK(y.type().dtype.is_float() && g.type() == y.type())
        << "vjp: output " << k << " ('" << y.node->name << "') is " << y.type().str() << " but its gradient is " << g.type().str()
        << "; the gradient must have the output's float type";
    table.seed(y, g);
  }
  return backprop(topo_from(outputs), wrt, table);
}

std::vector<Value> gradients(const Graph& graph, const Value& loss, const std::vector<Value>& wrt) {
  bool in_graph = false;
  for (const Ref<NodeObj>& n : graph.topo_order()) in_graph |= n.get() == loss.node.get();
  KILN_USER_CHECK(in_graph) << "gradients: the loss '" << (loss.defined() ? loss.node->name : "?") << "' is not computed by the graph (not an output nor an ancestor of one)";
  return gradients(loss, wrt);
}

namespace {

Value zeros(const std::string& name, const TensorType& t) {
  NDArray a = NDArray::empty(t.shape, t.dtype);
  std::memset(a.data(), 0, static_cast<size_t>(a.nbytes()));
  return make_constant(name, a)->output();
}

}  // namespace

Graph gradient_graph(const Graph& graph, const std::vector<Value>& wrt, int loss_output) {
  KILN_USER_CHECK(loss_output >= 0 && loss_output < static_cast<int>(graph.outputs().size()))
      << "gradient_graph: the graph has " << graph.outputs().size() << " outputs; there is no output " << loss_output << " to take as the loss";
  Value loss = graph.outputs()[loss_output];
  std::vector<Value> grads = gradients(graph, loss, wrt);
  std::vector<Value> outs{loss};
  std::vector<std::string> names{"loss"};
  for (size_t k = 0; k < wrt.size(); ++k) {
    names.push_back("grad_" + wrt[k].node->name);
    outs.push_back(grads[k].defined() ? grads[k] : zeros(names.back(), wrt[k].type()));
  }
  return Graph::make(graph.inputs(), outs, names);
}

}  // namespace kiln::graph
