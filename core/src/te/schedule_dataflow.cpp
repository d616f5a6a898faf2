// Helpers of the primitives that change the dataflow of a schedule by adding
// stages (cache_read, pack, cache_write, rfactor: core/src/te/step_*.cpp). Ops
// are immutable, so a stage whose body must read a new tensor gets a new op
// (same axes, so its loop transformations stay valid), and its readers are
// rewritten in turn.
#include "kiln/ir/functor.h"
#include "kiln/support/error.h"
#include "step_internal.h"

namespace kiln::te {

namespace detail {

const ComputeOpNode* as_compute(const Operation& op) { return op->kind == OpKind::Compute ? static_cast<const ComputeOpNode*>(op.get()) : nullptr; }

Operation with_body(const ComputeOpNode* c, Expr body) {
  return Operation(new ComputeOpNode(c->name, c->dtype, c->shape, c->axis, c->reduce_axis, std::move(body)));
}

Expr redirect_reads(const Expr& body, const std::unordered_map<const OperationNode*, Operation>& map) {
  return replace_tensor_reads(body, [&](const TensorNode* t, const std::vector<Expr>& idx) -> Expr {
    auto it = map.find(t->op.get());
    if (it == map.end()) return Expr();
    return it->second.output()(idx);
  });
}

bool reads(const Operation& reader, const Operation& producer) {
  for (const Tensor& t : reader->input_tensors())
    if (t.op().same_as(producer)) return true;
  return false;
}

std::vector<IterVar> fresh_axes(const std::vector<Expr>& shape, const std::vector<IterVar>& like) {
  std::vector<IterVar> axes;
  for (size_t d = 0; d < shape.size(); ++d) {
    std::string name = d < like.size() ? like[d].name() : "ax" + std::to_string(d);
    axes.emplace_back(Var(name), Range(0, shape[d]), IterVarKind::DataPar);
  }
  return axes;
}

std::vector<Expr> vars_of(const std::vector<IterVar>& axes) {
  std::vector<Expr> v;
  for (const IterVar& a : axes) v.push_back(a.var());
  return v;
}

void check_no_attached(const ScheduleState& st, const Stage& s, const char* primitive) {
  for (const auto& p : st.stages)
    KILN_USER_CHECK(p->attach_type() != AttachType::Scope || p->attach_stage() != &s)
        << primitive << " of '" << s.name() << "' replaces its loops, but stage '" << p->name() << "' is computed at one of them; apply " << primitive
        << " before compute_at of '" << p->name() << "'";
}

}  // namespace detail

void ScheduleState::replace_dataflow(const std::unordered_map<const OperationNode*, Operation>& replaced) {
  std::unordered_map<const OperationNode*, Operation> map = replaced;
  for (const auto& [old_op, new_op] : replaced) replaced_ops[old_op] = new_op;
  for (auto& s : stages) {
    const ComputeOpNode* c = detail::as_compute(s->op());
    if (!c) continue;
    Expr body = detail::redirect_reads(c->body, map);
    if (body.same_as(c->body)) continue;
    Operation op = detail::with_body(c, body);
    map[c] = op;
    replaced_ops[c] = op;
    s->op_ = op;  // same axes: the stage's loops stay valid
  }
}

}  // namespace kiln::te
