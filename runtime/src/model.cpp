// ModelRunner (model.h): the plan's run loop, shared by the graph Executor
// (in process) and exported model libraries (ModelRunner::load).
#include "kiln/runtime/model.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "kiln/runtime/c_runtime_api.h"
#include "kiln/support/error.h"
#include "model_state.h"

namespace kiln {

std::vector<int64_t> shape_values_by_name(const ModelPlan& plan, const std::map<std::string, int64_t>& values, const std::string& what) {
  std::vector<int64_t> out;
  for (const std::string& v : plan.shape_vars) {
    auto it = values.find(v);
    KILN_USER_CHECK(it != values.end()) << what << ": no value for the shape variable '" << v << "'; give every one of the model's";
    out.push_back(it->second);
  }
  for (const auto& [name, value] : values)
    KILN_USER_CHECK(std::find(plan.shape_vars.begin(), plan.shape_vars.end(), name) != plan.shape_vars.end())
        << what << ": the model has no shape variable '" << name << "'";
  return out;
}

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

bool StepVariant::holds(const std::vector<int64_t>& values) const {
  for (const Condition& c : when) {
    std::optional<int64_t> v = c.expr.eval(values.data(), values.size());
    if (!v || *v < c.lo || *v > c.hi) return false;
  }
  return true;
}

int ModelStep::kernel_at(const std::vector<int64_t>& values) const {
  for (const StepVariant& v : variants)
    if (v.holds(values)) return v.kernel;
  return kernel;
}

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
    if (b.kind == ModelBuffer::Kind::Arena && !plan.is_dynamic() && (b.offset < 0 || b.offset + b.bytes() > plan.arena_bytes))
      bad("an arena buffer lies outside the arena");
    if (b.kind == ModelBuffer::Kind::Constant && !b.dims.empty()) bad("a constant has symbolic dims");
    if (b.kind == ModelBuffer::Kind::Constant && plan.constants[b.index].nbytes() != b.bytes())
      bad("a constant's size differs from its buffer's");
  }
  for (const ModelStep& s : plan.steps) {
    if (s.kernel < 0 || static_cast<size_t>(s.kernel) >= plan.kernel_names.size()) bad("step " + s.name + " names no kernel");
    for (int a : s.args)
      if (a < 0 || static_cast<size_t>(a) >= plan.buffers.size()) bad("step " + s.name + " names no buffer");
    if (!s.variants.empty() && !plan.is_dynamic()) bad("step " + s.name + " has kernel variants, but the plan has no shape variables to choose by");
    for (const StepVariant& v : s.variants) {
      if (v.kernel < 0 || static_cast<size_t>(v.kernel) >= plan.kernel_names.size()) bad("a variant of step " + s.name + " names no kernel");
      for (const StepVariant::Condition& c : v.when) {
        bool known = true;
        c.expr.for_each_param([&](int64_t v) { known = known && v >= 0 && static_cast<size_t>(v) < plan.shape_vars.size(); });
        if (!known) bad("a variant of step " + s.name + " tests a shape variable the plan does not have (it has " + std::to_string(plan.shape_vars.size()) + ")");
        if (c.lo > c.hi)
          bad("a variant of step " + s.name + " tests a size in the empty range [" + std::to_string(c.lo) + ", " + std::to_string(c.hi) + "]");
      }
    }
  }
  if (plan.output_buffers.size() != plan.outputs.size()) bad("outputs and their buffers differ in number");
  for (int b : plan.output_buffers)
    if (b < 0 || static_cast<size_t>(b) >= plan.buffers.size()) bad("an output names no buffer");
  if (plan.is_dynamic()) {
    state_->dynamic = std::make_unique<detail::DynamicState>();
    detail::init_dynamic(plan, kernels, state_->dynamic.get());
  }
  // A dynamic plan's arena is allocated at its bound when every variable has
  // a range (no allocation at any shape in range) and the bound is modest;
  // else it grows with the shapes it meets.
  int64_t arena = plan.arena_bytes;
  if (plan.is_dynamic()) {
    arena = 0;
    try {
      std::optional<MemoryPlanStats> bound = plan_memory_bound(plan);
      if (bound && bound->arena_bytes <= detail::kArenaAtBoundLimit) arena = bound->arena_bytes;
    } catch (const ShapeError&) {
      // Ranges whose maxima overflow a size: no bound to allocate at; the calls in range still run.
    }
  }
  state_->module = std::move(kernels);
  state_->plan = std::move(plan);
  detail::allocate_arena(*state_, arena);
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
    if (!t.dims.empty()) {  // symbolic: the rank here, the values when the shape variables are bound
      KILN_USER_CHECK(inputs[i].shape().size() == t.dims.size())
          << "input '" << name << "' has shape " << shape_to_string(inputs[i].shape()) << " of rank " << inputs[i].shape().size() << "; the model expects rank "
          << t.dims.size() << " (shape " << shape_to_string(t.shape) << ", -1 where any size goes)";
    } else {
      KILN_USER_CHECK(inputs[i].shape() == t.shape) << "input '" << name << "' has shape " << shape_to_string(inputs[i].shape())
                                                    << "; the model was compiled for " << shape_to_string(t.shape)
                                                    << " (compile again with that shape to run it)";
    }
    KILN_USER_CHECK(inputs[i].is_contiguous()) << "input '" << name << "' is not compact row-major; pass a contiguous array";
  }
}

std::vector<void*> bind_plan_buffers(const ModelPlan& plan, const std::vector<NDArray>& inputs, char* arena, std::vector<NDArray>* outputs,
                                     const std::vector<bool>* donated) {
  KILN_USER_CHECK(!plan.is_dynamic()) << "bind_plan_buffers takes a static plan; a plan with shape variables places its buffers "
                                      << "per shape (ModelRunner::run, model_shapes.h: bind_plan_shapes)";
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

namespace detail {

void allocate_arena(ModelRunner::State& st, int64_t bytes) {
  auto start = std::chrono::steady_clock::now();
  int64_t old = st.arena.defined() ? st.arena.nbytes() : 0;
  if (st.plan.is_dynamic() && old > 1) bytes = std::max(bytes, old + old / 2);
  bytes = std::max<int64_t>(bytes, 1);
  st.arena = NDArray();  // the old arena goes first, so that the two never add up
  st.arena = NDArray::empty({bytes}, DataType::UInt(8));
  char* p = static_cast<char*>(st.arena.data());
  for (int64_t i = 0; i < bytes; i += 4096) p[i] = 0;
  st.stats.arena_allocations += 1;
  st.stats.arena_bytes = bytes;
  st.stats.arena_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

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

void call_step(const ModelRunner::State& st, size_t s, int kernel, const std::vector<void*>& args, std::vector<double>* step_seconds) {
  using Clock = std::chrono::steady_clock;
  const ModelStep& step = st.plan.steps[s];
  auto t0 = step_seconds ? Clock::now() : Clock::time_point();
  int32_t rc = st.kernels[kernel](args.data());
  if (step_seconds) (*step_seconds)[s] += std::chrono::duration<double>(Clock::now() - t0).count();
  if (rc != 0) {
    const char* msg = kiln_get_last_error();
    KILN_USER_ERROR() << "kernel of group " << step.name << " failed: " << (msg ? msg : "no message");
  }
}

}  // namespace detail

std::vector<NDArray> ModelRunner::run(const std::vector<NDArray>& inputs, std::vector<double>* step_seconds, const std::vector<bool>* donated) const {
  KILN_USER_CHECK(state_) << "use of a null ModelRunner; load one with ModelRunner::load";
  const ModelPlan& plan = state_->plan;
  check_model_inputs(plan.inputs, inputs);
  if (donated) detail::check_donations(plan, inputs, *donated);
  if (step_seconds && step_seconds->size() < plan.steps.size()) step_seconds->resize(plan.steps.size(), 0.0);
  if (plan.is_dynamic()) return detail::run_dynamic(*state_, inputs, step_seconds, donated);
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->stats.runs += 1;
  std::vector<NDArray> outputs;
  std::vector<void*> ptr = bind_plan_buffers(plan, inputs, static_cast<char*>(state_->arena.data()), &outputs, donated);
  std::vector<void*> args;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    args.clear();
    for (int b : plan.steps[s].args) args.push_back(ptr[b]);
    detail::call_step(*state_, s, plan.steps[s].kernel, args, step_seconds);
  }
  copy_unwritten_outputs(plan, ptr, &outputs);
  return outputs;
}

MemoryPlanStats ModelRunner::memory(const std::vector<int64_t>& shape_values) const { return plan_memory_at(plan(), shape_values); }

std::optional<MemoryPlanStats> ModelRunner::memory_bound() const { return plan_memory_bound(plan()); }

size_t ModelRunner::cached_shapes() const {
  plan();  // refuses a null runner
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->dynamic ? state_->dynamic->cache.size() : 0;
}

ModelRunStats ModelRunner::run_stats() const {
  plan();  // refuses a null runner
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
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
