// Tasks: a compute DAG on a target, its workload key and its flop count.
#include "kiln/ops/task.h"

#include <sstream>
#include <unordered_set>

#include "kiln/ir/functor.h"
#include "kiln/support/error.h"
#include "kiln/te/workload_key.h"

namespace kiln::ops {

namespace {

// Arithmetic of one evaluation of an expression. Index arithmetic (inside
// tensor reads) and conditions (of if_then_else, select, reductions) pick
// elements rather than compute values, so they are not counted: padding and
// copies cost 0.
class FlopCounter : public IRVisitor {
 public:
  double count = 0;

 protected:
  using IRVisitor::visit;
  void visit(const TensorLoad*) override {}
  void visit(const BufferLoad*) override {}
  void visit(const Select* op) override {
    visit_expr(op->true_value);
    visit_expr(op->false_value);
  }
  void visit(const Call* op) override {
    if (op->op == Intrinsic::IfThenElse) {
      visit_expr(op->args[1]);
      visit_expr(op->args[2]);
      return;
    }
    // A bfloat16 pair's dot product is two multiplies and an add.
    if (op->op != Intrinsic::Likely) count += op->op == Intrinsic::DotBF16x2 ? 3 : 1;
    IRVisitor::visit(op);
  }
  void visit(const Reduce* op) override {
    // Source per reduce element plus one combine (a multiply-add counts 2).
    FlopCounter inner;
    inner.visit_expr(op->source);
    double extent = 1;
    for (const IterVar& r : op->axis) extent *= static_cast<double>(constant(r.dom().extent, "reduce axis '" + r.name() + "'"));
    count += (inner.count + 1) * extent;
  }
#define KILN_COUNT_ONE(T)               \
  void visit(const T* op) override {    \
    count += 1;                         \
    IRVisitor::visit(op);               \
  }
  KILN_COUNT_ONE(Add)
  KILN_COUNT_ONE(Sub)
  KILN_COUNT_ONE(Mul)
  KILN_COUNT_ONE(Div)
  KILN_COUNT_ONE(Mod)
  KILN_COUNT_ONE(FloorDiv)
  KILN_COUNT_ONE(FloorMod)
  KILN_COUNT_ONE(Min)
  KILN_COUNT_ONE(Max)
  KILN_COUNT_ONE(EQ)
  KILN_COUNT_ONE(NE)
  KILN_COUNT_ONE(LT)
  KILN_COUNT_ONE(LE)
  KILN_COUNT_ONE(GT)
  KILN_COUNT_ONE(GE)
  KILN_COUNT_ONE(And)
  KILN_COUNT_ONE(Or)
  KILN_COUNT_ONE(Not)
#undef KILN_COUNT_ONE

 public:
  static int64_t constant(const Expr& e, const std::string& what) {
    const int64_t* v = as_const_int(e);
    KILN_USER_CHECK(v) << "count_flop: " << what << " has a symbolic extent; tuning tasks need constant shapes";
    return *v;
  }
};

std::string shape_text(const te::Tensor& t) {
  std::ostringstream os;
  for (int d = 0; d < t.ndim(); ++d) {
    const int64_t* v = as_const_int(t.shape()[d]);
    os << (d ? "x" : "");
    if (v) os << *v;
    else os << "?";
  }
  return os.str();
}

}  // namespace

double count_flop(const std::vector<te::Tensor>& outputs) {
  double total = 0;
  for (const te::Operation& op : te::topo_sort(outputs)) {
    if (op->kind != te::OpKind::Compute) continue;
    const auto* c = static_cast<const te::ComputeOpNode*>(op.get());
    double elements = 1;
    for (size_t d = 0; d < c->shape.size(); ++d) elements *= static_cast<double>(FlopCounter::constant(c->shape[d], "dimension " + std::to_string(d) + " of '" + c->name + "'"));
    FlopCounter counter;
    counter.visit_expr(c->body);
    total += counter.count * elements;
  }
  return total;
}

Task make_task(const std::vector<te::Tensor>& args, const Target& target, const std::string& name) {
  KILN_USER_CHECK(!args.empty()) << "make_task: no arguments; pass the input placeholders and the output tensors in call order";
  Task task;
  task.args = args;
  std::unordered_set<const te::OperationNode*> in_args;
  for (const te::Tensor& t : args) {
    KILN_USER_CHECK(t.defined()) << "make_task: an argument is undefined";
    KILN_USER_CHECK(in_args.insert(t.op().get()).second) << "make_task: tensor '" << t.name() << "' appears twice among the arguments";
    if (t.op()->kind == te::OpKind::Compute) task.outputs.push_back(t);
  }
  KILN_USER_CHECK(!task.outputs.empty()) << "make_task: every argument is a placeholder; add the computed output tensor(s) to the arguments";
  for (const te::Operation& op : te::topo_sort(task.outputs))
    KILN_USER_CHECK(op->kind != te::OpKind::Placeholder || in_args.count(op.get()))
        << "make_task: input '" << op->name << "' is read by the computation but is not among the arguments; add it";
  task.target = target;
  task.workload_key = te::workload_key(task.outputs);
  task.flop = count_flop(task.outputs);
  if (!name.empty()) {
    task.name = name;
  } else {
    std::ostringstream os;
    for (size_t i = 0; i < task.outputs.size(); ++i) os << (i ? "+" : "") << task.outputs[i].name();
    os << "_" << shape_text(task.outputs[0]);
    task.name = os.str();
  }
  return task;
}

}  // namespace kiln::ops
