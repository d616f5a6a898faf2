// ModelRunner (model.h): the plan's run loop, shared by the graph Executor
// (in process) and exported model libraries (ModelRunner::load).
#include "kiln/runtime/model.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "kiln/runtime/c_runtime_api.h"
#include "kiln/support/error.h"

namespace kiln {

int64_t ModelTensor::bytes() const {
  int64_t n = dtype_storage_bytes(dtype);
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ModelBuffer::bytes() const {
  int64_t n = dtype_storage_bytes(dtype);
  for (int64_t d : shape) n *= d;
  return n;
}

struct ModelRunner::State {
  ModelPlan plan;
  Module module;
  std::vector<KilnKernel> kernels;  // per plan kernel
  NDArray arena;
  std::mutex mu;  // the arena is shared by the calls: one run at a time
};

ModelRunner::ModelRunner(ModelPlan plan, Module kernels) : state_(std::make_shared<State>()) {
  KILN_USER_CHECK(kernels.defined()) << "ModelRunner: the kernel module is null";
  for (const std::string& name : plan.kernel_names) state_->kernels.push_back(kernels.get_kernel(name));
  auto bad = [&](const std::string& what) { KILN_USER_ERROR() << "ModelRunner: corrupt plan: " << what; };
  for (const ModelBuffer& b : plan.buffers) {
    size_t limit = b.kind == ModelBuffer::Kind::Input      ? plan.inputs.size()
                   : b.kind == ModelBuffer::Kind::Output   ? plan.outputs.size()
                   : b.kind == ModelBuffer::Kind::Constant ? plan.constants.size()
                                                           : 1;
    if (b.index < 0 || static_cast<size_t>(b.index) >= limit) bad("a buffer's index is out of range");
    if (b.kind == ModelBuffer::Kind::Arena && (b.offset < 0 || b.offset + b.bytes() > plan.arena_bytes))
      bad("an arena buffer lies outside the arena");
    if (b.kind == ModelBuffer::Kind::Constant && plan.constants[b.index].nbytes() != b.bytes())
      bad("a constant's size differs from its buffer's");
  }
  for (const ModelStep& s : plan.steps) {
    if (s.kernel < 0 || static_cast<size_t>(s.kernel) >= plan.kernel_names.size()) bad("step " + s.name + " names no kernel");
    for (int a : s.args)
      if (a < 0 || static_cast<size_t>(a) >= plan.buffers.size()) bad("step " + s.name + " names no buffer");
  }
  if (plan.output_buffers.size() != plan.outputs.size()) bad("outputs and their buffers differ in number");
  for (int b : plan.output_buffers)
    if (b < 0 || static_cast<size_t>(b) >= plan.buffers.size()) bad("an output names no buffer");
  state_->arena = NDArray::empty({std::max<int64_t>(plan.arena_bytes, 1)}, DataType::UInt(8));
  state_->module = std::move(kernels);
  state_->plan = std::move(plan);
}

const ModelPlan& ModelRunner::plan() const {
  KILN_USER_CHECK(state_) << "use of a null ModelRunner; load one with ModelRunner::load";
  return state_->plan;
}

const Module& ModelRunner::module() const {
  KILN_USER_CHECK(state_) << "use of a null ModelRunner; load one with ModelRunner::load";
  return state_->module;
}

void check_model_inputs(const std::vector<ModelTensor>& want, const std::vector<NDArray>& inputs) {
  KILN_USER_CHECK(inputs.size() == want.size()) << "the model takes " << want.size() << " inputs, got " << inputs.size();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ModelTensor& t = want[i];
    const std::string& name = t.name;
    KILN_USER_CHECK(inputs[i].defined()) << "input '" << name << "' is missing";
    KILN_USER_CHECK(inputs[i].device().device_type == kDLCPU) << "input '" << name << "' is on " << device_to_string(inputs[i].device()) << "; the model runs on the CPU";
    KILN_USER_CHECK(inputs[i].dtype() == t.dtype) << "input '" << name << "' has dtype " << inputs[i].dtype().str() << "; the model expects " << t.dtype.str();
    KILN_USER_CHECK(inputs[i].shape() == t.shape) << "input '" << name << "' has shape " << shape_to_string(inputs[i].shape())
                                                  << "; the model was compiled for " << shape_to_string(t.shape)
                                                  << " (compile again with that shape to run it)";
    KILN_USER_CHECK(inputs[i].is_contiguous()) << "input '" << name << "' is not compact row-major; pass a contiguous array";
  }
}

std::vector<void*> bind_plan_buffers(const ModelPlan& plan, const std::vector<NDArray>& inputs, char* arena, std::vector<NDArray>* outputs,
                                     const std::vector<bool>* donated) {
  outputs->assign(plan.outputs.size(), NDArray());
  std::vector<void*> ptr(plan.buffers.size());
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const ModelBuffer& pb = plan.buffers[b];
    switch (pb.kind) {
      case ModelBuffer::Kind::Input: ptr[b] = inputs[pb.index].data(); break;
      case ModelBuffer::Kind::Constant: ptr[b] = plan.constants[pb.index].data(); break;
      case ModelBuffer::Kind::Arena: ptr[b] = arena + pb.offset; break;
      case ModelBuffer::Kind::Output: {
        int reuse = pb.index < static_cast<int>(plan.output_reuses_input.size()) ? plan.output_reuses_input[pb.index] : -1;
        if (reuse >= 0 && donated && (*donated)[reuse]) {
          (*outputs)[pb.index] = inputs[reuse];
          ptr[b] = inputs[reuse].data();
          break;
        }
        (*outputs)[pb.index] = NDArray::empty(pb.shape, pb.dtype);
        ptr[b] = (*outputs)[pb.index].data();
        break;
      }
    }
  }
  return ptr;
}

std::vector<NDArray> ModelRunner::run(const std::vector<NDArray>& inputs) const { return run(inputs, nullptr); }

// A donated input is written over: no other input may see its bytes.
void check_donations(const ModelPlan& plan, const std::vector<NDArray>& inputs, const std::vector<bool>& donated) {
  KILN_USER_CHECK(donated.size() == inputs.size()) << "donate has " << donated.size() << " flags for " << inputs.size() << " inputs";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!donated[i]) continue;
    const char* a = static_cast<const char*>(inputs[i].data());
    for (size_t j = 0; j < inputs.size(); ++j) {
      const char* b = static_cast<const char*>(inputs[j].data());
      KILN_USER_CHECK(j == i || a + inputs[i].nbytes() <= b || b + inputs[j].nbytes() <= a)
          << "input '" << plan.inputs[i].name << "' is donated (written over in place) but shares memory with input '" << plan.inputs[j].name
          << "'; pass a copy of one of them";
    }
  }
}

std::vector<NDArray> ModelRunner::run(const std::vector<NDArray>& inputs, std::vector<double>* step_seconds, const std::vector<bool>* donated) const {
  using Clock = std::chrono::steady_clock;
  KILN_USER_CHECK(state_) << "use of a null ModelRunner; load one with ModelRunner::load";
  const ModelPlan& plan = state_->plan;
  check_model_inputs(plan.inputs, inputs);
  if (donated) check_donations(plan, inputs, *donated);
  if (step_seconds && step_seconds->size() < plan.steps.size()) step_seconds->resize(plan.steps.size(), 0.0);
  std::lock_guard<std::mutex> lock(state_->mu);
  std::vector<NDArray> outputs;
  std::vector<void*> ptr = bind_plan_buffers(plan, inputs, static_cast<char*>(state_->arena.data()), &outputs, donated);
  std::vector<void*> args;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const ModelStep& step = plan.steps[s];
    args.clear();
    for (int b : step.args) args.push_back(ptr[b]);
    auto t0 = step_seconds ? Clock::now() : Clock::time_point();
    int32_t rc = state_->kernels[step.kernel](args.data());
    if (step_seconds) (*step_seconds)[s] += std::chrono::duration<double>(Clock::now() - t0).count();
    if (rc != 0) {
      const char* msg = kiln_get_last_error();
      KILN_USER_ERROR() << "kernel of group " << step.name << " failed: " << (msg ? msg : "no message");
    }
  }
  copy_unwritten_outputs(plan, ptr, &outputs);
  return outputs;
}

void copy_unwritten_outputs(const ModelPlan& plan, const std::vector<void*>& ptr, std::vector<NDArray>* outputs) {
  for (size_t i = 0; i < plan.output_buffers.size(); ++i) {
    const ModelBuffer& pb = plan.buffers[plan.output_buffers[i]];
    if (pb.kind == ModelBuffer::Kind::Output && pb.index == static_cast<int>(i)) continue;
    (*outputs)[i] = NDArray::empty(pb.shape, pb.dtype);
    (*outputs)[i].copy_from(ptr[plan.output_buffers[i]], pb.bytes());
  }
}

}  // namespace kiln
