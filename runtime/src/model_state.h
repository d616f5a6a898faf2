// ModelRunner's state (model.h), shared by the static run loop (model.cpp)
// and the dynamic one (model_dynamic.cpp). Internal to kiln_runtime.
#ifndef KILN_RUNTIME_SRC_MODEL_STATE_H
#define KILN_RUNTIME_SRC_MODEL_STATE_H

#include <memory>
#include <mutex>
#include <vector>

#include "kiln/runtime/model.h"
#include "kiln/runtime/model_shapes.h"

namespace kiln {

namespace detail {

/** A dynamic plan at one tuple of shape values: what a run at that shape needs, computed once. */
struct ShapeEntry {
  BoundShapes bound;                           ///< the values (the key), buffer shapes, arena offsets
  std::vector<int> kernels;                    ///< per step: the kernel it calls at these values (its variant or its own)
  std::vector<std::vector<uint64_t>> scalars;  ///< per step: that kernel's trailing shape scalars, as its binder packed them
  uint64_t last_use = 0;                       ///< for evicting the least recently used entry
};

/** What a dynamic plan adds to the runner: where its variables come from and its shapes seen lately. */
struct DynamicState {
  static constexpr size_t kCacheEntries = 16;
  std::vector<ShapeVarSource> sources;   // per shape variable
  std::vector<const KernelInfo*> infos;  // per plan kernel
  std::vector<int> input_buffer;         // per model input: its buffer (-1 if none)
  std::vector<std::unique_ptr<ShapeEntry>> cache;
  uint64_t clock = 0;
  // Scratch reused by every run (under State::mu), so a seen shape allocates nothing but its outputs.
  std::vector<int64_t> key;
  std::vector<void*> ptr, args;
};

/** Checks what a dynamic plan needs beyond a static one (kernels' parameters, lifetimes, sources); fills *dyn. */
void init_dynamic(const ModelPlan& plan, const Module& module, DynamicState* dyn);

}  // namespace detail

struct ModelRunner::State {
  ModelPlan plan;
  Module module;
  std::vector<KilnKernel> kernels;  // per plan kernel
  NDArray arena;
  std::mutex mu;                                  // the arena is shared by the calls: one run at a time
  std::unique_ptr<detail::DynamicState> dynamic;  // a dynamic plan only
  ModelRunStats stats;                                 // under mu
};

namespace detail {
/** ModelRunner::run for a dynamic plan. */
std::vector<NDArray> run_dynamic(ModelRunner::State& st, const std::vector<NDArray>& inputs, std::vector<double>* step_seconds,
                                 const std::vector<bool>* donated);
/** Runs plan kernel `kernel` for step `s` with `args`, adding its seconds; throws naming the step when it fails. */
void call_step(const ModelRunner::State& st, size_t s, int kernel, const std::vector<void*>& args, std::vector<double>* step_seconds);
/**
 * Replaces st.arena by one of at least `bytes`, every page touched once (so
 * that no kernel takes the page faults of fresh memory), counting it in
 * st.stats. A dynamic plan grows by at least half its arena, so that a
 * decoder whose cache grows by one position a call reallocates a few times.
 */
void allocate_arena(ModelRunner::State& st, int64_t bytes);
/** The largest bound a dynamic plan's arena is allocated at when it is made (beyond it, a shape that needs more grows it). */
constexpr int64_t kArenaAtBoundLimit = int64_t{256} << 20;
/** Refuses a donated input that shares memory with another input. */
void check_donations(const ModelPlan& plan, const std::vector<NDArray>& inputs, const std::vector<bool>& donated);
}  // namespace detail

}  // namespace kiln

#endif  // KILN_RUNTIME_SRC_MODEL_STATE_H
