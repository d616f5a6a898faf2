// The steps that reshape a stage's loops: split, split_nparts, fuse,
// reorder (tile is two splits and a reorder). Each: the primitive, its
// fields, its replay and its Python.
#include <algorithm>

#include "kiln/support/error.h"
#include "step_internal.h"

namespace kiln::te {

// ---------------------------------------------------------------- split

std::pair<IterVar, IterVar> Stage::split_by(const IterVar& axis, Expr factor, Expr nparts) {
  int pos = leaf_index(axis, "split");
  IterVar outer = new_iter_var(axis.name() + ".outer", axis.kind());
  IterVar inner = new_iter_var(axis.name() + ".inner", axis.kind());
  relations_.push_back({IterVarRelation::Kind::Split, axis, outer, inner, std::move(factor), std::move(nparts)});
  leaf_iter_vars_.erase(leaf_iter_vars_.begin() + pos);
  leaf_iter_vars_.insert(leaf_iter_vars_.begin() + pos, {outer, inner});
  return {outer, inner};
}

std::pair<IterVar, IterVar> Stage::split(const IterVar& axis, int factor) {
  check_not_placeholder("split");
  AxisRef ref = detail::leaf_ref(*this, axis, "split");
  KILN_USER_CHECK(factor > 0) << "split of axis '" << axis.name() << "' of stage '" << name() << "' by factor " << factor << ": the factor must be positive";
  owner_->record(Split{detail::stage_ref(*owner_, *this), ref, factor});
  return split_by(axis, Expr(factor), Expr());
}

void Split::fields(FieldVisitor& v) { v.axis(axis), v.integer(factor); }
void Split::apply(Schedule& sch) const {
  Stage& s = detail::replay_stage(sch, stage.index);
  s.split(detail::replay_leaf(s, axis), factor);
}
void Split::python(PythonWriter& w) const {
  std::string st = w.stage(stage), ax = w.axis(stage, axis);
  std::string o = w.bind_axis(stage, axis.name + ".outer"), i = w.bind_axis(stage, axis.name + ".inner");
  w.line(o + ", " + i + " = " + st + ".split(" + ax + ", factor=" + std::to_string(factor) + ")");
}

std::pair<IterVar, IterVar> Stage::split_nparts(const IterVar& axis, int nparts) {
  check_not_placeholder("split");
  AxisRef ref = detail::leaf_ref(*this, axis, "split");
  KILN_USER_CHECK(nparts > 0) << "split of axis '" << axis.name() << "' of stage '" << name() << "' into " << nparts << " parts: nparts must be positive";
  owner_->record(SplitNparts{detail::stage_ref(*owner_, *this), ref, nparts});
  return split_by(axis, Expr(), Expr(nparts));
}

void SplitNparts::fields(FieldVisitor& v) { v.axis(axis), v.integer(nparts); }
void SplitNparts::apply(Schedule& sch) const {
  Stage& s = detail::replay_stage(sch, stage.index);
  s.split_nparts(detail::replay_leaf(s, axis), nparts);
}
void SplitNparts::python(PythonWriter& w) const {
  std::string st = w.stage(stage), ax = w.axis(stage, axis);
  std::string o = w.bind_axis(stage, axis.name + ".outer"), i = w.bind_axis(stage, axis.name + ".inner");
  w.line(o + ", " + i + " = " + st + ".split(" + ax + ", nparts=" + std::to_string(nparts) + ")");
}

std::vector<IterVar> Stage::tile(const IterVar& x, const IterVar& y, int x_factor, int y_factor) {
  auto [xo, xi] = split(x, x_factor);
  auto [yo, yi] = split(y, y_factor);
  reorder({xo, yo, xi, yi});
  return {xo, yo, xi, yi};
}

// ---------------------------------------------------------------- fuse

IterVar Stage::fuse(const IterVar& outer, const IterVar& inner) {
  check_not_placeholder("fuse");
  int po = leaf_index(outer, "fuse"), pi = leaf_index(inner, "fuse");
  KILN_USER_CHECK(pi == po + 1) << "fuse on stage '" << name() << "': axes '" << outer.name() << "' and '" << inner.name()
                                << "' must be adjacent leaf axes, outer first; the leaf axes are " << detail::leaf_names(leaf_iter_vars_) << " (reorder them first)";
  KILN_USER_CHECK(outer.kind() == inner.kind()) << "fuse on stage '" << name() << "': cannot fuse reduction axis with data-parallel axis ('" << outer.name() << "', '" << inner.name() << "')";
  owner_->record(Fuse{detail::stage_ref(*owner_, *this), {po, outer.name()}, {pi, inner.name()}});
  IterVar fused = new_iter_var(outer.name() + "." + inner.name() + ".fused", outer.kind());
  relations_.push_back({IterVarRelation::Kind::Fuse, fused, outer, inner, Expr(), Expr()});
  leaf_iter_vars_.erase(leaf_iter_vars_.begin() + po, leaf_iter_vars_.begin() + pi + 1);
  leaf_iter_vars_.insert(leaf_iter_vars_.begin() + po, fused);
  return fused;
}

IterVar Stage::fuse(const std::vector<IterVar>& given) {
  KILN_USER_CHECK(!given.empty()) << "fuse on stage '" << name() << "' with no axes";
  const std::vector<IterVar> axes = given;  // a copy: `given` may be this stage's leaves, which each fuse changes
  IterVar acc = axes[0];
  for (size_t i = 1; i < axes.size(); ++i) acc = fuse(acc, axes[i]);
  return acc;
}

void Fuse::fields(FieldVisitor& v) { v.axis(outer), v.axis(inner); }
void Fuse::apply(Schedule& sch) const {
  Stage& s = detail::replay_stage(sch, stage.index);
  s.fuse(detail::replay_leaf(s, outer), detail::replay_leaf(s, inner));
}
void Fuse::python(PythonWriter& w) const {
  std::string st = w.stage(stage), a = w.axis(stage, outer), b = w.axis(stage, inner);
  std::string f = w.bind_axis(stage, outer.name + "." + inner.name + ".fused");
  w.line(f + " = " + st + ".fuse(" + a + ", " + b + ")");
}

// ---------------------------------------------------------------- reorder

void Stage::reorder(const std::vector<IterVar>& order) {
  check_not_placeholder("reorder");
  Reorder step{detail::stage_ref(*owner_, *this), {}};
  std::vector<int> pos;
  for (const IterVar& iv : order) {
    step.order.push_back(detail::leaf_ref(*this, iv, "reorder"));
    pos.push_back(step.order.back().index);
  }
  std::sort(pos.begin(), pos.end());
  KILN_USER_CHECK(std::adjacent_find(pos.begin(), pos.end()) == pos.end()) << "reorder on stage '" << name() << "': an axis appears twice";
  for (size_t i = 0; i < pos.size(); ++i) leaf_iter_vars_[pos[i]] = order[i];
  owner_->record(std::move(step));
}

void Reorder::fields(FieldVisitor& v) { v.axes(order); }
void Reorder::apply(Schedule& sch) const {
  Stage& s = detail::replay_stage(sch, stage.index);
  std::vector<IterVar> ivs;
  for (const AxisRef& a : order) ivs.push_back(detail::replay_leaf(s, a));
  s.reorder(ivs);
}
void Reorder::python(PythonWriter& w) const {
  std::string text = w.stage(stage) + ".reorder(";
  for (size_t i = 0; i < order.size(); ++i) text += (i ? ", " : "") + w.axis(stage, order[i]);
  w.line(text + ")");
}

}  // namespace kiln::te
