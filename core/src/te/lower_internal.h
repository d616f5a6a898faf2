// Private to lowering: the state shared by bound inference and loop-nest
// construction (core/src/te/bound_inference.cpp, core/src/te/schedule_to_function.cpp).
#ifndef KILN_TE_LOWER_INTERNAL_H
#define KILN_TE_LOWER_INTERNAL_H

#include <unordered_map>
#include <vector>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/buffer.h"
#include "kiln/te/schedule.h"

namespace kiln::te::detail {

struct LowerState {
  explicit LowerState(const Schedule& s) : sch(s) {}
  const Schedule& sch;
  /** Compute bodies with inlined stages substituted, by op. */
  std::unordered_map<const OperationNode*, Expr> bodies;
  /** Stages that read each op after inlining. */
  std::unordered_map<const OperationNode*, std::vector<const Stage*>> readers;
  /** Range of every iteration variable of every stage (loops run over [0, extent) except unsplit roots). */
  std::unordered_map<const IterVarNode*, Range> ranges;
  /** Value of every iteration variable (root and derived) in terms of the leaf loop variables. */
  std::unordered_map<const IterVarNode*, Expr> values;
  /** Realised region of each stored op, one Range per dimension (min may depend on outer loops). */
  std::unordered_map<const OperationNode*, std::vector<Range>> regions;
  /** The buffer each op is stored in (params for placeholders and outputs). */
  std::unordered_map<const OperationNode*, Buffer> buffers;
};

/** The range a leaf's loop variable runs over: always [0, extent) (values add the root's min). */
inline Range loop_range(const LowerState& st, const IterVar& leaf) { return Range(0, st.ranges.at(leaf.get()).extent); }

/** Binds the range of every loop variable known so far (the loops of every stage), so
    regions and extents simplify in terms of the loops they sit in. */
void bind_known_loops(const LowerState& st, arith::Analyzer* ana);

/** Substitutes inlined stages into their readers; fills bodies and readers. */
void inline_stages(LowerState* st);
/** Fills ranges, values and regions for every stored stage (consumers first). */
void infer_bounds(LowerState* st);
/** Conditions that keep a stage inside its root domain when splits do not divide. */
std::vector<Expr> split_guards(const LowerState& st, const Stage& stage);

}  // namespace kiln::te::detail

#endif  // KILN_TE_LOWER_INTERNAL_H
