// compile_gpu and the GpuExecutor (gpu_executor.h): CUDA kernels per group from the GPU rules, run by the plan.
#include "kiln/graph/gpu_executor.h"

#include <mutex>

#include "kiln/driver/build_cuda.h"
#include "kiln/graph/kernel_builder.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/plan_builder.h"
#include "kiln/interp/gpu_simulator.h"
#include "kiln/ops/task.h"
#include "kiln/support/error.h"

namespace kiln::graph {

struct GpuExecutor::State {
  Graph graph;
  PlannedGraph planned;
  std::vector<CudaModule> kernels;
  mutable std::mutex mu;  // one run at a time: the arena is shared
};

GpuExecutor compile_gpu(const Graph& g, const GpuCompileOptions& options) {
  Target target = Target::parse(options.target);
  KILN_USER_CHECK(target.kind == Target::Kind::CUDA) << "compile_gpu: target '" << options.target << "' is not a cuda target (e.g. \"cuda -arch=sm_90\"); use compile() for the CPU";
  auto st = std::make_shared<GpuExecutor::State>();
  // NCHW stays: the blocked layout is a CPU vector layout.
  st->graph = optimize(g, target, PipelineOptions{options.fuse, false, options.dump, {}});
  st->planned = plan_graph(st->graph, [&](const GraphDag& dag, const std::string& name, const SizeHints&) {
    std::vector<te::Tensor> args = dag.args();
    ops::Task task = ops::make_task(args, target, name);
    GroupInfo info;
    info.flop = task.flop;
    ScheduleSource source;
    te::Schedule sch = group_schedule(task, options.db, &source, &info.schedule_detail);
    info.schedule = schedule_source_name(source);
    st->kernels.push_back(build_cuda(sch, args, target, name, {}, options.nvrtc));
    return info;
  }, PlanOptions{/*gpu=*/true, nullptr, {}});
  return GpuExecutor(st);
}

std::vector<NDArray> GpuExecutor::execute(const std::vector<NDArray>& inputs, bool on_device) const {
  KILN_USER_CHECK(state_) << "this GPU executor was not compiled";
  const ModelPlan& plan = state_->planned.plan;
  check_model_inputs(plan.inputs, inputs);
  std::lock_guard<std::mutex> lock(state_->mu);
  NDArray arena = NDArray::empty({std::max<int64_t>(plan.arena_bytes, 1)}, DataType::UInt(8));
  std::vector<NDArray> outputs;
  std::vector<void*> ptr = bind_plan_buffers(plan, inputs, static_cast<char*>(arena.data()), &outputs);
  for (const ModelStep& step : plan.steps) {
    const CudaModule& k = state_->kernels[step.kernel];
    try {
      if (on_device) {
        std::vector<Arg> args;
        for (int b : step.args) args.push_back(NDArray::wrap(ptr[b], plan.buffers[b].shape, plan.buffers[b].dtype));
        k.run(args);
      } else {
        std::vector<void*> args;
        for (int b : step.args) args.push_back(ptr[b]);
        simulate_gpu(k.func, args);
      }
    } catch (const std::exception& e) {
      rethrow_as(e, "group " + step.name + ": " + e.what());
    }
  }
  copy_unwritten_outputs(plan, ptr, &outputs);
  return outputs;
}

std::vector<NDArray> GpuExecutor::simulate(const std::vector<NDArray>& inputs) const { return execute(inputs, false); }
std::vector<NDArray> GpuExecutor::run(const std::vector<NDArray>& inputs) const { return execute(inputs, true); }

const ModelPlan& GpuExecutor::plan() const {
  KILN_USER_CHECK(state_) << "this GPU executor was not compiled";
  return state_->planned.plan;
}
const Graph& GpuExecutor::graph() const { return state_->graph; }
const std::vector<GroupInfo>& GpuExecutor::groups() const { return state_->planned.groups; }

const std::string& GpuExecutor::source(int kernel) const {
  KILN_USER_CHECK(state_ && kernel >= 0 && kernel < static_cast<int>(state_->kernels.size()))
      << "kernel " << kernel << " out of range; the executor has " << (state_ ? state_->kernels.size() : 0) << " kernels";
  return state_->kernels[kernel].source;
}

std::string GpuExecutor::launch(int kernel) const {
  source(kernel);  // the range check
  return state_->kernels[kernel].launch.str();
}

MemoryReport GpuExecutor::memory() const {
  const MemoryPlanStats& m = state_->planned.memory;
  return MemoryReport{m.arena_bytes, m.naive_bytes, m.peak_bytes, state_->planned.weight_bytes, m.inplace};
}

}  // namespace kiln::graph
