// ModelRunner::run for a plan with shape variables (model.h). A new tuple of
// shape values is bound, checked and planned once (model_shapes.h), and each
// step's kernel binder runs once on arrays of the evaluated shapes to give
// the kernel's shape scalars (each step's kernel variant is chosen there
// too, ModelStep::kernel_at); the result is cached (16 entries, least
// recently used out). A run at a seen shape then costs a key lookup, one
// shape comparison per input and the output allocations.
#include <algorithm>
#include <chrono>

#include "kiln/runtime/arg_binder.h"
#include "model_state.h"

namespace kiln::detail {

namespace {

[[noreturn]] void corrupt(const std::string& what) { throw Error("ModelRunner: corrupt dynamic plan: " + what); }

// A kernel of a dynamic plan takes the step's buffers first, then shape scalars its binder can infer.
void check_step_kernel(const ModelStep& step, const KernelInfo& k) {
  if (k.params.size() < step.args.size())
    corrupt("step '" + step.name + "' passes " + std::to_string(step.args.size()) + " buffers to kernel '" + k.name + "', which takes " +
            std::to_string(k.params.size()) + " parameters");
  for (size_t i = 0; i < k.params.size(); ++i) {
    bool buffer = i < step.args.size();
    if (k.params[i].is_buffer != buffer)
      corrupt("kernel '" + k.name + "' parameter " + std::to_string(i) + " '" + k.params[i].name + "' is a " + (k.params[i].is_buffer ? "buffer" : "scalar") +
              " where step '" + step.name + "' puts " + (buffer ? "a buffer" : "a shape scalar") +
              " (kernels take their buffers first, then their shape scalars)");
  }
}

void check_lifetimes(const ModelPlan& plan) {
  int steps = static_cast<int>(plan.steps.size());
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const ModelBuffer& pb = plan.buffers[b];
    if (pb.dims.size() != pb.shape.size() && !pb.dims.empty()) corrupt("buffer " + std::to_string(b) + " has dims of another rank than its shape");
    const ModelTensor* t = pb.kind == ModelBuffer::Kind::Input    ? &plan.inputs[pb.index]
                           : pb.kind == ModelBuffer::Kind::Output ? &plan.outputs[pb.index]
                                                                  : nullptr;
    if (t && (t->dims != pb.dims || t->shape != pb.shape))
      corrupt("buffer " + std::to_string(b) + " differs in shape from " + (pb.kind == ModelBuffer::Kind::Input ? "input '" : "output '") + t->name + "'");
    if (pb.kind != ModelBuffer::Kind::Arena) continue;
    if (pb.view_of >= 0) {  // a view of an arena buffer with bytes of its own, maybe through views (no cycle)
      int src = pb.view_of;
      for (size_t hops = 0; src >= 0 && hops <= plan.buffers.size(); ++hops) {
        if (static_cast<size_t>(src) >= plan.buffers.size() || plan.buffers[src].kind != ModelBuffer::Kind::Arena)
          src = -2;
        else if (plan.buffers[src].view_of < 0)
          break;
        else
          src = plan.buffers[src].view_of;
      }
      if (src < 0 || plan.buffers[src].view_of >= 0) corrupt("arena buffer " + std::to_string(b) + " views no arena buffer with bytes of its own");
      continue;
    }
    if (pb.first_step < 0 || pb.first_step > pb.last_step || pb.last_step >= std::max(steps, 1))
      corrupt("arena buffer " + std::to_string(b) + " lives from step " + std::to_string(pb.first_step) + " to " + std::to_string(pb.last_step) + " of " +
              std::to_string(steps));
    if (pb.inplace_of >= 0 && (static_cast<size_t>(pb.inplace_of) >= plan.buffers.size() || plan.buffers[pb.inplace_of].kind != ModelBuffer::Kind::Arena))
      corrupt("arena buffer " + std::to_string(b) + " is in place of buffer " + std::to_string(pb.inplace_of) + ", not an arena buffer");
  }
}

// The packed shape scalars of `k` for the arrays of step `s` at `bound`: its binder on views of those shapes.
std::vector<uint64_t> step_scalars(const ModelPlan& plan, size_t s, const KernelInfo& k, const BoundShapes& bound) {
  alignas(64) static char placeholder[64];  // the binder never reads data; it only must not be null
  const ModelStep& step = plan.steps[s];
  std::vector<DLTensor> tensors(step.args.size());
  std::vector<std::vector<int64_t>> shapes(step.args.size());
  std::vector<Arg> args;
  for (size_t i = 0; i < step.args.size(); ++i) {
    const ModelBuffer& pb = plan.buffers[step.args[i]];
    std::vector<int64_t>& shape = shapes[i] = bound.shapes[step.args[i]];
    tensors[i] = DLTensor{placeholder, DLDevice{kDLCPU, 0}, static_cast<int32_t>(shape.size()), to_dlpack_dtype(pb.dtype), shape.data(), nullptr, 0};
    args.emplace_back(&tensors[i]);
  }
  // Shape scalars named after the model's shape variables get their values
  // (a kernel over [batch * 12, seq, 32] has no array with batch as a plain
  // dimension); the binder checks them against the arrays and infers the rest.
  for (size_t i = step.args.size(); i < k.params.size(); ++i) {
    auto it = std::find(plan.shape_vars.begin(), plan.shape_vars.end(), k.params[i].name);
    if (k.params[i].is_buffer || it == plan.shape_vars.end()) break;
    args.emplace_back(bound.values[it - plan.shape_vars.begin()]);
  }
  std::vector<uint64_t> out;
  try {
    PackedArgs packed(k, args);
    for (size_t i = step.args.size(); i < k.params.size(); ++i) out.push_back(*static_cast<const uint64_t*>(packed.data()[i]));
  } catch (const Error& e) {
    std::string values;
    for (size_t v = 0; v < plan.shape_vars.size(); ++v) values += (v ? ", " : "") + plan.shape_vars[v] + " = " + std::to_string(bound.values[v]);
    throw ShapeError("at " + values + ", step '" + step.name + "' cannot call its kernel: " + e.what() + "; pass shapes the model's operators accept");
  }
  return out;
}

// Binds, checks and plans the shapes of `inputs`, evicting the least recently used entry when full.
ShapeEntry* add_entry(ModelRunner::State& st, const std::vector<NDArray>& inputs) {
  const ModelPlan& plan = st.plan;
  DynamicState& dyn = *st.dynamic;
  auto start = std::chrono::steady_clock::now();
  auto e = std::make_unique<ShapeEntry>();
  e->bound = bind_plan_shapes(plan, bind_shape_values(plan, dyn.sources, inputs));
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    e->kernels.push_back(plan.steps[s].kernel_at(e->bound.values));
    e->scalars.push_back(step_scalars(plan, s, *dyn.infos[e->kernels.back()], e->bound));
  }
  auto planned = std::chrono::steady_clock::now();
  st.stats.plans += 1;
  st.stats.plan_seconds += std::chrono::duration<double>(planned - start).count();
  if (e->bound.memory.arena_bytes > st.arena.nbytes()) allocate_arena(st, e->bound.memory.arena_bytes);
  st.stats.last_plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (dyn.cache.size() >= DynamicState::kCacheEntries) {
    auto oldest = std::min_element(dyn.cache.begin(), dyn.cache.end(), [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
    dyn.cache.erase(oldest);
  }
  dyn.cache.push_back(std::move(e));
  return dyn.cache.back().get();
}

// The cached entry for these inputs, if their values were seen and every input's shape is the one they give.
ShapeEntry* find_entry(DynamicState& dyn, const std::vector<NDArray>& inputs) {
  dyn.key.resize(dyn.sources.size());
  for (size_t v = 0; v < dyn.sources.size(); ++v) dyn.key[v] = inputs[dyn.sources[v].input].shape()[dyn.sources[v].dim];
  for (const auto& e : dyn.cache) {
    if (e->bound.values != dyn.key) continue;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (dyn.input_buffer[i] >= 0 && inputs[i].shape() != e->bound.shapes[dyn.input_buffer[i]]) return nullptr;
    return e.get();
  }
  return nullptr;
}

}  // namespace

void init_dynamic(const ModelPlan& plan, const Module& module, DynamicState* dyn) {
  if (!plan.shape_ranges.empty() && plan.shape_ranges.size() != plan.shape_vars.size())
    corrupt(std::to_string(plan.shape_ranges.size()) + " ranges for " + std::to_string(plan.shape_vars.size()) + " shape variables");
  for (const auto& r : plan.shape_ranges)
    if (r && (r->lo < 0 || r->lo > r->hi))
      corrupt("a shape variable's range [" + std::to_string(r->lo) + ", " + std::to_string(r->hi) + "] is empty or negative");
  for (const ModelTensor& t : plan.inputs)
    if (!t.dims.empty() && t.dims.size() != t.shape.size()) corrupt("input '" + t.name + "' has dims of another rank than its shape");
  check_lifetimes(plan);
  dyn->sources = shape_var_sources(plan);
  for (const std::string& name : plan.kernel_names) dyn->infos.push_back(&module.info(name));
  for (const ModelStep& step : plan.steps) {
    check_step_kernel(step, *dyn->infos[step.kernel]);
    for (const StepVariant& v : step.variants) check_step_kernel(step, *dyn->infos[v.kernel]);
  }
  dyn->input_buffer.assign(plan.inputs.size(), -1);
  for (size_t b = 0; b < plan.buffers.size(); ++b)
    if (plan.buffers[b].kind == ModelBuffer::Kind::Input) dyn->input_buffer[plan.buffers[b].index] = static_cast<int>(b);
}

std::vector<NDArray> run_dynamic(ModelRunner::State& st, const std::vector<NDArray>& inputs, std::vector<double>* step_seconds,
                                 const std::vector<bool>* donated) {
  const ModelPlan& plan = st.plan;
  std::lock_guard<std::mutex> lock(st.mu);
  DynamicState& dyn = *st.dynamic;
  st.stats.runs += 1;
  ShapeEntry* e = find_entry(dyn, inputs);
  if (!e) e = add_entry(st, inputs);
  e->last_use = ++dyn.clock;
  const BoundShapes& bound = e->bound;
  std::vector<NDArray> outputs(plan.outputs.size());
  std::vector<void*>& ptr = dyn.ptr;
  ptr.resize(plan.buffers.size());
  char* arena = static_cast<char*>(st.arena.data());
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const ModelBuffer& pb = plan.buffers[b];
    switch (pb.kind) {
      case ModelBuffer::Kind::Input:
        ptr[b] = inputs[pb.index].data();
        break;
      case ModelBuffer::Kind::Constant:
        ptr[b] = plan.constants[pb.index].data();
        break;
      case ModelBuffer::Kind::Arena:
        ptr[b] = arena + bound.offsets[b];
        break;
      case ModelBuffer::Kind::Output: {
        int reuse = pb.index < static_cast<int>(plan.output_reuses_input.size()) ? plan.output_reuses_input[pb.index] : -1;
        bool take = reuse >= 0 && donated && (*donated)[reuse] && inputs[reuse].shape() == bound.shapes[b];
        outputs[pb.index] = take ? inputs[reuse] : NDArray::empty(bound.shapes[b], pb.dtype);
        ptr[b] = outputs[pb.index].data();
        break;
      }
    }
  }
  std::vector<void*>& args = dyn.args;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    args.clear();
    for (int b : plan.steps[s].args) args.push_back(ptr[b]);
    for (uint64_t& v : e->scalars[s]) args.push_back(&v);
    call_step(st, s, e->kernels[s], args, step_seconds);
  }
  // Outputs that no step wrote (an input or constant returned as is, one value returned twice) are copies.
  for (size_t i = 0; i < plan.output_buffers.size(); ++i) {
    int b = plan.output_buffers[i];
    const ModelBuffer& pb = plan.buffers[b];
    if (pb.kind == ModelBuffer::Kind::Output && pb.index == static_cast<int>(i)) continue;
    outputs[i] = NDArray::empty(bound.shapes[b], pb.dtype);
    if (outputs[i].nbytes() > 0) outputs[i].copy_from(ptr[b], outputs[i].nbytes());
  }
  return outputs;
}

}  // namespace kiln::detail
