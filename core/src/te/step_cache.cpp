// The cache steps: cache_read (a stage copies a tensor into a scope for
// chosen readers) and cache_write (a stage computes into a scope and the
// original becomes a copy out of it). Each: the primitive, its fields, its
// replay and its Python.
#include "kiln/ir/functor.h"
#include "kiln/support/error.h"
#include "step_internal.h"

namespace kiln::te {

using namespace detail;  // NOLINT: the step helpers

// ---------------------------------------------------------------- cache_read

Tensor Schedule::cache_read(const Tensor& tensor, const std::string& scope, const std::vector<Tensor>& readers) {
  Stage& src = (*this)[tensor];
  KILN_USER_CHECK(!scope.empty()) << "cache_read of '" << src.name() << "': the scope is empty; use \"local\", \"global\" or \"shared\"";
  KILN_USER_CHECK(!readers.empty()) << "cache_read of '" << src.name() << "' needs at least one reader";
  CacheRead step{stage_ref(*state_, src), scope, {}};
  std::vector<Stage*> reader_stages;
  for (const Tensor& r : readers) {
    Stage& rs = (*this)[r];
    KILN_USER_CHECK(reads(rs.op(), src.op())) << "cache_read of '" << src.name() << "': stage '" << rs.name() << "' does not read it; readers must be stages that read the tensor";
    reader_stages.push_back(&rs);
    step.readers.push_back(state_->index_of(&rs));
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

void CacheRead::fields(FieldVisitor& v) { v.string(scope), v.stages(readers); }
void CacheRead::apply(Schedule& sch) const {
  sch.cache_read(replay_stage(sch, stage.index).op().output(), scope, replay_tensors(sch, readers));
}
void CacheRead::python(PythonWriter& w) const {
  std::string src = w.tensor(stage), rs;
  for (size_t i = 0; i < readers.size(); ++i) rs += (i ? ", " : "") + w.tensor(readers[i]);
  std::string var = w.insert_stage(stage.index + 1, stage.name + "." + scope);
  w.line(var + " = s.cache_read(" + src + ", " + PythonWriter::quote(scope) + ", [" + rs + "])");
}

// ---------------------------------------------------------------- cache_write

Tensor Schedule::cache_write(const Tensor& tensor, const std::string& scope) {
  Stage& s = (*this)[tensor];
  const ComputeOpNode* c = as_compute(s.op());
  KILN_USER_CHECK(c) << "cache_write of '" << s.name() << "': it is a placeholder; only computed tensors can be cached for writing";
  KILN_USER_CHECK(!scope.empty()) << "cache_write of '" << s.name() << "': the scope is empty; use \"local\", \"global\" or \"shared\"";
  KILN_USER_CHECK(s.relations().empty() && s.attrs_.empty() && s.attach_type() == AttachType::Root)
      << "cache_write of '" << s.name() << "' must come before any other primitive on that stage (it replaces the stage's loops)";
  check_no_attached(*state_, s, "cache_write");
  CacheWrite step{stage_ref(*state_, s), scope};
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

void CacheWrite::fields(FieldVisitor& v) { v.string(scope); }
void CacheWrite::apply(Schedule& sch) const { sch.cache_write(replay_stage(sch, stage.index).op().output(), scope); }
void CacheWrite::python(PythonWriter& w) const {
  std::string src = w.tensor(stage);
  w.forget_axes(stage);
  std::string var = w.insert_stage(stage.index, stage.name + "." + scope);
  w.line(var + " = s.cache_write(" + src + ", " + PythonWriter::quote(scope) + ")");
}

}  // namespace kiln::te
