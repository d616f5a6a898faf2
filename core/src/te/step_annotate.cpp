// The steps that annotate a leaf loop: vectorize, unroll, parallel, bind,
// pragma. Each: the primitive, its fields, its replay and its Python.
#include <algorithm>

#include "kiln/support/error.h"
#include "step_internal.h"

namespace kiln::te {

AxisRef Stage::set_annotation(const IterVar& axis, ForKind kind, const char* primitive, const std::string& tag) {
  check_not_placeholder(primitive);
  AxisRef ref = detail::leaf_ref(*this, axis, primitive);
  IterVarAttr& a = attrs_[axis.get()];
  a.kind = kind;
  a.thread_tag = tag;
  return ref;
}

// A one-axis annotation line: s[T].primitive(axis).
static void annotation_python(PythonWriter& w, const StageRef& stage, const AxisRef& axis, const char* primitive) {
  std::string st = w.stage(stage);
  w.line(st + "." + primitive + "(" + w.axis(stage, axis) + ")");
}

void Stage::vectorize(const IterVar& axis) {
  KILN_USER_CHECK(!axis.defined() || axis.kind() != IterVarKind::Reduce)
      << "vectorize on stage '" << name() << "': axis '" << axis.name() << "' is a reduction axis; only data-parallel axes can be vectorized (split the reduction and vectorize a data-parallel axis, or use rfactor)";
  AxisRef ref = set_annotation(axis, ForKind::Vectorized, "vectorize");
  owner_->record(Vectorize{detail::stage_ref(*owner_, *this), ref});
}

void Vectorize::fields(FieldVisitor& v) { v.axis(axis); }
void Vectorize::apply(Schedule& sch) const {
  Stage& s = detail::replay_stage(sch, stage.index);
  s.vectorize(detail::replay_leaf(s, axis));
}
void Vectorize::python(PythonWriter& w) const { annotation_python(w, stage, axis, kName); }

void Stage::unroll(const IterVar& axis) {
  AxisRef ref = set_annotation(axis, ForKind::Unrolled, "unroll");
  owner_->record(Unroll{detail::stage_ref(*owner_, *this), ref});
}

void Unroll::fields(FieldVisitor& v) { v.axis(axis); }
void Unroll::apply(Schedule& sch) const {
  Stage& s = detail::replay_stage(sch, stage.index);
  s.unroll(detail::replay_leaf(s, axis));
}
void Unroll::python(PythonWriter& w) const { annotation_python(w, stage, axis, kName); }

void Stage::parallel(const IterVar& axis) {
  KILN_USER_CHECK(!axis.defined() || axis.kind() != IterVarKind::Reduce)
      << "parallel on stage '" << name() << "': axis '" << axis.name() << "' is a reduction axis; parallel reductions race on the accumulator (use rfactor to parallelize a reduction)";
  AxisRef ref = set_annotation(axis, ForKind::Parallel, "parallel");
  owner_->record(Parallel{detail::stage_ref(*owner_, *this), ref});
}

void Parallel::fields(FieldVisitor& v) { v.axis(axis); }
void Parallel::apply(Schedule& sch) const {
  Stage& s = detail::replay_stage(sch, stage.index);
  s.parallel(detail::replay_leaf(s, axis));
}
void Parallel::python(PythonWriter& w) const { annotation_python(w, stage, axis, kName); }

void Stage::bind(const IterVar& axis, const std::string& tag) {
  static const char* const kTags[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z", "vthread"};
  bool known = std::find(std::begin(kTags), std::end(kTags), tag) != std::end(kTags);
  KILN_USER_CHECK(known) << "bind on stage '" << name() << "': unknown thread tag '" << tag << "'; use blockIdx.x/y/z, threadIdx.x/y/z or vthread";
  AxisRef ref = set_annotation(axis, ForKind::ThreadBinding, "bind", tag);
  owner_->record(Bind{detail::stage_ref(*owner_, *this), ref, tag});
}

void Bind::fields(FieldVisitor& v) { v.axis(axis), v.string(thread_tag); }
void Bind::apply(Schedule& sch) const {
  Stage& s = detail::replay_stage(sch, stage.index);
  s.bind(detail::replay_leaf(s, axis), thread_tag);
}
void Bind::python(PythonWriter& w) const {
  std::string st = w.stage(stage);
  w.line(st + ".bind(" + w.axis(stage, axis) + ", " + PythonWriter::quote(thread_tag) + ")");
}

void Stage::pragma(const IterVar& axis, const std::string& key, int value) {
  check_not_placeholder("pragma");
  KILN_USER_CHECK(!key.empty()) << "pragma on stage '" << name() << "' with an empty key";
  AxisRef ref = detail::leaf_ref(*this, axis, "pragma");
  attrs_[axis.get()].pragmas.emplace_back(key, Expr(value));
  owner_->record(Pragma{detail::stage_ref(*owner_, *this), ref, key, value});
}

void Stage::tensor_core(const IterVar& axis) { pragma(axis, "tensor_core", 1); }

void Pragma::fields(FieldVisitor& v) { v.axis(axis), v.string(key), v.integer(value); }
void Pragma::apply(Schedule& sch) const {
  Stage& s = detail::replay_stage(sch, stage.index);
  s.pragma(detail::replay_leaf(s, axis), key, value);
}
void Pragma::python(PythonWriter& w) const {
  std::string st = w.stage(stage);
  if (key == "tensor_core" && value == 1) return w.line(st + ".tensor_core(" + w.axis(stage, axis) + ")");
  w.line(st + ".pragma(" + w.axis(stage, axis) + ", " + PythonWriter::quote(key) + ", " + std::to_string(value) + ")");
}

}  // namespace kiln::te
