#include "kiln/te/schedule.h"

#include <algorithm>
#include <sstream>

#include "kiln/support/error.h"

namespace kiln::te {

static std::string leaf_names(const std::vector<IterVar>& leaves) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < leaves.size(); ++i) os << (i ? ", " : "") << leaves[i].name();
  os << "]";
  return os.str();
}

Stage::Stage(ScheduleState* owner, Operation op, bool is_output) : owner_(owner), is_output_(is_output) { reset_op(std::move(op)); }

void Stage::reset_op(Operation op) {
  op_ = std::move(op);
  root_iter_vars_.clear();
  if (op_->kind == OpKind::Compute) {
    const auto* c = static_cast<const ComputeOpNode*>(op_.get());
    root_iter_vars_ = c->axis;
    root_iter_vars_.insert(root_iter_vars_.end(), c->reduce_axis.begin(), c->reduce_axis.end());
  }
  leaf_iter_vars_ = root_iter_vars_;
  relations_.clear();
  attrs_.clear();
}

const IterVarAttr* Stage::attr(const IterVar& iv) const {
  auto it = attrs_.find(iv.get());
  return it == attrs_.end() ? nullptr : &it->second;
}

IterVar Stage::axis(const std::string& name) const {
  for (const IterVar& iv : leaf_iter_vars_)
    if (iv.name() == name) return iv;
  KILN_USER_ERROR() << "stage '" << this->name() << "' has no leaf axis '" << name << "'; its leaf axes are " << leaf_names(leaf_iter_vars_);
  return IterVar();
}

int Stage::leaf_index(const IterVar& iv, const char* primitive) const {
  KILN_USER_CHECK(iv.defined()) << primitive << " on stage '" << name() << "': the axis is undefined";
  for (size_t i = 0; i < leaf_iter_vars_.size(); ++i)
    if (leaf_iter_vars_[i].same_as(iv)) return static_cast<int>(i);
  bool was_leaf = std::find_if(relations_.begin(), relations_.end(), [&](const IterVarRelation& r) { return r.parent.same_as(iv) || r.outer.same_as(iv) || r.inner.same_as(iv); }) != relations_.end();
  KILN_USER_ERROR() << primitive << " on stage '" << name() << "': axis '" << iv.name() << "' is not a leaf axis of this stage"
                    << (was_leaf ? " any more (it was split or fused)" : " (it belongs to another stage)") << "; the leaf axes are " << leaf_names(leaf_iter_vars_);
  return -1;
}

void Stage::check_not_placeholder(const char* primitive) const {
  KILN_USER_CHECK(!is_placeholder()) << primitive << " on '" << name() << "': it is an input placeholder and has no loops to schedule";
}

IterVar Stage::new_iter_var(const std::string& base, IterVarKind kind) {
  std::string name = base;
  auto taken = [&](const std::string& n) {
    for (const IterVar& iv : root_iter_vars_)
      if (iv.name() == n) return true;
    for (const IterVarRelation& r : relations_)
      for (const IterVar* iv : {&r.parent, &r.outer, &r.inner})
        if (iv->defined() && iv->name() == n) return true;
    return false;
  };
  for (int k = 1; taken(name); ++k) name = base + "." + std::to_string(k);
  return IterVar(Var(name), Range(), kind);
}

static TraceStep make_step(const std::string& kind, const Stage& s, ScheduleState* owner) {
  TraceStep step;
  step.kind = kind;
  step.stage = owner->index_of(&s);
  step.stage_name = s.name();
  return step;
}

static void add_axis(TraceStep* step, const Stage& s, const IterVar& iv) {
  step->axes.push_back(s.leaf_index(iv, step->kind.c_str()));
  step->axis_names.push_back(iv.name());
}

std::pair<IterVar, IterVar> Stage::split(const IterVar& axis, int factor) {
  check_not_placeholder("split");
  int pos = leaf_index(axis, "split");
  KILN_USER_CHECK(factor > 0) << "split of axis '" << axis.name() << "' of stage '" << name() << "' by factor " << factor << ": the factor must be positive";
  TraceStep step = make_step("split", *this, owner_);
  add_axis(&step, *this, axis);
  step.ints = {factor};
  IterVar outer = new_iter_var(axis.name() + ".outer", axis.kind());
  IterVar inner = new_iter_var(axis.name() + ".inner", axis.kind());
  relations_.push_back({IterVarRelation::Kind::Split, axis, outer, inner, Expr(factor), Expr()});
  leaf_iter_vars_.erase(leaf_iter_vars_.begin() + pos);
  leaf_iter_vars_.insert(leaf_iter_vars_.begin() + pos, {outer, inner});
  owner_->record(std::move(step));
  return {outer, inner};
}

std::pair<IterVar, IterVar> Stage::split_nparts(const IterVar& axis, int nparts) {
  check_not_placeholder("split");
  int pos = leaf_index(axis, "split");
  KILN_USER_CHECK(nparts > 0) << "split of axis '" << axis.name() << "' of stage '" << name() << "' into " << nparts << " parts: nparts must be positive";
  TraceStep step = make_step("split_nparts", *this, owner_);
  add_axis(&step, *this, axis);
  step.ints = {nparts};
  IterVar outer = new_iter_var(axis.name() + ".outer", axis.kind());
  IterVar inner = new_iter_var(axis.name() + ".inner", axis.kind());
  relations_.push_back({IterVarRelation::Kind::Split, axis, outer, inner, Expr(), Expr(nparts)});
  leaf_iter_vars_.erase(leaf_iter_vars_.begin() + pos);
  leaf_iter_vars_.insert(leaf_iter_vars_.begin() + pos, {outer, inner});
  owner_->record(std::move(step));
  return {outer, inner};
}

std::vector<IterVar> Stage::tile(const IterVar& x, const IterVar& y, int x_factor, int y_factor) {
  auto [xo, xi] = split(x, x_factor);
  auto [yo, yi] = split(y, y_factor);
  reorder({xo, yo, xi, yi});
  return {xo, yo, xi, yi};
}

IterVar Stage::fuse(const IterVar& outer, const IterVar& inner) {
  check_not_placeholder("fuse");
  int po = leaf_index(outer, "fuse"), pi = leaf_index(inner, "fuse");
  KILN_USER_CHECK(pi == po + 1) << "fuse on stage '" << name() << "': axes '" << outer.name() << "' and '" << inner.name()
                                << "' must be adjacent leaf axes, outer first; the leaf axes are " << leaf_names(leaf_iter_vars_) << " (reorder them first)";
  KILN_USER_CHECK(outer.kind() == inner.kind()) << "fuse on stage '" << name() << "': cannot fuse reduction axis with data-parallel axis ('" << outer.name() << "', '" << inner.name() << "')";
  TraceStep step = make_step("fuse", *this, owner_);
  add_axis(&step, *this, outer);
  add_axis(&step, *this, inner);
  IterVar fused = new_iter_var(outer.name() + "." + inner.name() + ".fused", outer.kind());
  relations_.push_back({IterVarRelation::Kind::Fuse, fused, outer, inner, Expr(), Expr()});
  leaf_iter_vars_.erase(leaf_iter_vars_.begin() + po, leaf_iter_vars_.begin() + pi + 1);
  leaf_iter_vars_.insert(leaf_iter_vars_.begin() + po, fused);
  owner_->record(std::move(step));
  return fused;
}

IterVar Stage::fuse(const std::vector<IterVar>& axes) {
  KILN_USER_CHECK(!axes.empty()) << "fuse on stage '" << name() << "' with no axes";
  IterVar acc = axes[0];
  for (size_t i = 1; i < axes.size(); ++i) acc = fuse(acc, axes[i]);
  return acc;
}

void Stage::reorder(const std::vector<IterVar>& order) {
  check_not_placeholder("reorder");
  TraceStep step = make_step("reorder", *this, owner_);
  std::vector<int> pos;
  for (const IterVar& iv : order) {
    pos.push_back(leaf_index(iv, "reorder"));
    step.axes.push_back(pos.back());
    step.axis_names.push_back(iv.name());
  }
  std::vector<int> sorted = pos;
  std::sort(sorted.begin(), sorted.end());
  KILN_USER_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) << "reorder on stage '" << name() << "': an axis appears twice";
  std::vector<IterVar> leaves = leaf_iter_vars_;
  for (size_t i = 0; i < sorted.size(); ++i) leaves[sorted[i]] = order[i];
  leaf_iter_vars_ = leaves;
  owner_->record(std::move(step));
}

void Stage::set_annotation(const IterVar& axis, ForKind kind, const char* primitive, const std::string& tag) {
  check_not_placeholder(primitive);
  leaf_index(axis, primitive);
  TraceStep step = make_step(primitive, *this, owner_);
  add_axis(&step, *this, axis);
  if (!tag.empty()) step.strings = {tag};
  IterVarAttr& a = attrs_[axis.get()];
  a.kind = kind;
  a.thread_tag = tag;
  owner_->record(std::move(step));
}

void Stage::vectorize(const IterVar& axis) {
  KILN_USER_CHECK(!axis.defined() || axis.kind() != IterVarKind::Reduce)
      << "vectorize on stage '" << name() << "': axis '" << axis.name() << "' is a reduction axis; only data-parallel axes can be vectorized (split the reduction and vectorize a data-parallel axis, or use rfactor)";
  set_annotation(axis, ForKind::Vectorized, "vectorize");
}

void Stage::unroll(const IterVar& axis) { set_annotation(axis, ForKind::Unrolled, "unroll"); }

void Stage::parallel(const IterVar& axis) {
  KILN_USER_CHECK(!axis.defined() || axis.kind() != IterVarKind::Reduce)
      << "parallel on stage '" << name() << "': axis '" << axis.name() << "' is a reduction axis; parallel reductions race on the accumulator (use rfactor to parallelize a reduction)";
  set_annotation(axis, ForKind::Parallel, "parallel");
}

void Stage::bind(const IterVar& axis, const std::string& tag) {
  static const char* const kTags[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z", "vthread"};
  bool known = std::find(std::begin(kTags), std::end(kTags), tag) != std::end(kTags);
  KILN_USER_CHECK(known) << "bind on stage '" << name() << "': unknown thread tag '" << tag << "'; use blockIdx.x/y/z, threadIdx.x/y/z or vthread";
  set_annotation(axis, ForKind::ThreadBinding, "bind", tag);
}

// True when `reader` reads `producer`, directly or through intermediate ops.
static bool consumes(const Operation& reader, const Operation& producer) {
  for (const Tensor& t : reader->input_tensors())
    if (t.op().same_as(producer) || consumes(t.op(), producer)) return true;
  return false;
}

void Stage::compute_at(Stage& parent, const IterVar& axis) {
  check_not_placeholder("compute_at");
  KILN_USER_CHECK(&parent != this) << "compute_at of stage '" << name() << "' at itself";
  int pos = parent.leaf_index(axis, "compute_at");
  KILN_USER_CHECK(consumes(parent.op(), op_)) << "compute_at of stage '" << name() << "' at stage '" << parent.name() << "': '" << parent.name() << "' does not read '" << name()
                                               << "' (directly or through other stages); a stage can only be computed inside a stage that consumes it";
  TraceStep step = make_step("compute_at", *this, owner_);
  step.stages = {owner_->index_of(&parent)};
  step.axes = {pos};
  step.axis_names = {axis.name()};
  attach_type_ = AttachType::Scope;
  attach_stage_ = &parent;
  attach_ivar_ = axis;
  owner_->record(std::move(step));
}

void Stage::compute_inline() {
  check_not_placeholder("compute_inline");
  KILN_USER_CHECK(!static_cast<const ComputeOpNode*>(op_.get())->is_reduction())
      << "compute_inline of stage '" << name() << "': it is a reduction; only elementwise (non-reduction) stages can be inlined into their consumers";
  KILN_USER_CHECK(!is_output_) << "compute_inline of stage '" << name() << "': it is an output of the schedule and must be stored";
  TraceStep step = make_step("compute_inline", *this, owner_);
  attach_type_ = AttachType::Inline;
  attach_stage_ = nullptr;
  attach_ivar_ = IterVar();
  owner_->record(std::move(step));
}

void Stage::compute_root() {
  check_not_placeholder("compute_root");
  TraceStep step = make_step("compute_root", *this, owner_);
  attach_type_ = AttachType::Root;
  attach_stage_ = nullptr;
  attach_ivar_ = IterVar();
  owner_->record(std::move(step));
}

void Stage::storage_align(const IterVar& axis, int factor, int offset) {
  check_not_placeholder("storage_align");
  int dim = -1;
  for (size_t d = 0; d < root_iter_vars_.size(); ++d)
    if (root_iter_vars_[d].same_as(axis) && axis.kind() == IterVarKind::DataPar) dim = static_cast<int>(d);
  KILN_USER_CHECK(dim >= 0) << "storage_align on stage '" << name() << "': axis '" << (axis.defined() ? axis.name() : "?") << "' must be one of the stage's original data-parallel axes (a dimension of its buffer)";
  KILN_USER_CHECK(factor > 0 && offset >= 0 && offset < factor) << "storage_align on stage '" << name() << "': need factor > 0 and 0 <= offset < factor, got factor " << factor << ", offset " << offset;
  TraceStep step = make_step("storage_align", *this, owner_);
  step.axes = {dim};
  step.axis_names = {axis.name()};
  step.ints = {factor, offset};
  storage_aligns_.emplace_back(dim, factor, offset);
  owner_->record(std::move(step));
}

void Stage::pragma(const IterVar& axis, const std::string& key, int value) {
  check_not_placeholder("pragma");
  KILN_USER_CHECK(!key.empty()) << "pragma on stage '" << name() << "' with an empty key";
  TraceStep step = make_step("pragma", *this, owner_);
  add_axis(&step, *this, axis);
  step.strings = {key};
  step.ints = {value};
  attrs_[axis.get()].pragmas.emplace_back(key, Expr(value));
  owner_->record(std::move(step));
}

// ---------------------------------------------------------------- state

Stage* ScheduleState::find(const OperationNode* op) const {
  for (const auto& s : stages)
    if (s->op().get() == op) return s.get();
  return nullptr;
}

int ScheduleState::index_of(const Stage* stage) const {
  for (size_t i = 0; i < stages.size(); ++i)
    if (stages[i].get() == stage) return static_cast<int>(i);
  KILN_CHECK(false) << "stage not in schedule";
  return -1;
}

Tensor ScheduleState::current_tensor(const Tensor& t) const {
  const OperationNode* op = t.op().get();
  for (auto it = replaced_ops.find(op); it != replaced_ops.end(); it = replaced_ops.find(op)) op = it->second.get();
  return Operation(op).output();
}

Stage& ScheduleState::stage_of(const Tensor& t) const {
  KILN_USER_CHECK(t.defined()) << "undefined tensor";
  Tensor cur = current_tensor(t);
  Stage* s = find(cur.op().get());
  KILN_USER_CHECK(s) << "tensor '" << t.name() << "' is not part of this schedule (was it created after create_schedule, or for another schedule?)";
  return *s;
}

Schedule Schedule::create(const std::vector<Tensor>& outputs) {
  KILN_USER_CHECK(!outputs.empty()) << "create_schedule needs at least one output tensor";
  Schedule sch;
  sch.state_ = std::make_shared<ScheduleState>();
  sch.state_->outputs = outputs;
  for (const Operation& op : topo_sort(outputs)) {
    bool is_out = false;
    for (const Tensor& t : outputs) is_out = is_out || t.op().same_as(op);
    KILN_USER_CHECK(!(is_out && op->kind == OpKind::Placeholder)) << "output '" << op->name << "' is a placeholder; outputs must be computed tensors";
    sch.state_->stages.push_back(std::make_unique<Stage>(sch.state_.get(), op, is_out));
  }
  return sch;
}

Stage& Schedule::stage(int index) const {
  KILN_USER_CHECK(index >= 0 && index < num_stages()) << "stage index " << index << " out of range; the schedule has " << num_stages() << " stages";
  return *state_->stages[index];
}

}  // namespace kiln::te
