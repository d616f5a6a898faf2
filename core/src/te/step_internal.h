// Private to the step files (core/src/te/step_*.cpp) and trace.cpp: helpers to
// record a step, to resolve its references on replay, to print it as
// Python, and the dataflow helpers shared by the primitives that add stages.
#ifndef KILN_TE_STEP_INTERNAL_H
#define KILN_TE_STEP_INTERNAL_H

#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/te/schedule.h"

namespace kiln::te {

/**
 * Writes a trace as Python, one line per step. It follows the stage list as
 * steps insert stages, and binds the axes that steps create to variables;
 * what it cannot name it writes by position or by leaf name, which is always
 * valid when the lines run in order.
 */
class PythonWriter {
 public:
  /** s[T] for the stage (learning its name), or s.stages[i] when the name is unknown. */
  std::string stage(const StageRef& s);
  std::string stage(int index) const;
  /** The tensor computed by stage `index`: its variable, or s.stages[i].op.output(0). */
  std::string tensor(int index) const;
  std::string tensor(const StageRef& s);
  /** A variable already bound to this leaf axis, or s[T].axis("name"). */
  std::string axis(const StageRef& s, const AxisRef& a);
  /** Binds a new variable to a leaf axis a step creates (named after it); returns the variable. */
  std::string bind_axis(const StageRef& s, const std::string& axis_name);
  /** A step inserted a stage at `index`; the variable for its tensor. */
  std::string insert_stage(int index, const std::string& name);
  /** A step replaced the loops of a stage: variables bound to its old axes no longer apply. */
  void forget_axes(const StageRef& s);
  void line(const std::string& text) { out_ += text + "\n"; }
  const std::string& str() const { return out_; }
  /** A Python identifier for a kiln name ("C.local" -> "C_local"). */
  static std::string identifier(const std::string& name);
  static std::string quote(const std::string& text);

 private:
  void learn(const StageRef& s);
  std::vector<std::string> stage_names_;  // by index; "" where unknown
  std::map<std::pair<std::string, std::string>, std::string> axis_vars_;  // (stage, axis) -> variable
  std::set<std::string> used_;
  std::string out_;
};

namespace detail {

/** "[i, j, k]": a stage's leaf axes, for messages. */
std::string leaf_names(const std::vector<IterVar>& leaves);

// ---- recording
inline StageRef stage_ref(const ScheduleState& st, const Stage& s) { return {st.index_of(&s), s.name()}; }
inline AxisRef leaf_ref(const Stage& s, const IterVar& iv, const char* primitive) { return {s.leaf_index(iv, primitive), iv.name()}; }

// ---- replay (errors say why; Schedule::from_trace names the step)
Stage& replay_stage(const Schedule& sch, int index);
IterVar replay_leaf(const Stage& s, const AxisRef& a);
IterVar replay_root(const Stage& s, const AxisRef& a);
std::vector<Tensor> replay_tensors(const Schedule& sch, const std::vector<int>& stages);

// ---- dataflow (core/src/te/schedule_dataflow.cpp)
const ComputeOpNode* as_compute(const Operation& op);
/** The same op with another body (same axes, so loops on it stay valid). */
Operation with_body(const ComputeOpNode* c, Expr body);
/** Reads of the ops in `map` read their replacements instead. */
Expr redirect_reads(const Expr& body, const std::unordered_map<const OperationNode*, Operation>& map);
/** True when `reader` reads `producer` directly. */
bool reads(const Operation& reader, const Operation& producer);
/** Fresh data-parallel axes for a new op of `shape`, named after `like` where given. */
std::vector<IterVar> fresh_axes(const std::vector<Expr>& shape, const std::vector<IterVar>& like);
std::vector<Expr> vars_of(const std::vector<IterVar>& axes);
/** Refuses to replace the loops of `s` while other stages are computed at them. */
void check_no_attached(const ScheduleState& st, const Stage& s, const char* primitive);

}  // namespace detail
}  // namespace kiln::te

#endif  // KILN_TE_STEP_INTERNAL_H
