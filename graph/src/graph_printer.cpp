// The graph printer: one line per node, values numbered in topo order,
// constants by their type (never their data), fused groups with their body
// indented below them.
//
//   graph(%x: float32[1, 3, 8, 8]) {
//     %w = constant float32[4, 3, 3, 3]  # conv.weight
//     %0 = Conv(%x, %w) {group=1, pads=[1, 1, 1, 1]} : float32[1, 4, 8, 8]  # /conv/Conv
//     %1 = Relu(%0) : float32[1, 4, 8, 8]
//     return %1
//   }
#include <sstream>
#include <unordered_map>

#include "kiln/graph/graph.h"
#include "kiln/graph/op_registry.h"

namespace kiln::graph {

namespace {

class Printer {
 public:
  explicit Printer(std::ostringstream& os) : os_(os) {}

  void print(const Graph& g, const std::string& indent) {
    os_ << "graph(";
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      const auto& in = g.inputs()[i];
      os_ << (i ? ", " : "") << "%" << in->name << ": " << in->types[0].str();
      names_[in.get()] = {"%" + in->name};
    }
    os_ << ") {\n";
    int constants = 0;
    for (const auto& n : g.topo_order()) {
      if (n->kind == NodeKind::Input) continue;
      std::vector<std::string> outs;
      if (n->kind == NodeKind::Constant) {
        outs.push_back("%c" + std::to_string(constants++));
        os_ << indent << "  " << outs[0] << " = constant " << n->types[0].str() << "  # " << n->name << "\n";
      } else {
        for (int i = 0; i < n->num_outputs(); ++i) outs.push_back("%" + std::to_string(next_++));
        print_op(static_cast<const OpNode&>(*n), outs, indent);
      }
      names_[n.get()] = outs;
    }
    os_ << indent << "  return ";
    for (size_t i = 0; i < g.outputs().size(); ++i) os_ << (i ? ", " : "") << name_of(g.outputs()[i]);
    os_ << "\n" << indent << "}";
  }

 private:
  std::string name_of(const Value& v) {
    if (!v.defined()) return "_";
    auto it = names_.find(v.node.get());
    return it == names_.end() ? "%?" : it->second[v.index];
  }

  void print_op(const OpNode& op, const std::vector<std::string>& outs, const std::string& indent) {
    os_ << indent << "  ";
    for (size_t i = 0; i < outs.size(); ++i) os_ << (i ? ", " : "") << outs[i];
    os_ << " = " << op.op->name << "(";
    for (size_t i = 0; i < op.inputs.size(); ++i) os_ << (i ? ", " : "") << name_of(op.inputs[i]);
    os_ << ")";
    if (!op.attrs.values().empty()) os_ << " {" << op.attrs.str() << "}";
    os_ << " : ";
    for (size_t i = 0; i < op.types.size(); ++i) os_ << (i ? ", " : "") << op.types[i].str();
    if (op.name != op.op->name) os_ << "  # " << op.name;
    os_ << "\n";
    if (op.body.defined()) {
      // The body numbers its own values; keep ours.
      std::ostringstream inner;
      Printer p(inner);
      inner << indent << "    ";
      p.print(Graph(op.body), indent + "    ");
      os_ << inner.str() << "\n";
    }
  }

  std::ostringstream& os_;
  std::unordered_map<const NodeObj*, std::vector<std::string>> names_;
  int next_ = 0;
};

}  // namespace

std::string Graph::str() const {
  std::ostringstream os;
  Printer(os).print(*this, "");
  return os.str();
}

}  // namespace kiln::graph
