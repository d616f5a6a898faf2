// Tasks: a compute DAG on a target, its workload key and its flop count.
#include "kiln/ops/task.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/printer.h"
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
  explicit FlopCounter(const std::map<std::string, int64_t>& hints) : hints_(hints) {}
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
    // Four byte products and their three adds for dot_i8x4.
    if (op->op != Intrinsic::Likely) count += op->op == Intrinsic::DotBF16x2 ? 3 : op->op == Intrinsic::DotI8x4 ? 7 : 1;
    IRVisitor::visit(op);
  }
  void visit(const Reduce* op) override {
    // Source per reduce element plus one combine (a multiply-add counts 2).
    FlopCounter inner(hints_);
    inner.visit_expr(op->source);
    double extent = 1;
    for (const IterVar& r : op->axis) extent *= static_cast<double>(hinted_extent(r.dom().extent, hints_));
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

 private:
  const std::map<std::string, int64_t>& hints_;
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

int64_t hinted_extent(const Expr& extent, const std::map<std::string, int64_t>& size_hints) {
  if (const int64_t* v = as_const_int(extent)) return std::max<int64_t>(*v, 1);
  Expr at = substitute(extent, [&](const Variable* v) -> Expr {
    auto it = size_hints.find(v->name);
    return IntImm::make(v->dtype, it != size_hints.end() ? it->second : kDefaultSizeHint);
  });
  Expr folded = arith::simplify(at);
  const int64_t* v = as_const_int(folded);
  KILN_USER_CHECK(v) << "extent " << to_string(extent) << " is not an integer expression of shape variables";
  return std::max<int64_t>(*v, 1);
}

bool is_symbolic_extent(const Expr& extent) { return !as_const_int(extent); }

double count_flop(const std::vector<te::Tensor>& outputs, const std::map<std::string, int64_t>& size_hints) {
  double total = 0;
  for (const te::Operation& op : te::topo_sort(outputs)) {
    if (op->kind != te::OpKind::Compute) continue;
    const auto* c = static_cast<const te::ComputeOpNode*>(op.get());
    double elements = 1;
    for (size_t d = 0; d < c->shape.size(); ++d) elements *= static_cast<double>(hinted_extent(c->shape[d], size_hints));
    FlopCounter counter(size_hints);
    counter.visit_expr(c->body);
    total += counter.count * elements;
  }
  return total;
}

Task make_task(const std::vector<te::Tensor>& args, const Target& target, const std::string& name, const std::map<std::string, int64_t>& size_hints) {
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
  for (const auto& [var, value] : size_hints)
    KILN_USER_CHECK(value > 0) << "make_task: the size hint of '" << var << "' is " << value << "; hints are likely extents, so they must be positive";
  task.size_hints = size_hints;
  task.flop = count_flop(task.outputs, size_hints);
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
