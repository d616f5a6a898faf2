/** \file
 * The graph executor: a graph compiled to kernels and a plan that runs them
 * in order over one planned arena.
 *
 *   Executor exe = compile(graph, {.target = "llvm", .db = "kiln_tuning.db"});
 *   std::vector<NDArray> out = exe.run({x});
 *
 * The plan is data (kiln::ModelPlan of runtime/model.h: buffers with arena offsets, kernel calls
 * with buffer ids), so the same plan can run in process, from an exported
 * library or per rank. Kernels of groups with the same workload key are
 * compiled once. One executor runs one call at a time (its arena is shared
 * by the calls); run() takes a lock.
 */
#ifndef KILN_GRAPH_EXECUTOR_H
#define KILN_GRAPH_EXECUTOR_H

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/graph/layout_plan.h"
#include "kiln/graph/memory_plan.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/ndarray.h"

namespace kiln::graph {

struct CompileOptions {
  /** "llvm" (the host), or "llvm -mcpu=... -num-cores=...". */
  std::string target = "llvm";
  /** A tuning database: each group takes its workload's best record when it has one. Empty: default schedules. */
  std::string db;
  /** false: one kernel per operator (the reference the fused graph is checked against). */
  bool fuse = true;
  /** Convolutions in the blocked NCHWc layout (alter_conv_layout). */
  bool layout = true;
  /**
   * With a database and no layout_plan given: each convolution's channel
   * block chosen from its records (choose_layout_plan).
   * Task extraction then also lists each convolution under every block cap.
   */
  bool choose_layouts = true;
  /** The channel blocking when it is not chosen from records (default: two vectors). */
  LayoutPlan layout_plan;
  /** Plain (unscheduled) kernels: slow, simple, for references. */
  bool plain = false;
  /** Print the graph after every pass (as KILN_DUMP_IR does). */
  bool dump = false;
  /** bfloat16 dot products for autocast's matmuls and convolutions: PipelineOptions::bf16_dot (-1: where the target has AVX-512 BF16). */
  int bf16_dot = -1;
  /** The int8 kernels for quantized matmuls and convolutions where the target has VNNI: PipelineOptions::int8_dot (false keeps the ops). */
  bool int8 = true;
  /**
   * A model with symbolic dims: per shape variable, the inclusive range of
   * sizes a run may give it ({"batch", {1, 32}}), checked at every call
   * and bounding memory_bound(). Variables without one take any size >= 0.
   */
  std::map<std::string, ShapeRange> dims;
  /**
   * A model with symbolic dims: per shape variable, the sizes calls will
   * most likely have, most likely first ({"seq", {128, 384}}). Kernels are
   * scheduled for the first; with a database, each group takes the record
   * tuned at the first of these sizes that has one (tuner::tune_model tunes
   * at all of them; likely_bindings in bind_shapes.h lists them).
   */
  std::map<std::string, std::vector<int64_t>> sizes;
  /**
   * A model with symbolic dims: contraction and reduction groups keep a
   * kernel per size bucket whose code differs (kernel_variants.h), picked
   * per shape at run time. false: one kernel per group (a faster compile,
   * slower at sizes far from the likely one).
   */
  bool size_variants = true;
};

/** A size-dispatched kernel of a group (kernel_variants.h): called where `when` holds, before the group's own kernel. */
struct GroupVariant {
  std::string when;  ///< "seq in [2, 16], batch in [0, 1]"
  std::string kernel;
  std::string schedule_detail;
};

struct GroupInfo {
  std::string name;
  std::string kernel;  ///< the plan's kernel the group calls (with variants, where none applies)
  std::vector<GroupVariant> variants;
  std::string ops;            ///< "Conv+Add+Relu"
  std::string workload_key;
  std::string schedule;       ///< "default", "database" or "plain"
  std::string schedule_detail;  ///< the default's sketch and decisions, or the record's trace
  std::string records_only_for;  ///< a default-scheduled group's target with another -num-cores that the DB has records for, else empty
  double flop = 0;
};

struct MemoryReport {
  int64_t arena_bytes = 0;   ///< the planned arena
  int64_t naive_bytes = 0;   ///< every intermediate in its own buffer
  int64_t peak_bytes = 0;    ///< the most intermediate bytes live at once
  int64_t weight_bytes = 0;  ///< constants (held once, by reference)
  int inplace = 0;           ///< groups writing over a dying input
};

struct ProfileRow {
  std::string name;
  double seconds = 0;  ///< median per run
  double gflops = 0;
  double share = 0;    ///< of the total
};

class Executor {
 public:
  Executor() = default;

  /** Runs the graph; inputs in the graph's input order, checked for shape, dtype and device. */
  std::vector<NDArray> run(const std::vector<NDArray>& inputs) const;
  /** The same, with inputs donated (one flag per input): an output the plan
   * lets reuse a donated input is written into that input's array in place
   * and returned as it (a training step's parameters and optimizer state). */
  std::vector<NDArray> run(const std::vector<NDArray>& inputs, const std::vector<bool>& donated) const;
  /** Runs `repeats` times and times each kernel (median per kernel). */
  std::vector<ProfileRow> profile(const std::vector<NDArray>& inputs, int repeats = 10) const;
  MemoryReport memory() const;
  /** A model with symbolic dims: the arena a run at these shape values plans (by name; every variable of the model). */
  MemoryReport memory(const std::map<std::string, int64_t>& shape_values) const;
  /** The largest arena any run plans, when every shape variable has a range (CompileOptions::dims); nullopt otherwise. */
  std::optional<MemoryReport> memory_bound() const;
  /** The model's shape variables, in the order the inputs first use them (empty for a static model). */
  const std::vector<std::string>& shape_vars() const;
  /** The plan the executor runs (kiln_runtime's form, the same an exported library carries). */
  const ModelPlan& plan() const;
  /** The runner of that plan (its kernels as one Module): for tools and tests that inspect a plan's layout per shape. */
  const ModelRunner& runner() const;
  /** The optimized (fused) graph the plan runs. */
  const Graph& graph() const;
  /** One entry per plan step. */
  const std::vector<GroupInfo>& groups() const;
  /** Per convolution, the channel block cap chosen from the records (empty when none was chosen). */
  const std::vector<LayoutDecision>& layout_decisions() const;
  /** Seconds the compilation took (passes and kernels). */
  double compile_seconds() const;
  /**
   * Writes the model as one shared library that kiln_runtime alone loads and
   * runs (kiln::ModelRunner::load, Python kiln.runtime.load_model; format in
   * kiln/runtime/model.h): every kernel, the plan and the weights, either
   * embedded ("embed") or in one file `<path>.weights` beside it ("beside").
   * With static_runtime, kiln_runtime and the C++ runtime are linked into the
   * library (see codegen::LibraryExtras::static_runtime): it needs only libc,
   * libm and libpthread.
   * Files are written under temporary names and renamed at the end. Throws
   * kiln::Error on a bad mode, no C compiler or a failed link.
   */
  void export_library(const std::string& path, const std::string& weights = "embed", bool static_runtime = false) const;

  struct State;
  explicit Executor(std::shared_ptr<State> s) : state_(std::move(s)) {}

 private:
  std::shared_ptr<State> state_;
};

/**
 * Optimizes (passes.h), compiles every group and plans memory. Throws kiln::Error on what it cannot compile.
 * For a cross target (Target::is_cross: "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76") every group is
 * built and scheduled for that machine; the executor then plans, reports memory and exports
 * (export_library with $CC a compiler for it), and run, profile and runner refuse, naming that fix.
 */
Executor compile(const Graph& g, const CompileOptions& options = {});

}  // namespace kiln::graph

#endif  // KILN_GRAPH_EXECUTOR_H
