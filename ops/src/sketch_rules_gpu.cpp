// The GPU sketch rules (cuda targets), in the manner of Ansor's GPU rules.
// Every candidate binds its loops to blocks and threads in the kernel shape
// of kiln/pass/gpu.h (blockIdx loops outermost, block-level code, thread
// nests as leaves); the launch limits (threads per block, shared memory)
// depend on the extents bound inference gives, so the search space checks
// them by lowering each candidate (search_space.cpp). One output per kernel.
//
//  1. Non-output elementwise stages are inlined, padding too: a tiled
//     reduction's shared-memory copy of the padded input takes the padding's
//     condition, so no load leaves the input.
//  2. A reduction with reuse (matmul, conv) that reads inputs only is tiled:
//     each spatial axis into block / thread / register levels, each reduce
//     axis into outer / inner; a thread's accumulators are local; at each
//     outer reduce step the block's threads copy each input's tile into
//     shared memory. Its elementwise output consumer (bias, activation,
//     residual) takes the block and thread levels (GpuTiledFused); an output
//     reduction gets a cache_write copy that does (GpuTiled).
//  3. A reduction along the rows of an elementwise output (softmax, layer
//     norm, also with ONNX's keepdims) runs in the output's block for that
//     row, reduced across the block's threads (lower_thread_allreduce: warp
//     shuffles).
//  4. An output reduction without reuse: a thread per element, or a block
//     per element reduced across its threads.
//  5. The last sketch, always valid: a thread per output element, every other
//     stored stage computed where that thread needs it.
#include <algorithm>
#include <sstream>

#include "kiln/support/error.h"
#include "search_space_internal.h"

namespace kiln::ops::detail {

namespace {

int output_stage(const DagInfo& dag) {
  int out = -1, count = 0;
  for (size_t i = 0; i < dag.stages.size(); ++i)
    if (dag.stages[i].output && dag.stages[i].op) {
      out = static_cast<int>(i);
      ++count;
    }
  KILN_USER_CHECK(count == 1) << "GPU schedules: the task has " << count << " computed outputs; the GPU rules schedule one output per kernel (build each output as its own kernel)";
  KILN_USER_CHECK(!dag.stages[out].spatial.empty()) << "GPU schedules: output '" << dag.stages[out].name
                                                    << "' is a scalar; the GPU rules need a data-parallel axis to bind to blocks (reshape it to [1])";
  return out;
}

// Rule 2 needs the tiles of every stored stage it reads at block level, which
// only inputs have.
bool reads_inputs_only(const DagInfo& dag, const StageInfo& s) {
  for (int r : s.reads)
    if (dag.stages[r].op) return false;
  return true;
}

bool tileable(const DagInfo& dag, const StageInfo& s) { return s.reduction && s.has_reuse && reads_inputs_only(dag, s); }

std::vector<StagePlan> base_plans(const DagInfo& dag) {
  std::vector<StagePlan> plans(dag.stages.size());
  for (size_t i = 0; i < dag.stages.size(); ++i)
    if (dag.stages[i].op && dag.stages[i].inlined) plans[i].kind = PlanKind::Inline;
  return plans;
}

// Rules 2 to 4 where they apply; empty when the structured sketch would be the fallback.
std::vector<std::vector<StagePlan>> structured_plans(const DagInfo& dag, int o) {
  std::vector<StagePlan> plans = base_plans(dag);
  const StageInfo& out = dag.stages[o];
  bool fused = false, rows = false, per_thread = false;
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const StageInfo& s = dag.stages[i];
    if (!s.op || s.inlined || s.output) continue;
    StagePlan& p = plans[i];
    p.consumer = o;
    if (!fused && tileable(dag, s) && fusible_consumer(dag, static_cast<int>(i)) == o && consumer_row_axes(dag, static_cast<int>(i), o) == 1) {
      p.kind = PlanKind::GpuTiledFused;
      fused = true;
    } else if (rowwise_target(dag, static_cast<int>(i)) == o) {
      p.kind = PlanKind::GpuRowReduce;
      rows = true;
    } else {
      p.kind = PlanKind::GpuAtThread;
      per_thread = true;
    }
  }
  if (fused && rows)
    for (StagePlan& p : plans)
      if (p.kind == PlanKind::GpuRowReduce) p.kind = PlanKind::GpuAtThread;
  std::vector<std::vector<StagePlan>> out_plans;
  // Tensor cores first (the default where they apply), then the same matmul on the SIMT cores.
  if (!fused && !rows && !per_thread && tensor_core_matmul(out)) {
    std::vector<StagePlan> tc = plans;
    tc[o].kind = PlanKind::GpuTensorCore;
    out_plans.push_back(std::move(tc));
  }
  if (fused) {
    plans[o].kind = PlanKind::FusedConsumer;
    out_plans.push_back(plans);
  } else if (rows) {
    plans[o].kind = PlanKind::GpuRows;
    out_plans.push_back(plans);
  } else if (tileable(dag, out)) {
    plans[o].kind = PlanKind::GpuTiled;
    out_plans.push_back(plans);
  } else if (out.reduction && !per_thread && out.reduce_size() >= 32) {
    plans[o].kind = PlanKind::GpuBlockReduce;
    out_plans.push_back(plans);
  }
  return out_plans;
}

// Rule 5: a thread per output element, everything else at that thread.
std::vector<StagePlan> fallback_plans(const DagInfo& dag, int o) {
  std::vector<StagePlan> plans = base_plans(dag);
  for (size_t i = 0; i < dag.stages.size(); ++i)
    if (dag.stages[i].op && !dag.stages[i].inlined && static_cast<int>(i) != o) {
      plans[i].kind = PlanKind::GpuAtThread;
      plans[i].consumer = o;
    }
  plans[o].kind = PlanKind::GpuThreads;
  return plans;
}

int add_slot(Sketch* sk, Slot s) {
  s.offset = sk->num_decisions;
  sk->num_decisions += s.size;
  sk->slots.push_back(std::move(s));
  return static_cast<int>(sk->slots.size()) - 1;
}

int threads_slot(Sketch* sk, const std::string& label, int choices) {
  Slot s;
  s.kind = Slot::Kind::Choice;
  s.choices = choices;
  s.label = label;
  return add_slot(sk, std::move(s));
}

int tile_slot(Sketch* sk, const std::string& label, int64_t extent, int levels, int sample_max) {
  Slot s;
  s.kind = Slot::Kind::Tile;
  s.size = levels;
  s.extent = extent;
  s.sample_max = sample_max;
  s.label = label;
  return add_slot(sk, std::move(s));
}

// Register tiles of at most 8 per axis when sampled (mutation may go on), and
// inner reduce steps of at most 16: a thread's accumulators must stay in registers.
constexpr int kSampleRegisterTile = 8;
constexpr int kSampleReduceInner = 16;

void lay_out_gpu(const DagInfo& dag, Sketch* sk) {
  for (size_t i = 0; i < sk->plans.size(); ++i) {
    StagePlan& p = sk->plans[i];
    const StageInfo& s = dag.stages[i];
    switch (p.kind) {
      case PlanKind::GpuThreads: p.parallel = threads_slot(sk, s.name + ".threads", kNumGpuThreads); break;
      case PlanKind::GpuBlockReduce:
      case PlanKind::GpuRows: p.parallel = threads_slot(sk, s.name + ".threads", kNumGpuThreads - 1); break;
      case PlanKind::GpuTiled:
      case PlanKind::GpuTiledFused:
        for (size_t k = 0; k < s.spatial.size(); ++k) p.spatial_tiles.push_back(tile_slot(sk, s.name + "." + s.op->axis[k].name(), s.spatial[k], 3, kSampleRegisterTile));
        for (size_t k = 0; k < s.reduce.size(); ++k) p.reduce_tiles.push_back(tile_slot(sk, s.name + "." + s.op->reduce_axis[k].name(), s.reduce[k], 2, kSampleReduceInner));
        p.unroll = threads_slot(sk, s.name + ".unroll", 2);
        break;
      case PlanKind::GpuTensorCore:
        lay_out_tensor_core(s, &p, [&](const std::string& label, int64_t extent, int levels, int sample_max) { return tile_slot(sk, label, extent, levels, sample_max); });
        break;
      default: break;
    }
  }
}

std::string describe_gpu(const DagInfo& dag, const Sketch& sk) {
  std::ostringstream os;
  bool first = true;
  for (size_t i = 0; i < sk.plans.size(); ++i) {
    const StagePlan& p = sk.plans[i];
    if (p.kind == PlanKind::None) continue;
    os << (first ? "gpu: " : "; ") << dag.stages[i].name << ": " << plan_kind_name(p.kind);
    first = false;
  }
  os << " [" << sk.slots.size() << " decisions]";
  return os.str();
}

bool same_plans(const std::vector<StagePlan>& a, const std::vector<StagePlan>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].kind != b[i].kind) return false;
  return true;
}

}  // namespace

std::vector<Sketch> generate_gpu_sketches(const DagInfo& dag) {
  int o = output_stage(dag);
  std::vector<std::vector<StagePlan>> all = structured_plans(dag, o);
  std::vector<StagePlan> fallback = fallback_plans(dag, o);
  if (all.empty() || !same_plans(all.back(), fallback)) all.push_back(std::move(fallback));
  std::vector<Sketch> sketches;
  for (std::vector<StagePlan>& plans : all) {
    Sketch sk;
    sk.plans = std::move(plans);
    lay_out_gpu(dag, &sk);
    sk.description = describe_gpu(dag, sk);
    sketches.push_back(std::move(sk));
  }
  return sketches;
}

namespace {

int choice_of_threads(int threads) {
  for (int i = 0; i < kNumGpuThreads; ++i)
    if (kGpuThreads[i] >= threads) return i;
  return kNumGpuThreads - 1;
}

// Rule 2's default: from the innermost axis out, a register tile of up to
// 4 per axis (16 accumulators in all) and up to 16 threads per axis (256
// in all); the reduce axes' inner steps whole up to 8 (a conv's window).
void default_tiles(const StageInfo& s, const Sketch& sk, const StagePlan& p, std::vector<int>* d) {
  int64_t registers = 16, threads = 256;
  for (size_t k = s.spatial.size(); k-- > 0;) {
    int* f = d->data() + sk.slots[p.spatial_tiles[k]].offset;
    int64_t e = s.spatial[k];
    int64_t inner = divisor_at_most(e, std::min<int64_t>(4, registers));
    int64_t thread = divisor_at_most(e / inner, std::min<int64_t>(16, threads));
    registers /= inner;
    threads /= thread;
    f[0] = static_cast<int>(e / inner / thread);
    f[1] = static_cast<int>(thread);
    f[2] = static_cast<int>(inner);
  }
  for (size_t k = 0; k < s.reduce.size(); ++k) {
    int* f = d->data() + sk.slots[p.reduce_tiles[k]].offset;
    int64_t inner = divisor_at_most(s.reduce[k], 8);
    f[0] = static_cast<int>(s.reduce[k] / inner);
    f[1] = static_cast<int>(inner);
  }
  if (p.unroll >= 0) (*d)[sk.slots[p.unroll].offset] = 1;
}

}  // namespace

std::vector<int> gpu_default_decisions(const DagInfo& dag, const Sketch& sk) {
  std::vector<int> d(sk.num_decisions, 0);
  for (size_t i = 0; i < sk.plans.size(); ++i) {
    const StagePlan& p = sk.plans[i];
    const StageInfo& s = dag.stages[i];
    switch (p.kind) {
      case PlanKind::GpuThreads: d[sk.slots[p.parallel].offset] = choice_of_threads(256); break;
      case PlanKind::GpuRows:
        d[sk.slots[p.parallel].offset] = std::min(choice_of_threads(static_cast<int>(std::min<int64_t>(256, s.spatial.back()))), sk.slots[p.parallel].choices - 1);
        break;
      case PlanKind::GpuBlockReduce:
        d[sk.slots[p.parallel].offset] = std::min(choice_of_threads(static_cast<int>(std::min<int64_t>(256, s.reduce_size()))), sk.slots[p.parallel].choices - 1);
        break;
      case PlanKind::GpuTiled:
      case PlanKind::GpuTiledFused: default_tiles(s, sk, p, &d); break;
      case PlanKind::GpuTensorCore: tensor_core_defaults(s, sk, p, &d); break;
      default: break;
    }
  }
  return d;
}

bool shrink_gpu_tiles(const Sketch& sk, std::vector<int>* d) {
  // The slot and level whose factor is largest among the candidates for shrinking.
  auto shrink_largest = [&](bool reduce) {
    int best_slot = -1;
    int best = 1;
    for (const StagePlan& p : sk.plans)
      for (int slot : reduce ? p.reduce_tiles : p.spatial_tiles) {
        int v = (*d)[sk.slots[slot].offset + 1];
        if (v > best) best = v, best_slot = slot;
      }
    if (best_slot < 0) return false;
    int* f = d->data() + sk.slots[best_slot].offset;
    int64_t p = prime_factors(f[1]).front();
    f[1] = static_cast<int>(f[1] / p);
    f[0] = static_cast<int>(f[0] * p);
    return true;
  };
  if (shrink_largest(true) || shrink_largest(false)) return true;
  for (const StagePlan& p : sk.plans)
    if (p.parallel >= 0 && (*d)[sk.slots[p.parallel].offset] > 0) {
      --(*d)[sk.slots[p.parallel].offset];
      return true;
    }
  return false;
}

namespace {

class GpuApplier {
 public:
  GpuApplier(const DagInfo& dag, const Sketch& sk, const std::vector<int>& d, te::Schedule& s)
      : dag_(dag), sk_(sk), d_(d), s_(s), block_(dag.stages.size()), thread_(dag.stages.size()) {}

  void run() {
    // cache_write must be the first primitive on its stage, and the shared
    // copies come before the inlining, so padding inlines into them.
    // A tiled stage's accumulator is a local cache_write copy; fused into its
    // consumer, the copy out is inlined there (the consumer reads the registers).
    // A tensor-core output is the kernel's one stored stage: its schedule is whole (its copies before the inlining too).
    for (size_t i = 0; i < sk_.plans.size(); ++i)
      if (const StagePlan& p = sk_.plans[i]; p.kind == PlanKind::GpuTensorCore)
        apply_tensor_core(s_, dag_.stages[i], tile(p.spatial_tiles[0]), tile(p.spatial_tiles[1]), tile(p.reduce_tiles[0]), 8);
    std::vector<te::Tensor> local(sk_.plans.size());
    for (size_t i = 0; i < sk_.plans.size(); ++i)
      if (sk_.plans[i].kind == PlanKind::GpuTiled || sk_.plans[i].kind == PlanKind::GpuTiledFused) local[i] = s_.cache_write(dag_.stages[i].tensor, "local");
    std::vector<std::vector<te::Tensor>> shared(sk_.plans.size());
    for (size_t i = 0; i < sk_.plans.size(); ++i) {
      PlanKind k = sk_.plans[i].kind;
      if (k == PlanKind::GpuTiled || k == PlanKind::GpuTiledFused) shared[i] = shared_copies(static_cast<int>(i), local[i]);
    }
    for (size_t i = 0; i < sk_.plans.size(); ++i)
      if (sk_.plans[i].kind == PlanKind::Inline || sk_.plans[i].kind == PlanKind::GpuTiledFused) s_[dag_.stages[i].tensor].compute_inline();
    // Consumers first: a stage computed at a loop needs that loop made.
    for (size_t i = sk_.plans.size(); i-- > 0;) {
      const StagePlan& p = sk_.plans[i];
      const StageInfo& info = dag_.stages[i];
      switch (p.kind) {
        case PlanKind::GpuThreads: threads(static_cast<int>(i), p); break;
        case PlanKind::GpuBlockReduce: block_reduce(static_cast<int>(i), p); break;
        case PlanKind::GpuRows: rows(static_cast<int>(i), p); break;
        case PlanKind::GpuRowReduce: row_reduce(static_cast<int>(i), p); break;
        case PlanKind::GpuTiled: tiled(info, p, s_[info.tensor], s_[local[i]], shared[i], static_cast<int>(i)); break;
        case PlanKind::GpuTiledFused: tiled(info, p, s_[dag_.stages[p.consumer].tensor], s_[local[i]], shared[i], p.consumer); break;
        case PlanKind::GpuAtThread: {
          KILN_CHECK(thread_[p.consumer].defined()) << "GPU sketch: stage '" << info.name << "' is computed at a thread loop '" << dag_.stages[p.consumer].name << "' does not have";
          s_[info.tensor].compute_at(s_[dag_.stages[p.consumer].tensor], thread_[p.consumer]);
          break;
        }
        default: break;
      }
    }
  }

 private:
  int threads_of(const StagePlan& p) const { return kGpuThreads[d_[sk_.slots[p.parallel].offset]]; }
  const int* tile(int slot) const { return &d_[sk_.slots[slot].offset]; }

  // The tensors stage i's body reads, each copied into shared memory for `reader`.
  std::vector<te::Tensor> shared_copies(int i, const te::Tensor& reader) {
    std::vector<te::Tensor> out;
    for (const te::Tensor& t : dag_.stages[i].op->input_tensors()) out.push_back(s_.cache_read(t, "shared", {reader}));
    return out;
  }

  IterVar fuse_all(te::Stage& st, const std::vector<IterVar>& ivs) { return ivs.size() == 1 ? ivs[0] : st.fuse(ivs); }

  void threads(int i, const StagePlan& p) {
    te::Stage& st = s_[dag_.stages[i].tensor];
    std::vector<IterVar> leaves = st.leaf_iter_vars();
    leaves.resize(dag_.stages[i].spatial.size());
    auto [bx, tx] = st.split(fuse_all(st, leaves), threads_of(p));
    st.bind(bx, "blockIdx.x");
    st.bind(tx, "threadIdx.x");
    block_[i] = bx;
    thread_[i] = tx;
  }

  void block_reduce(int i, const StagePlan& p) {
    te::Stage& st = s_[dag_.stages[i].tensor];
    size_t n = dag_.stages[i].spatial.size();
    std::vector<IterVar> leaves = st.leaf_iter_vars();
    IterVar bx = fuse_all(st, std::vector<IterVar>(leaves.begin(), leaves.begin() + n));
    IterVar k = fuse_all(st, std::vector<IterVar>(leaves.begin() + n, leaves.end()));
    auto [ko, ki] = st.split(k, threads_of(p));
    (void)ko;
    st.bind(bx, "blockIdx.x");
    st.bind(ki, "threadIdx.x");
    block_[i] = bx;
  }

  void rows(int i, const StagePlan& p) {
    te::Stage& st = s_[dag_.stages[i].tensor];
    size_t n = dag_.stages[i].spatial.size();
    std::vector<IterVar> leaves = st.leaf_iter_vars();
    IterVar row = fuse_all(st, std::vector<IterVar>(leaves.begin(), leaves.begin() + (n - 1)));
    auto [jo, ji] = st.split(leaves[n - 1], threads_of(p));
    (void)jo;
    st.bind(row, "blockIdx.x");
    st.bind(ji, "threadIdx.x");
    block_[i] = row;
    thread_[i] = ji;
  }

  void row_reduce(int i, const StagePlan& p) {
    te::Stage& st = s_[dag_.stages[i].tensor];
    st.compute_at(s_[dag_.stages[p.consumer].tensor], block_[p.consumer]);
    IterVar k = st.leaf_iter_vars()[dag_.stages[i].spatial.size()];
    auto [ko, ki] = st.split(k, threads_of(sk_.plans[p.consumer]));
    (void)ko;
    st.bind(ki, "threadIdx.x");
  }

  // Rule 2: `outer` (the copy out of the accumulator, or the fused consumer)
  // takes the block and thread levels; `acc` is computed at the block loop,
  // its thread level bound alike, the reduce steps outermost; each shared
  // copy is made at the innermost outer reduce step by all the threads.
  void tiled(const StageInfo& info, const StagePlan& p, te::Stage& outer, te::Stage& acc, const std::vector<te::Tensor>& shared, int outer_index) {
    size_t n = info.spatial.size(), m = info.reduce.size();
    bool unroll = d_[sk_.slots[p.unroll].offset] == 1;
    std::vector<IterVar> roots = outer.leaf_iter_vars();
    std::vector<Loop> B, T, I;
    int64_t threads = 1;
    for (size_t k = 0; k < n; ++k) {
      std::vector<Loop> l = split_into(outer, roots[k], tile(p.spatial_tiles[k]), 3);
      B.push_back(l[0]);
      T.push_back(l[1]);
      I.push_back(l[2]);
      threads *= l[1].extent;
    }
    std::vector<Loop> order = B;
    order.insert(order.end(), T.begin(), T.end());
    order.insert(order.end(), I.begin(), I.end());
    reorder_loops(outer, order);
    IterVar bx = fuse_all(outer, ivs(B)), tx = fuse_all(outer, ivs(T));
    outer.bind(bx, "blockIdx.x");
    outer.bind(tx, "threadIdx.x");
    if (unroll) unroll_loops(outer, I);
    block_[outer_index] = bx;
    thread_[outer_index] = tx;

    acc.compute_at(outer, bx);
    std::vector<IterVar> aroots = acc.leaf_iter_vars();
    std::vector<Loop> AT, AI, KO, KI;
    for (size_t k = 0; k < n; ++k) {
      const int* f = tile(p.spatial_tiles[k]);
      auto [t, i] = acc.split(aroots[k], f[2]);
      AT.push_back({t, f[1]});
      AI.push_back({i, f[2]});
    }
    for (size_t k = 0; k < m; ++k) {
      std::vector<Loop> l = split_into(acc, aroots[n + k], tile(p.reduce_tiles[k]), 2);
      KO.push_back(l[0]);
      KI.push_back(l[1]);
    }
    std::vector<Loop> aorder = KO;
    for (const auto* level : {&AT, &KI, &AI}) aorder.insert(aorder.end(), level->begin(), level->end());
    reorder_loops(acc, aorder);
    acc.bind(fuse_all(acc, ivs(AT)), "threadIdx.x");
    if (unroll) unroll_loops(acc, AI);
    for (const te::Tensor& t : shared) {
      te::Stage& copy = s_[t];
      if (!KO.empty()) copy.compute_at(acc, KO.back().iv);
      else copy.compute_at(outer, bx);
      auto [co, ci] = copy.split(fuse_all(copy, copy.leaf_iter_vars()), static_cast<int>(threads));
      (void)co;
      copy.bind(ci, "threadIdx.x");
    }
  }

  static std::vector<IterVar> ivs(const std::vector<Loop>& loops) {
    std::vector<IterVar> out;
    for (const Loop& l : loops) out.push_back(l.iv);
    return out;
  }

  static void unroll_loops(te::Stage& st, const std::vector<Loop>& loops) {
    for (const Loop& l : loops)
      if (l.extent > 1) st.unroll(l.iv);
  }

  const DagInfo& dag_;
  const Sketch& sk_;
  const std::vector<int>& d_;
  te::Schedule& s_;
  std::vector<IterVar> block_, thread_;  // per output stage: its block loop and its thread loop
};

}  // namespace

void apply_gpu_sketch(const DagInfo& dag, const Sketch& sketch, const std::vector<int>& decisions, te::Schedule& s) {
  check_decisions(sketch, decisions);
  GpuApplier(dag, sketch, decisions, s).run();
}

}  // namespace kiln::ops::detail
