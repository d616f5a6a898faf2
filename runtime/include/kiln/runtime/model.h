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
#include "kiln/support/error.h"

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
  int64_t arena_bytes = 0;

  /**
   * The plan as JSON; constants are recorded by `constant_offsets` (byte
   * offsets into the weights, one per constant), dtype and shape, and the
   * weights as `weights` says.
   */
  std::string to_json(const std::vector<int64_t>& constant_offsets, const WeightsRecord& weights) const;
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

/** Refuses inputs that do not match the plan's (count, dtype, shape, host memory, compact layout), naming the input and the fix. */
void check_model_inputs(const std::vector<ModelTensor>& want, const std::vector<NDArray>& inputs);
/** The address of each of the plan's buffers for one run: the inputs', the
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
