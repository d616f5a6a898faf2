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
 *    into the weights, and "weights": {"mode": "embed"|"beside", "bytes": N};
 *  - with embedded weights, `kiln_model_weights` (the blob's first byte) and
 *    `extern "C" const uint64_t kiln_model_weights_size`;
 *  - with weights beside it, the file `<library path>.weights`: the 16-byte
 *    header "KILNWTS1" + uint64 (little-endian) data bytes, padding to 64
 *    bytes, then the data.
 */
#ifndef KILN_RUNTIME_MODEL_H
#define KILN_RUNTIME_MODEL_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/ir/dtype.h"
#include "kiln/runtime/module.h"
#include "kiln/runtime/ndarray.h"

namespace kiln {

/** A model input or output: its name, shape and dtype. */
struct ModelTensor {
  std::string name;
  std::vector<int64_t> shape;
  DataType dtype;
  int64_t bytes() const;
};

/** Where a plan's buffer lives. */
struct ModelBuffer {
  enum class Kind : uint8_t { Input, Constant, Arena, Output };
  Kind kind = Kind::Arena;
  int index = 0;       ///< Input/Output: the model's input/output number; Constant: into ModelPlan::constants
  int64_t offset = 0;  ///< Arena: byte offset
  std::vector<int64_t> shape;
  DataType dtype;
  int64_t bytes() const;
};

/** One kernel call. */
struct ModelStep {
  std::string name;
  int kernel = 0;         ///< into ModelPlan::kernel_names
  std::vector<int> args;  ///< buffer ids, in the kernel's argument order
  double flop = 0;
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
  int64_t arena_bytes = 0;

  /**
   * The plan as JSON; constants are recorded by `constant_offsets` (byte
   * offsets into the weights, one per constant), dtype and shape, and the
   * weights by `weights_mode` ("embed" or "beside") and total `weights_bytes`.
   */
  std::string to_json(const std::vector<int64_t>& constant_offsets, const std::string& weights_mode,
                      int64_t weights_bytes) const;
};

/** The weights layout of an export: 64-byte aligned offsets per constant and the total. */
struct WeightsLayout {
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
};
WeightsLayout layout_weights(const std::vector<NDArray>& constants);
/** Writes the constants at `layout` to `path`: raw (embed) or with the "KILNWTS1" header (beside). */
void write_weights(const std::string& path, const std::vector<NDArray>& constants, const WeightsLayout& layout, bool header);

/** Refuses inputs that do not match the plan's (count, dtype, shape, host memory, compact layout), naming the input and the fix. */
void check_model_inputs(const std::vector<ModelTensor>& want, const std::vector<NDArray>& inputs);
/** The address of each of the plan's buffers for one run: the inputs', the
 * constants', the arena's (at `arena`) and fresh output arrays (into *outputs),
 * or for an output that may reuse a donated input (donated[i] true), that
 * input's array itself. */
std::vector<void*> bind_plan_buffers(const ModelPlan& plan, const std::vector<NDArray>& inputs, char* arena, std::vector<NDArray>* outputs,
                                     const std::vector<bool>* donated = nullptr);

/** After a run's steps: each output that no step wrote (an input or constant
 * returned as is, or one value returned twice) becomes a copy of its buffer. */
void copy_unwritten_outputs(const ModelPlan& plan, const std::vector<void*>& ptr, std::vector<NDArray>* outputs);

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

  /** Runs the model; inputs in order, checked for count, dtype, shape, device and layout. */
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

  struct State;

 private:
  std::shared_ptr<State> state_;
  NDArray weights_;  ///< a loaded model's weights read from its file (the constants are views of it)
};

}  // namespace kiln

#endif  // KILN_RUNTIME_MODEL_H
