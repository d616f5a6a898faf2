/** \file
 * A graph compiled for a cuda target: the same passes and plan as the CPU
 * executor (executor.h; convolutions stay NCHW), each fused group one CUDA
 * kernel scheduled by the GPU rules (tuner/README.md, "GPU rules").
 *
 *   GpuExecutor exe = compile_gpu(graph, {.target = "cuda -arch=sm_90"});
 *   exe.simulate({x});   // every kernel in the GPU simulator, on the CPU
 *   exe.run({x});        // on the GPU; kiln::Error when there is none
 *
 * Without a GPU, simulate() checks the whole model's kernels against the CPU
 * executor. run() keeps the plan's arena in host memory and copies each
 * kernel's arguments to the device and back: correct, not fast (a device
 * arena is the next step).
 */
#ifndef KILN_GRAPH_GPU_EXECUTOR_H
#define KILN_GRAPH_GPU_EXECUTOR_H

#include <memory>
#include <string>
#include <vector>

#include "kiln/graph/executor.h"

namespace kiln::graph {

struct GpuCompileOptions {
  std::string target = "cuda -arch=sm_90";
  /** false: one kernel per operator. */
  bool fuse = true;
  /** false: CUDA C only, no NVRTC (for machines without it; simulate() still works). */
  bool nvrtc = true;
  /** A tuning database: each group takes its workload's best GPU record when it has one (tune_model with a cuda target). */
  std::string db;
  bool dump = false;
};

class GpuExecutor {
 public:
  GpuExecutor() = default;
  /** Runs every kernel in the GPU simulator (reports races); inputs as for Executor::run. */
  std::vector<NDArray> simulate(const std::vector<NDArray>& inputs) const;
  /** Runs on GPU 0; kiln::Error without a CUDA driver or GPU. */
  std::vector<NDArray> run(const std::vector<NDArray>& inputs) const;
  const ModelPlan& plan() const;
  const Graph& graph() const;
  /** One entry per plan step. */
  const std::vector<GroupInfo>& groups() const;
  /** The CUDA C of kernel i (plan().kernel_names[i]). */
  const std::string& source(int kernel) const;
  /** "grid=(..) block=(..) shared=..B" of kernel i. */
  std::string launch(int kernel) const;
  MemoryReport memory() const;

  struct State;
  explicit GpuExecutor(std::shared_ptr<State> s) : state_(std::move(s)) {}

 private:
  std::vector<NDArray> execute(const std::vector<NDArray>& inputs, bool on_device) const;
  std::shared_ptr<State> state_;
};

/** Optimizes the graph for the GPU, schedules and compiles every group. Throws kiln::Error naming a group it cannot compile. */
GpuExecutor compile_gpu(const Graph& g, const GpuCompileOptions& options = {});

}  // namespace kiln::graph

#endif  // KILN_GRAPH_GPU_EXECUTOR_H
