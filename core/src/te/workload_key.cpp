#include "kiln/te/workload_key.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "kiln/ir/functor.h"

namespace kiln::te {
namespace {

// Writes an expression with variables and tensors named by position, so
// that two DAGs differing only in names give the same text.
class CanonicalWriter : public IRVisitor {
 public:
  CanonicalWriter(std::ostream& os, const std::unordered_map<const OperationNode*, int>& op_index) : os_(os), op_index_(op_index) {}
  void bind(const Variable* v, const std::string& name) { names_[v] = name; }

 protected:
  using IRVisitor::visit;
  void visit(const IntImm* op) override { os_ << op->dtype.str() << ":" << op->value; }
  void visit(const FloatImm* op) override {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%a", op->value);  // exact
    os_ << op->dtype.str() << ":" << buf;
  }
  void visit(const StringImm* op) override { os_ << '"' << op->value << '"'; }
  void visit(const Variable* op) override {
    auto it = names_.find(op);
    os_ << (it != names_.end() ? it->second : "free:" + op->name);
  }
#define KILN_X(T)                      \
  void visit(const T* op) override {   \
    os_ << #T "(";                     \
    visit_expr(op->a);                 \
    os_ << ",";                        \
    visit_expr(op->b);                 \
    os_ << ")";                        \
  }
  KILN_X(Add) KILN_X(Sub) KILN_X(Mul) KILN_X(Div) KILN_X(Mod) KILN_X(FloorDiv) KILN_X(FloorMod) KILN_X(Min) KILN_X(Max)
  KILN_X(EQ) KILN_X(NE) KILN_X(LT) KILN_X(LE) KILN_X(GT) KILN_X(GE) KILN_X(And) KILN_X(Or)
#undef KILN_X
  void visit(const Not* op) override { list("Not", {op->a}); }
  void visit(const Select* op) override { list("Select", {op->condition, op->true_value, op->false_value}); }
  void visit(const Cast* op) override { list(("Cast:" + op->dtype.str()).c_str(), {op->value}); }
  void visit(const Call* op) override { list(intrinsic_name(op->op), op->args); }
  void visit(const TensorLoad* op) override {
    const auto* t = static_cast<const TensorNode*>(op->producer.get());
    list(("T" + std::to_string(op_index_.at(t->op.get()))).c_str(), op->indices);
  }
  void visit(const BufferLoad* op) override { list(("buffer:" + op->buffer->name).c_str(), op->indices); }
  void visit(const Ramp* op) override { list(("Ramp" + std::to_string(op->lanes)).c_str(), {op->base, op->stride}); }
  void visit(const Broadcast* op) override { list(("Broadcast" + std::to_string(op->lanes)).c_str(), {op->value}); }
  void visit(const Let* op) override {
    bind(op->var.get(), "let" + std::to_string(names_.size()));
    list("Let", {op->var, op->value, op->body});
  }
  void visit(const Reduce* op) override {
    os_ << reduce_kind_name(op->reduce_kind) << "[";
    for (const IterVar& iv : op->axis) {
      bind(iv.var().get(), "r" + std::to_string(reduce_count_++));
      visit_expr(iv.var());
      os_ << ":";
      visit_expr(iv.dom().min);
      os_ << ":";
      visit_expr(iv.dom().extent);
      os_ << ";";
    }
    os_ << "](";
    visit_expr(op->source);
    os_ << ",";
    visit_expr(op->condition);
    os_ << ")";
  }

 private:
  void list(const char* head, const std::vector<Expr>& args) {
    os_ << head << "(";
    for (size_t i = 0; i < args.size(); ++i) {
      if (i) os_ << ",";
      visit_expr(args[i]);
    }
    os_ << ")";
  }
  std::ostream& os_;
  const std::unordered_map<const OperationNode*, int>& op_index_;
  std::unordered_map<const Variable*, std::string> names_;
  int reduce_count_ = 0;
};

std::string op_text(const Operation& op, const std::unordered_map<const OperationNode*, int>& index) {
  std::ostringstream os;
  CanonicalWriter w(os, index);
  os << (op->kind == OpKind::Placeholder ? "placeholder" : "compute") << " " << op->dtype.str() << " [";
  for (size_t d = 0; d < op->shape.size(); ++d) {
    if (d) os << ",";
    w.visit_expr(op->shape[d]);
  }
  os << "]";
  if (op->kind == OpKind::Compute) {
    const auto* c = static_cast<const ComputeOpNode*>(op.get());
    for (size_t d = 0; d < c->axis.size(); ++d) w.bind(c->axis[d].var().get(), "a" + std::to_string(d));
    os << " = ";
    w.visit_expr(c->body);
  }
  return os.str();
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

}  // namespace

std::string canonical_dag(const std::vector<Tensor>& outputs) {
  std::vector<Operation> ops = topo_sort(outputs);
  std::unordered_map<const OperationNode*, int> index;
  for (size_t i = 0; i < ops.size(); ++i) index[ops[i].get()] = static_cast<int>(i);
  std::ostringstream os;
  for (size_t i = 0; i < ops.size(); ++i) os << "T" << i << " = " << op_text(ops[i], index) << "\n";
  os << "outputs";
  for (const Tensor& t : outputs) os << " T" << index.at(t.op().get());
  return os.str();
}

std::string workload_key(const std::vector<Tensor>& outputs) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(fnv1a(canonical_dag(outputs))));
  return buf;
}

std::string dag_json(const std::vector<Tensor>& outputs) {
  std::vector<Operation> ops = topo_sort(outputs);
  std::unordered_map<const OperationNode*, int> index;
  for (size_t i = 0; i < ops.size(); ++i) index[ops[i].get()] = static_cast<int>(i);
  nlohmann::json j;
  j["ops"] = nlohmann::json::array();
  for (const Operation& op : ops) j["ops"].push_back({{"name", op->name}, {"canonical", op_text(op, index)}});
  for (const Tensor& t : outputs) j["outputs"].push_back(index.at(t.op().get()));
  return j.dump();
}

}  // namespace kiln::te
