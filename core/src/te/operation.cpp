#include "kiln/te/operation.h"

#include <unordered_set>

#include "kiln/ir/functor.h"
#include "kiln/support/error.h"

namespace kiln::te {

Tensor Operation::output() const { return Tensor(new TensorNode(*this)); }
const std::string& Operation::name() const { return get()->name; }

Expr Tensor::operator()(std::vector<Expr> indices) const {
  KILN_USER_CHECK(defined()) << "read of an undefined tensor";
  KILN_USER_CHECK(static_cast<int>(indices.size()) == ndim()) << "tensor '" << name() << "' has " << ndim() << " dimensions but is indexed with " << indices.size();
  for (Expr& i : indices) {
    KILN_USER_CHECK(i.defined() && i.dtype().is_scalar() && (i.dtype().is_integer())) << "tensor '" << name() << "' indexed with a non-integer expression";
    if (i.dtype() != DataType::Int(32)) i = Cast::make(DataType::Int(32), i);
  }
  return TensorLoad::make(Ref<ProducerNode>(get()), std::move(indices));
}

static void check_shape(const std::vector<Expr>& shape, const std::string& name) {
  for (size_t d = 0; d < shape.size(); ++d) {
    const Expr& e = shape[d];
    KILN_USER_CHECK(e.defined() && e.dtype() == DataType::Int(32)) << "tensor '" << name << "': dimension " << d << " must be an int32 expression";
    const int64_t* v = as_const_int(e);
    KILN_USER_CHECK(!v || *v > 0) << "tensor '" << name << "': dimension " << d << " is " << *v << "; extents must be positive";
  }
}

Tensor placeholder(std::vector<Expr> shape, DataType dtype, std::string name) {
  check_shape(shape, name);
  KILN_USER_CHECK(dtype.is_scalar() && !dtype.is_void() && !dtype.is_handle()) << "placeholder '" << name << "' must have a scalar element dtype, not " << dtype.str();
  return Operation(new PlaceholderOpNode(std::move(name), dtype, std::move(shape))).output();
}

Tensor compute(std::vector<Expr> shape, const FCompute& fcompute, std::string name, std::vector<std::string> axis_names) {
  check_shape(shape, name);
  std::vector<IterVar> axis;
  std::vector<Var> vars;
  KILN_USER_CHECK(axis_names.empty() || axis_names.size() == shape.size()) << "compute '" << name << "': " << axis_names.size() << " axis names for " << shape.size() << " dimensions";
  for (size_t d = 0; d < shape.size(); ++d) {
    // Default names: i, j for up to two dimensions, else i0, i1, ...
    std::string vname = !axis_names.empty() ? axis_names[d] : shape.size() <= 2 ? std::string(d == 0 ? "i" : "j") : "i" + std::to_string(d);
    Var v(vname);
    vars.push_back(v);
    axis.emplace_back(v, Range(0, shape[d]), IterVarKind::DataPar);
  }
  Expr body = fcompute(vars);
  KILN_USER_CHECK(body.defined()) << "compute '" << name << "': the body function returned an undefined expression";
  KILN_USER_CHECK(body.dtype().is_scalar()) << "compute '" << name << "': the body must be a scalar expression, got " << body.dtype().str();
  std::vector<IterVar> raxis;
  if (const Reduce* r = body.as<Reduce>()) raxis = r->axis;
  // A Reduce below the top of the body is not supported: reductions are whole stages.
  bool nested = false;
  auto check = [&](const Expr& e) { nested = nested || (e.as<Reduce>() && !e.same_as(body)); };
  post_order_visit(body, check);
  KILN_USER_CHECK(!nested) << "compute '" << name << "': a reduction (sum/max/min/prod) must be the whole body, e.g. compute(shape, lambda i: sum(...)); move the rest into a separate compute";
  DataType t = body.dtype();
  return Operation(new ComputeOpNode(std::move(name), t, std::move(shape), std::move(axis), std::move(raxis), std::move(body))).output();
}

IterVar reduce_axis(Range dom, std::string name) {
  KILN_USER_CHECK(dom.min.defined() && dom.extent.defined()) << "reduce_axis '" << name << "' needs a range (lo, hi)";
  const int64_t* e = as_const_int(dom.extent);
  KILN_USER_CHECK(!e || *e > 0) << "reduce_axis '" << name << "' has extent " << *e << "; it must be positive";
  return IterVar(Var(std::move(name)), dom, IterVarKind::Reduce);
}

static Expr make_reduce(ReduceKind kind, Expr source, std::vector<IterVar> axis, Expr condition) {
  KILN_USER_CHECK(source.defined()) << reduce_kind_name(kind) << " of an undefined expression";
  KILN_USER_CHECK(!axis.empty()) << reduce_kind_name(kind) << " needs at least one reduce axis";
  for (const IterVar& iv : axis) KILN_USER_CHECK(iv.defined() && iv.kind() == IterVarKind::Reduce) << reduce_kind_name(kind) << " over an axis that is not a reduce_axis";
  if (condition.defined() && !condition.dtype().is_bool()) condition = NE::make(condition, make_zero(condition.dtype()));
  return Reduce::make(kind, std::move(source), std::move(axis), std::move(condition));
}

Expr sum(Expr s, std::vector<IterVar> a, Expr c) { return make_reduce(ReduceKind::Sum, std::move(s), std::move(a), std::move(c)); }
Expr max(Expr s, std::vector<IterVar> a, Expr c) { return make_reduce(ReduceKind::Max, std::move(s), std::move(a), std::move(c)); }
Expr min(Expr s, std::vector<IterVar> a, Expr c) { return make_reduce(ReduceKind::Min, std::move(s), std::move(a), std::move(c)); }
Expr prod(Expr s, std::vector<IterVar> a, Expr c) { return make_reduce(ReduceKind::Prod, std::move(s), std::move(a), std::move(c)); }

std::vector<Tensor> ComputeOpNode::input_tensors() const {
  std::vector<Tensor> out;
  std::unordered_set<const OperationNode*> seen;
  post_order_visit(body, [&](const Expr& e) {
    const TensorLoad* t = e.as<TensorLoad>();
    if (!t) return;
    const TensorNode* tn = static_cast<const TensorNode*>(t->producer.get());
    if (seen.insert(tn->op.get()).second) out.push_back(Tensor(tn));
  });
  return out;
}

std::vector<Operation> topo_sort(const std::vector<Tensor>& outputs) {
  std::vector<Operation> order;
  std::unordered_set<const OperationNode*> visited;
  // Post-order DFS in input order: deterministic for structurally equal DAGs.
  std::function<void(const Operation&)> visit = [&](const Operation& op) {
    if (!visited.insert(op.get()).second) return;
    for (const Tensor& t : op->input_tensors()) visit(t.op());
    order.push_back(op);
  };
  for (const Tensor& t : outputs) {
    KILN_USER_CHECK(t.defined()) << "undefined tensor among the outputs";
    visit(t.op());
  }
  return order;
}

namespace {
class TensorReadReplacer : public IRMutator {
 public:
  explicit TensorReadReplacer(const std::function<Expr(const TensorNode*, const std::vector<Expr>&)>& f) : f_(f) {}

 protected:
  using IRMutator::visit;
  Expr visit(const TensorLoad* op) override {
    Expr base = IRMutator::visit(op);
    const TensorLoad* load = base.as<TensorLoad>();
    Expr r = f_(static_cast<const TensorNode*>(load->producer.get()), load->indices);
    return r.defined() ? r : base;
  }

 private:
  const std::function<Expr(const TensorNode*, const std::vector<Expr>&)>& f_;
};
}  // namespace

Expr replace_tensor_reads(const Expr& e, const std::function<Expr(const TensorNode*, const std::vector<Expr>&)>& f) {
  return TensorReadReplacer(f).mutate(e);
}

}  // namespace kiln::te
