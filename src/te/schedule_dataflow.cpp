// The primitives that change the dataflow of a schedule by adding stages:
// cache_read, cache_write and rfactor. Ops are immutable, so a stage whose
// body must read a new tensor gets a new op (same axes, so its loop
// transformations stay valid), and its readers are rewritten in turn.
#include <algorithm>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/support/error.h"
#include "kiln/te/schedule.h"

namespace kiln::te {

static const ComputeOpNode* as_compute(const Operation& op) { return op->kind == OpKind::Compute ? static_cast<const ComputeOpNode*>(op.get()) : nullptr; }

static Operation with_body(const ComputeOpNode* c, Expr body) {
  return Operation(new ComputeOpNode(c->name, c->dtype, c->shape, c->axis, c->reduce_axis, std::move(body)));
}

static Expr redirect_reads(const Expr& body, const std::unordered_map<const OperationNode*, Operation>& map) {
  return replace_tensor_reads(body, [&](const TensorNode* t, const std::vector<Expr>& idx) -> Expr {
    auto it = map.find(t->op.get());
    if (it == map.end()) return Expr();
    return it->second.output()(idx);
  });
}

void ScheduleState::replace_dataflow(const std::unordered_map<const OperationNode*, Operation>& replaced) {
  std::unordered_map<const OperationNode*, Operation> map = replaced;
  for (const auto& [old_op, new_op] : replaced) replaced_ops[old_op] = new_op;
  for (auto& s : stages) {
    const ComputeOpNode* c = as_compute(s->op());
    if (!c) continue;
    Expr body = redirect_reads(c->body, map);
    if (body.same_as(c->body)) continue;
    Operation op = with_body(c, body);
    map[c] = op;
    replaced_ops[c] = op;
    s->op_ = op;  // same axes: the stage's loops stay valid
  }
}

static bool reads(const Operation& reader, const Operation& producer) {
  for (const Tensor& t : reader->input_tensors())
    if (t.op().same_as(producer)) return true;
  return false;
}

// Fresh data-parallel axes for a new op of `shape`, named after `like` where given.
static std::vector<IterVar> fresh_axes(const std::vector<Expr>& shape, const std::vector<IterVar>& like) {
  std::vector<IterVar> axes;
  for (size_t d = 0; d < shape.size(); ++d) {
    std::string name = d < like.size() ? like[d].name() : "ax" + std::to_string(d);
    axes.emplace_back(Var(name), Range(0, shape[d]), IterVarKind::DataPar);
  }
  return axes;
}

static std::vector<Expr> vars_of(const std::vector<IterVar>& axes) {
  std::vector<Expr> v;
  for (const IterVar& a : axes) v.push_back(a.var());
  return v;
}

Tensor Schedule::cache_read(const Tensor& tensor, const std::string& scope, const std::vector<Tensor>& readers) {
  Stage& src = (*this)[tensor];
  KILN_USER_CHECK(!scope.empty()) << "cache_read of '" << src.name() << "': the scope is empty; use \"local\", \"global\" or \"shared\"";
  KILN_USER_CHECK(!readers.empty()) << "cache_read of '" << src.name() << "' needs at least one reader";
  TraceStep step;
  step.kind = "cache_read";
  step.stage = state_->index_of(&src);
  step.stage_name = src.name();
  step.strings = {scope};
  std::vector<Stage*> reader_stages;
  for (const Tensor& r : readers) {
    Stage& rs = (*this)[r];
    KILN_USER_CHECK(reads(rs.op(), src.op())) << "cache_read of '" << src.name() << "': stage '" << rs.name() << "' does not read it; readers must be stages that read the tensor";
    reader_stages.push_back(&rs);
    step.stages.push_back(state_->index_of(&rs));
  }
  Tensor t = src.op().output();
  std::vector<IterVar> axes = fresh_axes(t.shape(), {});
  Operation cache(new ComputeOpNode(t.name() + "." + scope, t.dtype(), t.shape(), axes, {}, t(vars_of(axes))));
  int pos = state_->index_of(&src) + 1;
  auto stage = std::make_unique<Stage>(state_.get(), cache, false);
  stage->scope_ = scope;
  state_->stages.insert(state_->stages.begin() + pos, std::move(stage));
  // Only the chosen readers switch to the copy; their own readers follow.
  std::unordered_map<const OperationNode*, Operation> changed;
  std::unordered_map<const OperationNode*, Operation> to_cache = {{src.op().get(), cache}};
  for (Stage* rs : reader_stages) {
    const ComputeOpNode* c = as_compute(rs->op());
    Operation op = with_body(c, redirect_reads(c->body, to_cache));
    changed[c] = op;
    rs->op_ = op;
  }
  state_->replace_dataflow(changed);
  state_->record(std::move(step));
  return cache.output();
}

Tensor Schedule::pack(const Tensor& tensor, const std::vector<Tensor>& readers, int dim, int factor) {
  Stage& src = (*this)[tensor];
  Tensor t = src.op().output();
  KILN_USER_CHECK(dim >= 0 && dim < t.ndim()) << "pack of '" << src.name() << "': dimension " << dim << " is out of range for a " << t.ndim() << "-D tensor";
  const int64_t* extent = as_const_int(t.shape()[dim]);
  KILN_USER_CHECK(factor > 0 && extent && *extent % factor == 0)
      << "pack of '" << src.name() << "': dimension " << dim << " (extent " << (extent ? std::to_string(*extent) : "symbolic") << ") must be a constant multiple of the factor " << factor;
  KILN_USER_CHECK(!readers.empty()) << "pack of '" << src.name() << "' needs at least one reader";
  TraceStep step;
  step.kind = "pack";
  step.stage = state_->index_of(&src);
  step.stage_name = src.name();
  step.ints = {dim, factor};
  std::vector<Stage*> reader_stages;
  for (const Tensor& r : readers) {
    Stage& rs = (*this)[r];
    KILN_USER_CHECK(reads(rs.op(), src.op())) << "pack of '" << src.name() << "': stage '" << rs.name() << "' does not read it; readers must be stages that read the tensor";
    KILN_USER_CHECK(std::find(reader_stages.begin(), reader_stages.end(), &rs) == reader_stages.end()) << "pack of '" << src.name() << "': reader '" << rs.name() << "' is listed twice";
    reader_stages.push_back(&rs);
    step.stages.push_back(state_->index_of(&rs));
  }
  // packed[o, rest..., l] = t[rest with dimension dim = o*factor + l]
  std::vector<Expr> shape = {Expr(static_cast<int>(*extent / factor))};
  for (int d = 0; d < t.ndim(); ++d)
    if (d != dim) shape.push_back(t.shape()[d]);
  shape.push_back(factor);
  std::vector<IterVar> axes = fresh_axes(shape, {});
  std::vector<Expr> src_idx;
  for (int d = 0, r = 1; d < t.ndim(); ++d) src_idx.push_back(d == dim ? axes[0].var() * factor + axes.back().var() : Expr(axes[r++].var()));
  Operation packed(new ComputeOpNode(t.name() + ".packed", t.dtype(), shape, axes, {}, t(src_idx)));
  state_->stages.insert(state_->stages.begin() + state_->index_of(&src) + 1, std::make_unique<Stage>(state_.get(), packed, false));
  std::unordered_map<const OperationNode*, Operation> changed;
  for (Stage* rs : reader_stages) {
    const ComputeOpNode* c = as_compute(rs->op());
    Expr body = replace_tensor_reads(c->body, [&](const TensorNode* tn, const std::vector<Expr>& idx) -> Expr {
      if (tn->op.get() != src.op().get()) return Expr();
      std::vector<Expr> p = {floordiv(idx[dim], factor)};
      for (int d = 0; d < t.ndim(); ++d)
        if (d != dim) p.push_back(idx[d]);
      p.push_back(floormod(idx[dim], factor));
      return packed.output()(p);
    });
    Operation op = with_body(c, body);
    changed[c] = op;
    rs->op_ = op;
  }
  state_->replace_dataflow(changed);
  state_->record(std::move(step));
  return packed.output();
}

Tensor Schedule::cache_write(const Tensor& tensor, const std::string& scope) {
  Stage& s = (*this)[tensor];
  const ComputeOpNode* c = as_compute(s.op());
  KILN_USER_CHECK(c) << "cache_write of '" << s.name() << "': it is a placeholder; only computed tensors can be cached for writing";
  KILN_USER_CHECK(!scope.empty()) << "cache_write of '" << s.name() << "': the scope is empty; use \"local\", \"global\" or \"shared\"";
  KILN_USER_CHECK(s.relations().empty() && s.attrs_.empty() && s.attach_type() == AttachType::Root)
      << "cache_write of '" << s.name() << "' must come before any other primitive on that stage (it replaces the stage's loops)";
  TraceStep step;
  step.kind = "cache_write";
  step.stage = state_->index_of(&s);
  step.stage_name = s.name();
  step.strings = {scope};
  // The cache computes the original body over fresh axes; the stage becomes a copy out of it.
  std::vector<IterVar> axes = fresh_axes(c->shape, c->axis);
  Expr body = substitute(c->body, [&](const Variable* v) -> Expr {
    for (size_t d = 0; d < c->axis.size(); ++d)
      if (c->axis[d].var().get() == v) return axes[d].var();
    return Expr();
  });
  Operation cache(new ComputeOpNode(c->name + "." + scope, c->dtype, c->shape, axes, c->reduce_axis, body));
  std::vector<IterVar> out_axes = fresh_axes(c->shape, c->axis);
  Operation copy(new ComputeOpNode(c->name, c->dtype, c->shape, out_axes, {}, cache.output()(vars_of(out_axes))));
  int pos = state_->index_of(&s);
  Operation old = s.op();
  s.reset_op(copy);
  auto stage = std::make_unique<Stage>(state_.get(), cache, false);
  stage->scope_ = scope;
  state_->stages.insert(state_->stages.begin() + pos, std::move(stage));
  state_->replace_dataflow({{old.get(), copy}});
  state_->record(std::move(step));
  return cache.output();
}

namespace {
// Ranges and values of a stage's reduce variables, from its reduce relations alone.
struct ReduceLoops {
  std::unordered_map<const IterVarNode*, int64_t> extent;
  std::unordered_map<const IterVarNode*, Expr> value;
  std::vector<Expr> guards;
};

ReduceLoops reduce_loops(const Stage& s, const ComputeOpNode* c) {
  ReduceLoops rl;
  for (const IterVar& r : c->reduce_axis) {
    const int64_t* e = as_const_int(r.dom().extent);
    KILN_USER_CHECK(e && is_zero(r.dom().min)) << "rfactor on '" << s.name() << "': reduce axis '" << r.name() << "' needs a constant range starting at 0";
    rl.extent[r.get()] = *e;
  }
  for (const IterVarRelation& rel : s.relations()) {
    if (rel.parent.kind() != IterVarKind::Reduce) continue;
    if (rel.kind == IterVarRelation::Kind::Split) {
      int64_t e = rl.extent.at(rel.parent.get());
      int64_t f = rel.factor.defined() ? *as_const_int(rel.factor) : (e + *as_const_int(rel.nparts) - 1) / *as_const_int(rel.nparts);
      rl.extent[rel.outer.get()] = (e + f - 1) / f;
      rl.extent[rel.inner.get()] = std::min(f, e);
    } else {
      rl.extent[rel.parent.get()] = rl.extent.at(rel.outer.get()) * rl.extent.at(rel.inner.get());
    }
  }
  for (const IterVar& l : s.leaf_iter_vars())
    if (l.kind() == IterVarKind::Reduce) rl.value[l.get()] = l.var();
  const auto& rels = s.relations();
  for (auto it = rels.rbegin(); it != rels.rend(); ++it) {
    if (it->parent.kind() != IterVarKind::Reduce) continue;
    if (it->kind == IterVarRelation::Kind::Split) {
      Expr f = Expr(static_cast<int>(rl.extent.at(it->inner.get())));
      if (it->factor.defined()) f = it->factor;
      Expr v = rl.value.at(it->outer.get()) * f + rl.value.at(it->inner.get());
      rl.value[it->parent.get()] = v;
      int64_t e = rl.extent.at(it->parent.get());
      if (rl.extent.at(it->outer.get()) * *as_const_int(f) != e) rl.guards.push_back(v < static_cast<int>(e));
    } else {
      Expr inner_ext = Expr(static_cast<int>(rl.extent.at(it->inner.get())));
      rl.value[it->outer.get()] = floordiv(rl.value.at(it->parent.get()), inner_ext);
      rl.value[it->inner.get()] = floormod(rl.value.at(it->parent.get()), inner_ext);
    }
  }
  return rl;
}
}  // namespace

Tensor Schedule::rfactor(const Tensor& tensor, const IterVar& axis, int factor_axis) {
  Stage& s = (*this)[tensor];
  const ComputeOpNode* c = as_compute(s.op());
  KILN_USER_CHECK(c && c->is_reduction()) << "rfactor of '" << s.name() << "': it is not a reduction";
  int pos_in_leaves = s.leaf_index(axis, "rfactor");
  KILN_USER_CHECK(axis.kind() == IterVarKind::Reduce) << "rfactor of '" << s.name() << "': axis '" << axis.name() << "' is not a reduction axis";
  KILN_USER_CHECK(factor_axis >= 0 && factor_axis <= static_cast<int>(c->axis.size())) << "rfactor of '" << s.name() << "': factor_axis " << factor_axis << " must be in [0, " << c->axis.size() << "]";
  TraceStep step;
  step.kind = "rfactor";
  step.stage = state_->index_of(&s);
  step.stage_name = s.name();
  step.axes = {pos_in_leaves};
  step.axis_names = {axis.name()};
  step.ints = {factor_axis};

  const Reduce* red = c->body.as<Reduce>();
  ReduceLoops rl = reduce_loops(s, c);
  // The factored op: the chosen reduce loop becomes a data-parallel dimension.
  std::vector<Expr> rf_shape = c->shape;
  int rf_extent = static_cast<int>(rl.extent.at(axis.get()));
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
    IterVar nr(Var(l.name()), Range(0, static_cast<int>(rl.extent.at(l.get()))), IterVarKind::Reduce);
    rf_reduce.push_back(nr);
    leaf_sub[l.var().get()] = nr.var();
  }
  for (const IterVar& r : c->reduce_axis) sub[r.var().get()] = substitute(rl.value.at(r.get()), [&](const Variable* v) -> Expr { auto it = leaf_sub.find(v); return it == leaf_sub.end() ? Expr() : it->second; });
  auto apply = [&](const Expr& e) { return arith::simplify(substitute(e, [&](const Variable* v) -> Expr { auto it = sub.find(v); return it == sub.end() ? Expr() : it->second; })); };
  // Guards of non-dividing reduce splits are in the old leaf variables.
  Expr cond = apply(red->condition);
  for (const Expr& g : rl.guards) cond = cond && substitute(g, [&](const Variable* v) -> Expr { auto it = leaf_sub.find(v); return it == leaf_sub.end() ? Expr() : it->second; });
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

}  // namespace kiln::te
