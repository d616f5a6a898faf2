// The rfactor step: the reduction of a stage over one leaf reduce axis is
// factored into a new stage with that axis as a data-parallel dimension, and
// the stage then reduces over that dimension. The primitive, its fields, its
// replay and its Python. The loop arithmetic is iter_relations'.
#include "iter_relations.h"
#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/support/error.h"
#include "step_internal.h"

namespace kiln::te {

using namespace detail;  // NOLINT: the step helpers

namespace {
// Extents of a stage's loops, values of its root variables in its leaf variables, and the guards of its non-dividing reduce splits.
struct ReduceLoops {
  IterRanges ranges;
  IterValues values;
  std::vector<Expr> guards;
  int extent(const IterVar& iv) const {
    const int64_t* e = as_const_int(ranges.at(iv.get()).extent);
    KILN_USER_CHECK(e) << "rfactor: loop '" << iv.name() << "' has a symbolic extent; factor a loop of constant extent (split the axis by a constant first)";
    return static_cast<int>(*e);
  }
};

ReduceLoops reduce_loops(const Stage& s, const ComputeOpNode* c) {
  ReduceLoops rl;
  for (const IterVar& r : c->reduce_axis) {
    // A symbolic extent (a dynamic shape's row) is fine: only the factored loop must be constant.
    KILN_USER_CHECK(is_zero(r.dom().min)) << "rfactor on '" << s.name() << "': reduce axis '" << r.name() << "' needs a range starting at 0";
    rl.ranges[r.get()] = r.dom();
  }
  for (const IterVar& a : c->axis) rl.ranges[a.get()] = a.dom();
  pass_down(s.relations(), &rl.ranges);
  pass_up(s.relations(), s.leaf_iter_vars(), rl.ranges, &rl.values);
  rl.guards = split_guards(s.relations(), s.leaf_iter_vars(), rl.ranges, rl.values, [](const IterVarRelation& r) { return r.parent.kind() == IterVarKind::Reduce; });
  return rl;
}

Expr substitute_map(const Expr& e, const std::unordered_map<const Variable*, Expr>& map) {
  return substitute(e, [&](const Variable* v) -> Expr {
    auto it = map.find(v);
    return it == map.end() ? Expr() : it->second;
  });
}
}  // namespace

Tensor Schedule::rfactor(const Tensor& tensor, const IterVar& axis, int factor_axis) {
  Stage& s = (*this)[tensor];
  const ComputeOpNode* c = as_compute(s.op());
  KILN_USER_CHECK(c && c->is_reduction()) << "rfactor of '" << s.name() << "': it is not a reduction";
  AxisRef ref = leaf_ref(s, axis, "rfactor");
  KILN_USER_CHECK(axis.kind() == IterVarKind::Reduce) << "rfactor of '" << s.name() << "': axis '" << axis.name() << "' is not a reduction axis";
  KILN_USER_CHECK(factor_axis >= 0 && factor_axis <= static_cast<int>(c->axis.size())) << "rfactor of '" << s.name() << "': factor_axis " << factor_axis << " must be in [0, " << c->axis.size() << "]";
  check_no_attached(*state_, s, "rfactor");
  RFactor step{stage_ref(*state_, s), ref, factor_axis};

  const Reduce* red = c->body.as<Reduce>();
  ReduceLoops rl = reduce_loops(s, c);
  // The factored op: the chosen reduce loop becomes a data-parallel dimension.
  std::vector<Expr> rf_shape = c->shape;
  int rf_extent = rl.extent(axis);
  rf_shape.insert(rf_shape.begin() + factor_axis, Expr(rf_extent));
  std::vector<IterVar> rf_axes = fresh_axes(c->shape, c->axis);
  IterVar k_axis(Var(axis.name()), Range(0, rf_extent), IterVarKind::DataPar);
  rf_axes.insert(rf_axes.begin() + factor_axis, k_axis);
  std::unordered_map<const Variable*, Expr> sub;
  for (size_t d = 0; d < c->axis.size(); ++d) sub[c->axis[d].var().get()] = rf_axes[d < static_cast<size_t>(factor_axis) ? d : d + 1].var();
  std::vector<IterVar> rf_reduce;
  std::unordered_map<const Variable*, Expr> leaf_sub = {{axis.var().get(), k_axis.var()}};
  for (const IterVar& l : s.leaf_iter_vars()) {
    if (l.kind() != IterVarKind::Reduce || l.same_as(axis)) continue;
    IterVar nr(Var(l.name()), Range(make_zero(rl.ranges.at(l.get()).extent.dtype()), rl.ranges.at(l.get()).extent), IterVarKind::Reduce);
    rf_reduce.push_back(nr);
    leaf_sub[l.var().get()] = nr.var();
  }
  for (const IterVar& r : c->reduce_axis) sub[r.var().get()] = substitute_map(rl.values.at(r.get()), leaf_sub);
  auto apply = [&](const Expr& e) { return arith::simplify(substitute_map(e, sub)); };
  // Guards of non-dividing reduce splits are in the old leaf variables.
  Expr cond = apply(red->condition);
  for (const Expr& g : rl.guards) cond = cond && substitute_map(g, leaf_sub);
  cond = arith::simplify(cond);
  Expr source = apply(red->source);
  Expr rf_body = rf_reduce.empty() ? (is_one(cond) ? source : select(cond, source, reduce_identity(red->reduce_kind, red->dtype)))
                                   : Reduce::make(red->reduce_kind, source, rf_reduce, cond);
  Operation rf(new ComputeOpNode(c->name + ".rf", c->dtype, rf_shape, rf_axes, rf_reduce, rf_body));
  // The original op now reduces over the factored dimension.
  std::vector<IterVar> out_axes = fresh_axes(c->shape, c->axis);
  IterVar k2 = reduce_axis(Range(0, rf_extent), axis.name() + ".v");
  std::vector<Expr> idx = vars_of(out_axes);
  idx.insert(idx.begin() + factor_axis, k2.var());
  Expr new_body = Reduce::make(red->reduce_kind, rf.output()(idx), {k2});
  Operation new_op(new ComputeOpNode(c->name, c->dtype, c->shape, out_axes, {k2}, new_body));
  int pos = state_->index_of(&s);
  Operation old = s.op();
  s.reset_op(new_op);
  state_->stages.insert(state_->stages.begin() + pos, std::make_unique<Stage>(state_.get(), rf, false));
  state_->replace_dataflow({{old.get(), new_op}});
  state_->record(std::move(step));
  return rf.output();
}

void RFactor::fields(FieldVisitor& v) { v.axis(axis), v.integer(factor_axis); }
void RFactor::apply(Schedule& sch) const {
  Stage& s = replay_stage(sch, stage.index);
  sch.rfactor(s.op().output(), replay_leaf(s, axis), factor_axis);
}
void RFactor::python(PythonWriter& w) const {
  std::string src = w.tensor(stage), ax = w.axis(stage, axis);
  w.forget_axes(stage);
  std::string var = w.insert_stage(stage.index, stage.name + ".rf");
  w.line(var + " = s.rfactor(" + src + ", " + ax + ", factor_axis=" + std::to_string(factor_axis) + ")");
}

}  // namespace kiln::te
