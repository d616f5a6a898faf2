/** \file
 * Schedules: how a compute DAG becomes loops.
 *
 * A Schedule has one Stage per operation of the DAG (in topological order).
 * A stage starts with one loop per axis (its root iteration variables; the
 * reduce axes after the data-parallel ones) and is reshaped by primitives:
 * split, fuse and reorder change its leaf loops; vectorize, unroll, parallel
 * and bind annotate them; compute_at, compute_inline and compute_root choose
 * where the stage is computed; cache_read, cache_write and rfactor add
 * stages. Every primitive checks its arguments (misuse raises kiln::Error
 * naming the stage, the axis and what is allowed) and appends one step to
 * the schedule's trace: a schedule is its trace, replayable on the same DAG
 * (see trace.h). Each primitive is defined with its step record, in
 * core/src/te/step_*.cpp (step.h lists them).
 */
#ifndef KILN_TE_SCHEDULE_H
#define KILN_TE_SCHEDULE_H

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/ir/stmt.h"
#include "kiln/te/operation.h"
#include "kiln/te/trace.h"

namespace kiln::te {

enum class AttachType : uint8_t { Root, Inline, Scope };

/** How leaf iteration variables derive from root ones. */
struct IterVarRelation {
  enum class Kind : uint8_t { Split, Fuse } kind;
  /** Split: parent -> (outer, inner). Fuse: (outer, inner) -> fused (stored in parent). */
  IterVar parent, outer, inner;
  /** Split: exactly one of factor / nparts is defined. */
  Expr factor, nparts;
};

/** Annotations of one leaf loop. */
struct IterVarAttr {
  ForKind kind = ForKind::Serial;
  std::string thread_tag;
  std::vector<std::pair<std::string, Expr>> pragmas;
};

class ScheduleState;

/** One stage: an operation and the loops that compute it. Owned by its Schedule. */
class Stage {
 public:
  Stage(ScheduleState* owner, Operation op, bool is_output);

  const Operation& op() const { return op_; }
  const std::string& name() const { return op_->name; }
  bool is_output() const { return is_output_; }
  bool is_placeholder() const { return op_->kind == OpKind::Placeholder; }
  /** Root axes: the op's data-parallel axes, then its reduce axes. */
  const std::vector<IterVar>& root_iter_vars() const { return root_iter_vars_; }
  const std::vector<IterVar>& leaf_iter_vars() const { return leaf_iter_vars_; }
  const std::vector<IterVarRelation>& relations() const { return relations_; }
  const IterVarAttr* attr(const IterVar& iv) const;
  AttachType attach_type() const { return attach_type_; }
  Stage* attach_stage() const { return attach_stage_; }
  /**
   * The leaf loop of attach_stage() this stage is computed in: the axis
   * given to compute_at, followed through the parent's later splits and
   * fuses to the innermost leaf derived from it (inside that loop the axis'
   * value is fixed, as it was inside the axis). Undefined unless Scope.
   */
  IterVar attach_ivar() const;
  const std::string& scope() const { return scope_; }
  /** (dimension, factor, offset) of storage_align calls. */
  const std::vector<std::tuple<int, int, int>>& storage_aligns() const { return storage_aligns_; }
  /** A leaf axis by name; throws kiln::Error listing the leaf axes. */
  IterVar axis(const std::string& name) const;
  /** Index of iv in the leaf list, or throws naming the primitive. */
  int leaf_index(const IterVar& iv, const char* primitive) const;

  // ---- primitives (each appends a trace step) ----
  std::pair<IterVar, IterVar> split(const IterVar& axis, int factor);
  std::pair<IterVar, IterVar> split_nparts(const IterVar& axis, int nparts);
  /** Splits x and y and orders the loops x.outer, y.outer, x.inner, y.inner. */
  std::vector<IterVar> tile(const IterVar& x, const IterVar& y, int x_factor, int y_factor);
  /** Fuses two adjacent leaf axes (outer first). */
  IterVar fuse(const IterVar& outer, const IterVar& inner);
  /** Fuses a run of adjacent leaf axes, outermost first. */
  IterVar fuse(const std::vector<IterVar>& axes);
  /** Reorders the given leaf axes among the positions they occupy. */
  void reorder(const std::vector<IterVar>& order);
  void vectorize(const IterVar& axis);
  void unroll(const IterVar& axis);
  void parallel(const IterVar& axis);
  /** Binds to a GPU thread axis: blockIdx.x/y/z, threadIdx.x/y/z, vthread. */
  void bind(const IterVar& axis, const std::string& thread_tag);
  void compute_at(Stage& parent, const IterVar& axis);
  void compute_inline();
  void compute_root();
  /** Pads the stride of dimension `axis` of this stage's buffer so that stride % factor == offset. */
  void storage_align(const IterVar& axis, int factor, int offset);
  /** An annotation on a loop, e.g. pragma(k, "auto_unroll_max_step", 16). */
  void pragma(const IterVar& axis, const std::string& key, int value);
  /**
   * Marks `axis`, the outermost of the stage's three innermost loops (a
   * 16x16x16 tile of a float32 sum of float16/bfloat16 products), for
   * tensor cores on a cuda target: one warp matrix multiply-accumulate per
   * tile (pass::lower_tensor_core in kiln/pass/gpu.h says what it needs).
   * Recorded as pragma(axis, "tensor_core", 1).
   */
  void tensor_core(const IterVar& axis);

 private:
  friend class ScheduleState;
  friend class Schedule;
  /** Annotates a leaf loop; returns its reference for the step. */
  AxisRef set_annotation(const IterVar& axis, ForKind kind, const char* primitive, const std::string& tag = "");
  std::pair<IterVar, IterVar> split_by(const IterVar& axis, Expr factor, Expr nparts);
  void set_attach(AttachType type, Stage* parent, IterVar axis);
  IterVar new_iter_var(const std::string& name, IterVarKind kind);
  void check_not_placeholder(const char* primitive) const;
  void reset_op(Operation op);

  ScheduleState* owner_;
  Operation op_;
  bool is_output_;
  std::vector<IterVar> root_iter_vars_;
  std::vector<IterVar> leaf_iter_vars_;
  std::vector<IterVarRelation> relations_;
  std::unordered_map<const IterVarNode*, IterVarAttr> attrs_;
  AttachType attach_type_ = AttachType::Root;
  Stage* attach_stage_ = nullptr;
  IterVar attach_axis_;  // as given to compute_at
  std::string scope_ = "global";
  std::vector<std::tuple<int, int, int>> storage_aligns_;
};

/** The shared state behind Schedule handles. */
class ScheduleState {
 public:
  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<Tensor> outputs;
  Trace trace;
  /** Stage computing op (by identity), or nullptr. */
  Stage* find(const OperationNode* op) const;
  int index_of(const Stage* stage) const;
  /** Stage of tensor t; throws kiln::Error when t is not in this schedule. */
  Stage& stage_of(const Tensor& t) const;
  /** Rewrites the bodies of all stages after `ops` changed: reads of old ops read the new ones. */
  void replace_dataflow(const std::unordered_map<const OperationNode*, Operation>& replaced);
  /** Current tensor for an op of the original DAG (after cache_write/rfactor replacements). */
  Tensor current_tensor(const Tensor& original) const;
  std::unordered_map<const OperationNode*, Operation> replaced_ops;
  void record(Step step) { trace.steps.push_back(std::move(step)); }
};

/** A handle to a schedule: cheap to copy, stages stay valid while any handle lives. */
class Schedule {
 public:
  Schedule() = default;
  /** One stage per op reachable from outputs, producers first. */
  static Schedule create(const std::vector<Tensor>& outputs);
  /** Replays a trace on a fresh schedule of the same outputs; throws naming the failing step. */
  static Schedule from_trace(const std::vector<Tensor>& outputs, const Trace& trace);

  Stage& operator[](const Tensor& t) const { return state_->stage_of(t); }
  Stage& stage(int index) const;
  int num_stages() const { return static_cast<int>(state_->stages.size()); }
  const std::vector<std::unique_ptr<Stage>>& stages() const { return state_->stages; }
  const std::vector<Tensor>& outputs() const { return state_->outputs; }
  const Trace& trace() const { return state_->trace; }
  ScheduleState* state() const { return state_.get(); }
  /** The tensor that now holds the data of an original tensor (changes after cache_write/rfactor). */
  Tensor current_tensor(const Tensor& t) const { return state_->current_tensor(t); }

  /** A stage that copies `tensor` into `scope` for `readers`, who read the copy instead. */
  Tensor cache_read(const Tensor& tensor, const std::string& scope, const std::vector<Tensor>& readers);
  /**
   * A stage that copies `tensor` into a packed layout for `readers`: dimension
   * `dim` (extent n, a multiple of `factor`) is split into n/factor panels
   * that become the outermost dimension and `factor` lanes that become the
   * innermost, e.g. B[K, N] packed on dim 1 by 16 is B.packed[N/16, K, 16].
   * Readers index the packed copy, so a vector over the split dimension
   * reads contiguous memory. The copy costs one pass over the tensor.
   */
  Tensor pack(const Tensor& tensor, const std::vector<Tensor>& readers, int dim, int factor);
  /** A stage that computes `tensor` into `scope`; the original stage becomes a copy out of it. */
  Tensor cache_write(const Tensor& tensor, const std::string& scope);
  /**
   * Factors the reduction of `tensor` over the leaf reduce axis `axis` into a
   * new stage whose dimension factor_axis iterates over axis; the original
   * stage then reduces over that dimension. Returns the factored tensor.
   */
  Tensor rfactor(const Tensor& tensor, const IterVar& axis, int factor_axis = 0);

 private:
  std::shared_ptr<ScheduleState> state_;
};

/** Same as Schedule::create. */
inline Schedule create_schedule(const std::vector<Tensor>& outputs) { return Schedule::create(outputs); }

}  // namespace kiln::te

#endif  // KILN_TE_SCHEDULE_H
