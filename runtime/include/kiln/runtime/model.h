/** \file
 * ModelRunner: runs a compiled model's plan (kernels called in order over one
 * planned arena) with nothing but kiln_runtime. The graph Executor runs its
 * plan through it in process; ModelRunner::load runs a model exported by
 * Executor::export_library, without LLVM or Python.
 *
 * A model library is a kernel library (module.h: kiln_library_info,
 * kiln_module_metadata, one symbol per kernel) that also exports
 *  - `extern "C" const char* kiln_model_plan`: the plan as JSON
 *    (ModelPlan::to_json), constants listed by byte offset, dtype and shape
 *    into the weights, and "weights": {"mode": "embed"|"beside", "bytes": N,
 *    "export_id": the library's export id (library_seal.h), and for "beside"
 *    "hash": the XXH3-128 of the weights file's data, 32 hex digits};
 *  - with embedded weights, `kiln_model_weights` (the blob's first byte) and
 *    `extern "C" const uint64_t kiln_model_weights_size` (the library's seal
 *    covers them);
 *  - with weights beside it, the file `<library path>.weights`: a 64-byte
 *    header, "KILNWTS2", uint64 (little-endian) data bytes, the export id
 *    (32 ASCII hex digits) and the XXH3-128 of the data (16 canonical bytes),
 *    then the data. ModelRunner::load refuses a file of another export (its
 *    id differs from the plan's) or with damaged data (its hash differs).
 *
 * Dynamic shapes. A plan with shape variables (ModelPlan::shape_vars) gives
 * its tensors' and buffers' dimensions as ShapeExprs over them (Param i is
 * shape_vars[i]); a static plan is the case with none. Each run binds the
 * variables from the inputs, checks ranges and constraints, and places the
 * arena buffers by their lifetimes for those values (model_shapes.h),
 * cached per tuple of values. Its JSON is "format" 2 (see to_json); a static
 * plan's JSON is format 1, unchanged.
 *
 * What a producer of a dynamic plan (the graph's plan_graph) sets, beyond a
 * static plan: shape_vars, shape_ranges (one per variable, or none),
 * constraints; `dims` (and -1 in `shape` where a dimension is not a
 * constant) on every input, output and buffer with a symbolic dimension,
 * Input/Output buffers with their tensor's dims; each shape variable a plain
 * dimension of some input; on arena buffers first_step, last_step,
 * inplace_of (a buffer id) and view_of, in place of offset and arena_bytes.
 * Each step's kernel takes the step's buffers first, then only shape
 * scalars that its binder infers from those arrays (arg_binder.h).
 */
#ifndef KILN_RUNTIME_MODEL_H
#define KILN_RUNTIME_MODEL_H

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/ir/dtype.h"
#include "kiln/runtime/memory_plan.h"
#include "kiln/runtime/module.h"
#include "kiln/runtime/ndarray.h"
#include "kiln/support/error.h"

namespace kiln {

/** A model input or output: its name, shape and dtype. */
struct ModelTensor {
  std::string name;
  std::vector<int64_t> shape;  ///< -1 where the dimension is not a constant (a dynamic plan)
  DataType dtype;
  /** A dynamic plan: every dimension over ModelPlan::shape_vars; empty: `shape` is all there is. */
  std::vector<ShapeExpr> dims;
  int64_t bytes() const;  ///< of `shape`; a dynamic plan's sizes come from model_shapes.h
};

/** Where a plan's buffer lives. */
struct ModelBuffer {
  enum class Kind : uint8_t { Input, Constant, Arena, Output };
  Kind kind = Kind::Arena;
  int index = 0;       ///< Input/Output: the model's input/output number; Constant: into ModelPlan::constants
  int64_t offset = 0;  ///< Arena: byte offset (a static plan; a dynamic plan places them per shape)
  std::vector<int64_t> shape;  ///< -1 where the dimension is not a constant (a dynamic plan)
  DataType dtype;
  /** A dynamic plan: every dimension over ModelPlan::shape_vars; empty: `shape` is all there is. */
  std::vector<ShapeExpr> dims;
  /**
   * Arena buffers of a dynamic plan: the step that writes it, the last step
   * that reads it, and the buffer it may overwrite in place (-1: none), as
   * plan_memory takes them (memory_plan.h).
   */
  int first_step = 0;
  int last_step = 0;
  int inplace_of = -1;
  /**
   * Arena buffers of a dynamic plan: the arena buffer whose bytes this one
   * views (a reshape: same bytes, another shape; its lifetime is the
   * source's, which its readers extend), or -1 for bytes of its own.
   */
  int view_of = -1;
  int64_t bytes() const;  ///< of `shape`; a dynamic plan's sizes come from model_shapes.h
};

/** The inclusive range a shape variable must lie in. */
struct ShapeRange {
  int64_t lo = 0;
  int64_t hi = 0;
  bool operator==(const ShapeRange&) const = default;
};

/** A relation between shape variables that every run checks (a reshape's equal sizes, a split's divisibility). */
struct ShapeConstraint {
  enum class Kind : uint8_t { Equal, Divisible };
  Kind kind = Kind::Equal;
  ShapeExpr lhs;
  ShapeExpr rhs;        ///< Equal: lhs == rhs
  int64_t divisor = 1;  ///< Divisible: lhs % divisor == 0
  /** Where it comes from, quoted by the error: "Reshape 'r1': batch * seq == 4 * n". */
  std::string text;
  bool operator==(const ShapeConstraint&) const = default;
};

/**
 * A dynamic plan's specialised kernel for one step (BladeDISC's speculative
 * versions): the step calls it at shapes where every condition holds, each
 * an inclusive range of a ShapeExpr over the shape variables (a variable
 * itself, or a product such as batch * seq, the rows of a projection;
 * lo == hi: an exact size). The kernel takes the same arguments as the step's own.
 */
struct StepVariant {
  struct Condition {
    ShapeExpr expr;
    int64_t lo = 0;
    int64_t hi = 0;
    bool operator==(const Condition&) const = default;
  };
  int kernel = 0;  ///< into ModelPlan::kernel_names
  std::vector<Condition> when;
  bool operator==(const StepVariant&) const = default;
  /** Whether every condition holds at these shape values (one per shape variable). */
  bool holds(const std::vector<int64_t>& values) const;
};

/** One kernel call. */
struct ModelStep {
  std::string name;
  int kernel = 0;         ///< into ModelPlan::kernel_names; with variants, the fallback
  std::vector<int> args;  ///< buffer ids, in the kernel's argument order
  double flop = 0;
  /** A dynamic plan: the first variant whose conditions hold replaces `kernel`; chosen once per new shape. */
  std::vector<StepVariant> variants = {};
  /** The kernel this step calls at these shape values. */
  int kernel_at(const std::vector<int64_t>& values) const;
};

/** How an export keeps its weights, as its plan records it. */
struct WeightsRecord {
  std::string mode;       ///< "embed" (inside the library) or "beside" (in `<library>.weights`)
  int64_t bytes = 0;      ///< the data's size
  std::string export_id;  ///< the export's id, also in the library's seal and the weights file's header
  std::string hash;       ///< "beside": XXH3-128 of the weights file's data (hex); empty for "embed"
};

struct ModelPlan {
  std::vector<ModelTensor> inputs;
  std::vector<ModelTensor> outputs;
  std::vector<ModelBuffer> buffers;
  std::vector<ModelStep> steps;
  std::vector<std::string> kernel_names;
  std::vector<NDArray> constants;
  /** Per model output: the buffer holding it. */
  std::vector<int> output_buffers;
  /**
   * Per model output: the model input whose array the output may be written
   * into when the caller donates that input (its last reader computes the
   * output element by element; a training step's parameter updates), or -1.
   * Not part of the exported form: an exported model allocates its outputs.
   */
  std::vector<int> output_reuses_input;
  int64_t arena_bytes = 0;  ///< a static plan's arena; unused by a dynamic plan

  /** Names of the shape variables (ShapeExpr::param(i) is shape_vars[i]); empty: a static plan. */
  std::vector<std::string> shape_vars;
  /** Per shape variable (or empty for none): the range it must lie in, if declared. */
  std::vector<std::optional<ShapeRange>> shape_ranges;
  /** Checked at every new tuple of shape values. */
  std::vector<ShapeConstraint> constraints;

  bool is_dynamic() const { return !shape_vars.empty(); }

  /**
   * The plan as JSON; constants are recorded by `constant_offsets` (byte
   * offsets into the weights, one per constant), dtype and shape, and the
   * weights as `weights` says. A dynamic plan is "format": 2 and adds
   *   "shape_vars": [{"name": "batch", "range": [1, 64]}, {"name": "seq"}],
   *   "constraints": [{"kind": "equal", "lhs": E, "rhs": E, "text": "..."},
   *                   {"kind": "divisible", "lhs": E, "divisor": 4, "text": "..."}],
   * "dims": [E, ...] on inputs, outputs and buffers that have them,
   * "first_step", "last_step", "inplace_of", "view_of" on arena buffers, and
   * on a step with variants "variants": [{"kernel": k, "when": [[E, lo, hi], ...]}, ...]; E is a
   * ShapeExpr as in kernel metadata (module.h): an integer, {"param": i}
   * or {"op": "mul", "a": E, "b": E}.
   */
  std::string to_json(const std::vector<int64_t>& constant_offsets, const WeightsRecord& weights) const;
  /**
   * Parses to_json's text: the plan without its constants, whose specs
   * (shape, dtype) and offsets into the weights come out beside it. Throws
   * kiln::Error ("corrupt model plan: ...") naming what is wrong.
   */
  static ModelPlan from_json(const std::string& text, WeightsRecord* weights, std::vector<ModelTensor>* constant_specs, std::vector<int64_t>* constant_offsets);
};

/** The weights layout of an export: 64-byte aligned offsets per constant and the total. */
struct WeightsLayout {
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
};
WeightsLayout layout_weights(const std::vector<NDArray>& constants);
/**
 * Writes the constants at `layout` to `path`: raw (embed; `export_id`
 * empty) or behind the "KILNWTS2" header naming `export_id` (beside).
 * Returns the XXH3-128 of the data (hex), which the plan records.
 */
std::string write_weights(const std::string& path, const std::vector<NDArray>& constants, const WeightsLayout& layout,
                          const std::string& export_id);

/**
 * The values of plan.shape_vars, in the plan's order, from values given by
 * name; throws kiln::Error starting with `what` naming a variable with no
 * value or a name the plan has no variable of.
 */
std::vector<int64_t> shape_values_by_name(const ModelPlan& plan, const std::map<std::string, int64_t>& values, const std::string& what);

/** Refuses inputs that do not match the plan's (count, dtype, shape, host memory, compact layout), naming the input and the fix. */
void check_model_inputs(const std::vector<ModelTensor>& want, const std::vector<NDArray>& inputs);
/** A static plan only: the address of each of the plan's buffers for one run: the inputs', the
 * constants', the arena's (at `arena`) and fresh output arrays (into *outputs),
 * or for an output that may reuse a donated input (donated[i] true), that
 * input's array itself. */
std::vector<void*> bind_plan_buffers(const ModelPlan& plan, const std::vector<NDArray>& inputs, char* arena, std::vector<NDArray>* outputs,
                                     const std::vector<bool>* donated = nullptr);

/**
 * The user error ModelRunner::load throws when a library keeps its weights
 * beside it and that file is missing or unreadable: typed, so that the C API
 * answers KILN_ERR_NOT_FOUND without reading the message.
 */
class MissingWeightsError : public Error {
 public:
  using Error::Error;
};

/** After a run's steps: each output that no step wrote (an input or constant
 * returned as is, or one value returned twice) becomes a copy of its buffer. */
void copy_unwritten_outputs(const ModelPlan& plan, const std::vector<void*>& ptr, std::vector<NDArray>* outputs);

/** What a runner's calls spent beside their kernels, counted since it was made (ModelRunner::run_stats): for tests and benches. */
struct ModelRunStats {
  int64_t runs = 0;               ///< calls of run
  int64_t plans = 0;              ///< new tuples of shape values planned (bound, checked, placed, each step's kernel and scalars)
  int64_t arena_allocations = 0;  ///< arena allocations, the one at construction included
  int64_t arena_bytes = 0;        ///< the arena's size now
  double plan_seconds = 0;        ///< in planning, all plans together (the arena's allocation not included)
  double arena_seconds = 0;       ///< in allocating and pre-faulting the arena, all allocations together
  double last_plan_seconds = 0;   ///< the latest new shape's planning and arena growth together
};

class ModelRunner {
 public:
  ModelRunner() = default;
  /** Runs `plan` with the kernels of `kernels` (every plan.kernel_names entry must be there). */
  ModelRunner(ModelPlan plan, Module kernels);

  /**
   * Loads a model library written by Executor::export_library: the kernels
   * through Module::load (ABI and CPU-feature checks), the plan, and the
   * weights (embedded, or `<path>.weights`). Throws kiln::Error naming the
   * problem (not a model library, missing or wrong-sized weights file, ...).
   */
  static ModelRunner load(const std::string& path);

  /**
   * Runs the model; inputs in order, checked for count, dtype, shape, device
   * and layout. A dynamic plan binds its shape variables from the inputs'
   * shapes (model_shapes.h; a bad shape throws ShapeError) and returns
   * outputs of the shapes they give.
   */
  std::vector<NDArray> run(const std::vector<NDArray>& inputs) const;
  /** The same, adding each step's seconds to (*step_seconds)[step] (sized to the steps).
   * With `donated` (one flag per input), a donated input's array may be
   * overwritten by an output the plan lets reuse it (ModelPlan::output_reuses_input),
   * and is then returned as that output; a donated input must not share its
   * memory with another input. */
  std::vector<NDArray> run(const std::vector<NDArray>& inputs, std::vector<double>* step_seconds, const std::vector<bool>* donated = nullptr) const;

  bool defined() const { return state_ != nullptr; }
  const ModelPlan& plan() const;
  const std::vector<ModelTensor>& inputs() const { return plan().inputs; }
  const std::vector<ModelTensor>& outputs() const { return plan().outputs; }
  const Module& module() const;

  /**
   * The arena a run at these shape values (one per plan.shape_vars) plans,
   * with the figures to compare it with (memory_plan.h); a static plan's
   * with no values. Throws ShapeError for values out of range or breaking a constraint.
   */
  MemoryPlanStats memory(const std::vector<int64_t>& shape_values) const;
  /** memory() at the largest values (model_shapes.h: plan_memory_bound); nullopt when a variable has no range. */
  std::optional<MemoryPlanStats> memory_bound() const;
  /** A dynamic plan: how many shapes are planned and cached now (at most 16, least recently used out); 0 for a static plan. */
  size_t cached_shapes() const;
  /**
   * Plans and arena allocations so far. A dynamic plan plans once per new
   * tuple of shape values (and again after its entry was evicted) and
   * allocates its arena at construction (at memory_bound() when every
   * variable has a range) and when a shape needs more, growing by at least
   * half; a shape seen lately costs neither.
   */
  ModelRunStats run_stats() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
  NDArray weights_;  ///< a loaded model's weights read from its file (the constants are views of it)
};

}  // namespace kiln

#endif  // KILN_RUNTIME_MODEL_H
