/** \file
 * Module: a compiled library of kernels, callable by name with argument
 * checking at the boundary.
 *
 * A Module is metadata (one KernelInfo per kernel: parameter names, kinds,
 * dtypes and shapes) plus a ModuleNode that resolves kernel symbols to code:
 * an LLVM JIT session, or a shared library loaded with Module::load. Every
 * kernel follows the calling convention of c_runtime_api.h,
 * `int32_t name(void* const* args)`.
 *
 * Exported libraries. Module::load(path) dlopens a .so that exports
 *  - each kernel as an extern "C" function with the convention above, and
 *  - `extern "C" const char* kiln_module_metadata`: a pointer variable (not a
 *    function, not an array) holding the JSON of the kernel list, as written
 *    by kernels_to_json:
 *      [{"name": "vadd", "params": [
 *         {"name": "A", "kind": "buffer", "dtype": "float32", "shape": [-1],
 *          "dims": [{"param": 1}]},
 *         {"name": "n", "kind": "scalar", "dtype": "int32", "shape": []}]}]
 *    where -1 is a dimension that is not a constant, and "dims" (optional)
 *    gives every dimension as a ShapeExpr: an integer, {"param": i} (the
 *    scalar parameter i) or {"op": "add", "a": ..., "b": ...}. A buffer may
 *    also list "strides" the same way (absent: compact row-major).
 *    Without "dims" a -1 dimension is not checked (metadata of old libraries).
 *  - optionally `extern "C" const char* kiln_library_info` (library_info.h):
 *    runtime ABI version, kiln version, triple, CPU and CPU features, which
 *    Module::load checks before anything else.
 * The .so resolves kiln_parallel_launch and friends from libkiln_runtime,
 * so it should list that library as a dependency (or link it statically).
 * Module::export_library writes such a library for a module built by kiln.
 */
#ifndef KILN_RUNTIME_MODULE_H
#define KILN_RUNTIME_MODULE_H

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/ir/dtype.h"
#include "kiln/runtime/c_runtime_api.h"
#include "kiln/runtime/ndarray.h"
#include "kiln/runtime/shape_expr.h"

namespace kiln {

/** One kernel parameter: a buffer (passed as its data pointer) or a scalar (passed by pointer). */
struct ParamInfo {
  std::string name;
  bool is_buffer = false;
  DataType dtype;  ///< element type of a buffer; value type of a scalar
  std::vector<int64_t> shape;  ///< buffers only; -1 where the dimension is not a constant
  /**
   * Buffers only: each dimension as the kernel computes it, from constants and
   * the kernel's scalar parameters. Every call binds plain-parameter
   * dimensions from the arrays and checks all of them (see arg_binder.h).
   * Empty in metadata that predates it: then -1 dimensions go unchecked.
   */
  std::vector<ShapeExpr> dims;
  /** Buffers only: element strides the kernel uses; empty means compact row-major (required of the array). */
  std::vector<ShapeExpr> strides;

  bool operator==(const ParamInfo& o) const = default;
};

/** A kernel's name and parameters, in the order of its argument array. */
struct KernelInfo {
  std::string name;
  std::vector<ParamInfo> params;

  /** The JSON object of this kernel (see the file comment). */
  std::string to_json() const;
  /** Parses one kernel object; throws kiln::Error naming what is missing or malformed. */
  static KernelInfo from_json(const std::string& json);

  bool operator==(const KernelInfo& o) const = default;
};

/** The JSON array of kernels an exported library embeds as kiln_module_metadata. */
std::string kernels_to_json(const std::vector<KernelInfo>& kernels);
/** Parses kernels_to_json's output; throws kiln::Error when it is corrupt. */
std::vector<KernelInfo> kernels_from_json(const std::string& json);

/** The code behind a Module: resolves a kernel name to its entry point. */
class ModuleNode {
 public:
  virtual ~ModuleNode();
  /** The kernel called `symbol`, or nullptr when there is none. */
  virtual KilnKernel lookup(const std::string& symbol) = 0;
  /**
   * Writes the kernels as an exported library at `path` (see the file
   * comment). The default throws: this backing has no way to re-emit its code.
   */
  virtual void export_library(const std::string& path, const std::vector<KernelInfo>& kernels) const;
};

/**
 * One argument of Module::call: an NDArray (kept alive by the Arg), a
 * borrowed DLTensor*, an integer or a floating-point scalar. Integers of any
 * width and floats convert implicitly, so `mod.call("f", {a, b, 64, 0.5})` works.
 */
class Arg {
 public:
  enum class Kind { Tensor, Int, Float };

  Arg(NDArray array) : kind_(Kind::Tensor), array_(std::move(array)), tensor_(array_.defined() ? &array_.dltensor() : nullptr) {}
  Arg(const DLTensor* tensor) : kind_(Kind::Tensor), tensor_(tensor) {}
  template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  Arg(T value) : kind_(Kind::Int), int_(static_cast<int64_t>(value)) {
    // uint64 values above INT64_MAX would wrap; keep the flag to reject them.
    if constexpr (std::is_unsigned_v<T> && sizeof(T) == 8) too_big_ = value > uint64_t(INT64_MAX);
  }
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Arg(T value) : kind_(Kind::Float), float_(static_cast<double>(value)) {}

  Kind kind() const { return kind_; }
  /** The tensor (null for an undefined NDArray or a null pointer); Tensor kind only. */
  const DLTensor* tensor() const { return tensor_; }
  int64_t int_value() const { return int_; }
  double float_value() const { return float_; }
  /** An unsigned 64-bit value that does not fit int64. */
  bool too_big() const { return too_big_; }
  /** "a tensor", "an integer", "a float": how error messages name what was passed. */
  const char* kind_name() const;

 private:
  Kind kind_;
  NDArray array_;
  const DLTensor* tensor_ = nullptr;
  int64_t int_ = 0;
  double float_ = 0;
  bool too_big_ = false;
};

/** Timings from Module::time_evaluator, in seconds per call. */
struct TimeResult {
  std::vector<double> results;  ///< one entry per repeat: mean seconds per call in that repeat
  int number = 0;  ///< calls per repeat actually used (grown to meet min_repeat_ms)

  double min() const;
  double max() const;
  double median() const;
  double mean() const;
};

class Module {
 public:
  /** The null module: defined() is false. */
  Module() = default;
  /** Kernels are looked up in `backing` lazily, on first call. Names must be unique. */
  Module(std::shared_ptr<ModuleNode> backing, std::vector<KernelInfo> kernels);

  /**
   * Loads an exported kernel library (see the file comment for what it must
   * export). The library stays loaded while any copy of the Module lives.
   * Throws kiln::Error when the file cannot be loaded or its metadata is missing or corrupt.
   */
  static Module load(const std::string& so_path);

  /** One Module over several: each kernel resolves in the first module that has it (a model's kernels, built one group at a time). */
  static Module combine(const std::vector<Module>& modules);

  /**
   * Writes the module as a shared library that Module::load (and so any
   * process with only kiln_runtime) can load: for a module built by
   * kiln::build, the kernels' object code linked by the system C compiler
   * ($CC, default cc) against libkiln_runtime; for a loaded module, a copy
   * of its file. The file appears whole or not at all (written beside and
   * renamed). Throws kiln::Error when there is no compiler or linking fails.
   */
  void export_library(const std::string& path) const;

  bool defined() const { return state_ != nullptr; }
  bool has(const std::string& name) const;
  /** Whether this is a model library (Executor::export_library: a plan beside the kernels), which
   * ModelRunner::load runs; its kernels alone take the plan's arena and weights as arguments. */
  bool is_model_library() const;
  /** The kernel's metadata; throws kiln::Error listing the kernels when there is no such kernel. */
  const KernelInfo& info(const std::string& name) const;
  /** Kernel names, in metadata order. */
  std::vector<std::string> names() const;
  const std::vector<KernelInfo>& kernels() const;
  const std::shared_ptr<ModuleNode>& backing() const;

  /**
   * Checks `args` against the kernel's parameters (for buffers rank, dtype,
   * device cpu, non-null data and compact strides; for scalars the kind and
   * range), binds the shape variables from the arrays' shapes and checks
   * every dimension against them (arg_binder.h), packs the arguments per the
   * calling convention and calls the kernel. Trailing shape scalars that the
   * arrays determine may be left out. Any mismatch, or a non-zero return
   * from the kernel, throws kiln::Error naming the kernel and the parameter.
   */
  void call(const std::string& name, const std::vector<Arg>& args) const;

  /** The kernel's entry point, for callers that pack arguments themselves (no checks). */
  KilnKernel get_kernel(const std::string& name) const;

  /**
   * Times a kernel in the manner of TVM's time_evaluator: checks and packs
   * `args` once, calls once to warm up, then takes `repeat` measurements of
   * `number` back-to-back calls each. With min_repeat_ms > 0, `number` grows
   * until one measurement lasts at least that long.
   */
  TimeResult time_evaluator(const std::string& name, const std::vector<Arg>& args, int number = 1, int repeat = 1,
                            double min_repeat_ms = 0) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kiln

#endif  // KILN_RUNTIME_MODULE_H
