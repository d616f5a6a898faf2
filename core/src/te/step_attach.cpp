// The steps that choose where a stage is computed and stored: compute_at,
// compute_inline, compute_root, storage_align. Each: the primitive, its
// fields, its replay and its Python.
#include "kiln/support/error.h"
#include "step_internal.h"

namespace kiln::te {

// True when `reader` reads `producer`, directly or through intermediate ops.
static bool consumes(const Operation& reader, const Operation& producer) {
  for (const Tensor& t : reader->input_tensors())
    if (t.op().same_as(producer) || consumes(t.op(), producer)) return true;
  return false;
}

void Stage::set_attach(AttachType type, Stage* parent, IterVar axis) {
  attach_type_ = type;
  attach_stage_ = parent;
  attach_axis_ = std::move(axis);
}

// ---------------------------------------------------------------- compute_at

void Stage::compute_at(Stage& parent, const IterVar& axis) {
  check_not_placeholder("compute_at");
  KILN_USER_CHECK(&parent != this) << "compute_at of stage '" << name() << "' at itself";
  AxisRef ref = detail::leaf_ref(parent, axis, "compute_at");
  KILN_USER_CHECK(consumes(parent.op(), op_)) << "compute_at of stage '" << name() << "' at stage '" << parent.name() << "': '" << parent.name() << "' does not read '" << name()
                                               << "' (directly or through other stages); a stage can only be computed inside a stage that consumes it";
  owner_->record(ComputeAt{detail::stage_ref(*owner_, *this), owner_->index_of(&parent), ref});
  // The attachment names the axis as given; attach_ivar() follows it through later splits and fuses.
  set_attach(AttachType::Scope, &parent, axis);
}

void ComputeAt::fields(FieldVisitor& v) { v.stage(parent), v.axis(axis); }
void ComputeAt::apply(Schedule& sch) const {
  Stage& s = detail::replay_stage(sch, stage.index);
  Stage& p = detail::replay_stage(sch, parent);
  s.compute_at(p, detail::replay_leaf(p, axis));
}
void ComputeAt::python(PythonWriter& w) const {
  std::string st = w.stage(stage), p = w.stage(parent);
  w.line(st + ".compute_at(" + p + ", " + w.axis({parent, ""}, axis) + ")");
}

// ---------------------------------------------------------------- compute_inline / compute_root

void Stage::compute_inline() {
  check_not_placeholder("compute_inline");
  KILN_USER_CHECK(!static_cast<const ComputeOpNode*>(op_.get())->is_reduction())
      << "compute_inline of stage '" << name() << "': it is a reduction; only elementwise (non-reduction) stages can be inlined into their consumers";
  KILN_USER_CHECK(!is_output_) << "compute_inline of stage '" << name() << "': it is an output of the schedule and must be stored";
  owner_->record(ComputeInline{detail::stage_ref(*owner_, *this)});
  set_attach(AttachType::Inline, nullptr, IterVar());
}

void ComputeInline::fields(FieldVisitor&) {}
void ComputeInline::apply(Schedule& sch) const { detail::replay_stage(sch, stage.index).compute_inline(); }
void ComputeInline::python(PythonWriter& w) const { w.line(w.stage(stage) + ".compute_inline()"); }

void Stage::compute_root() {
  check_not_placeholder("compute_root");
  owner_->record(ComputeRoot{detail::stage_ref(*owner_, *this)});
  set_attach(AttachType::Root, nullptr, IterVar());
}

void ComputeRoot::fields(FieldVisitor&) {}
void ComputeRoot::apply(Schedule& sch) const { detail::replay_stage(sch, stage.index).compute_root(); }
void ComputeRoot::python(PythonWriter& w) const { w.line(w.stage(stage) + ".compute_root()"); }

// ---------------------------------------------------------------- storage_align

void Stage::storage_align(const IterVar& axis, int factor, int offset) {
  check_not_placeholder("storage_align");
  int dim = -1;
  for (size_t d = 0; d < root_iter_vars_.size(); ++d)
    if (root_iter_vars_[d].same_as(axis) && axis.kind() == IterVarKind::DataPar) dim = static_cast<int>(d);
  KILN_USER_CHECK(dim >= 0) << "storage_align on stage '" << name() << "': axis '" << (axis.defined() ? axis.name() : "?") << "' must be one of the stage's original data-parallel axes (a dimension of its buffer)";
  KILN_USER_CHECK(factor > 0 && offset >= 0 && offset < factor) << "storage_align on stage '" << name() << "': need factor > 0 and 0 <= offset < factor, got factor " << factor << ", offset " << offset;
  owner_->record(StorageAlign{detail::stage_ref(*owner_, *this), {dim, axis.name()}, factor, offset});
  storage_aligns_.emplace_back(dim, factor, offset);
}

void StorageAlign::fields(FieldVisitor& v) { v.axis(dim), v.integer(factor), v.integer(offset); }
void StorageAlign::apply(Schedule& sch) const {
  Stage& s = detail::replay_stage(sch, stage.index);
  s.storage_align(detail::replay_root(s, dim), factor, offset);
}
void StorageAlign::python(PythonWriter& w) const {
  std::string st = w.stage(stage);
  w.line(st + ".storage_align(" + st + ".op.axis[" + std::to_string(dim.index) + "], " + std::to_string(factor) + ", " + std::to_string(offset) + ")");
}

}  // namespace kiln::te
