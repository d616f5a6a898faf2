// Stages, their loops and the schedule state; the primitives are in
// core/src/te/step_*.cpp, each with its step record.
#include "kiln/te/schedule.h"

#include <algorithm>
#include <sstream>

#include "iter_relations.h"
#include "step_internal.h"
#include "kiln/support/error.h"

namespace kiln::te {

std::string detail::leaf_names(const std::vector<IterVar>& leaves) {
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
  KILN_USER_ERROR() << "stage '" << this->name() << "' has no leaf axis '" << name << "'; its leaf axes are " << detail::leaf_names(leaf_iter_vars_);
  return IterVar();
}

int Stage::leaf_index(const IterVar& iv, const char* primitive) const {
  KILN_USER_CHECK(iv.defined()) << primitive << " on stage '" << name() << "': the axis is undefined";
  for (size_t i = 0; i < leaf_iter_vars_.size(); ++i)
    if (leaf_iter_vars_[i].same_as(iv)) return static_cast<int>(i);
  bool was_leaf = std::find_if(relations_.begin(), relations_.end(), [&](const IterVarRelation& r) { return r.parent.same_as(iv) || r.outer.same_as(iv) || r.inner.same_as(iv); }) != relations_.end();
  KILN_USER_ERROR() << primitive << " on stage '" << name() << "': axis '" << iv.name() << "' is not a leaf axis of this stage"
                    << (was_leaf ? " any more (it was split or fused)" : " (it belongs to another stage)") << "; the leaf axes are " << detail::leaf_names(leaf_iter_vars_);
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

IterVar Stage::attach_ivar() const {
  if (attach_type_ != AttachType::Scope) return IterVar();
  return detail::derived_leaf(attach_stage_->relations(), attach_stage_->leaf_iter_vars(), attach_axis_);
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
