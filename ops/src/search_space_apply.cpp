// Replays a sketch and its decisions onto a fresh schedule. Every primitive
// goes through te::Stage / te::Schedule, so the schedule's trace is the
// candidate. Stages are scheduled consumers first: a stage computed at a
// consumer's loop needs that loop to exist already.
#include <algorithm>

#include "kiln/ir/functor.h"
#include "kiln/support/error.h"
#include "search_space_internal.h"

namespace kiln::ops::detail {

std::vector<Loop> split_into(te::Stage& st, IterVar iv, const int* f, int n, bool var) {
  std::vector<Loop> out;
  int64_t rest = 1;
  for (int l = 0; l < n; ++l) rest *= f[l];
  for (int l = 0; l + 1 < n; ++l) {
    rest /= f[l];
    auto [o, i] = st.split(iv, static_cast<int>(rest));
    out.push_back({o, f[l], var && l == 0});
    iv = i;
  }
  out.push_back({iv, f[n - 1], var && n == 1});
  return out;
}

void reorder_loops(te::Stage& st, const std::vector<Loop>& order) {
  std::vector<IterVar> ivs;
  for (const Loop& l : order) ivs.push_back(l.iv);
  if (ivs.size() > 1) st.reorder(ivs);
}

Loop fuse_prefix(te::Stage& st, std::vector<Loop>* order, int count) {
  count = std::clamp(count, 1, static_cast<int>(order->size()));
  std::vector<IterVar> ivs;
  int64_t extent = 1;
  for (int k = 0; k < count; ++k) {
    ivs.push_back((*order)[k].iv);
    extent *= (*order)[k].extent;
  }
  bool var = false;
  for (int k = 0; k < count; ++k) var = var || (*order)[k].var;
  Loop fused{st.fuse(ivs), extent, var};
  order->erase(order->begin(), order->begin() + count);
  order->insert(order->begin(), fused);
  return fused;
}

namespace {

// Bytes of the tensors a tiled stage's body reads: {those it reads along its
// innermost axis (a conv's weights), the others (its input)}; 0 for a
// tensor of a shape that is not constant.
std::pair<int64_t, int64_t> operand_bytes(const StageInfo& st) {
  std::pair<int64_t, int64_t> bytes{0, 0};
  if (!st.op || st.op->axis.empty() || !st.body.defined()) return bytes;
  const Variable* inner = st.op->axis.back()->var.get();
  std::vector<const ProducerNode*> seen;
  post_order_visit(st.body, [&](const Expr& e) {
    const TensorLoad* t = e.as<TensorLoad>();
    if (!t || std::find(seen.begin(), seen.end(), t->producer.get()) != seen.end()) return;
    seen.push_back(t->producer.get());
    int64_t b = t->producer->producer_dtype().bytes();
    for (const Expr& d : t->producer->producer_shape()) {
      const int64_t* v = as_const_int(d);
      if (!v) return;
      b *= *v;
    }
    bool along_inner = false;
    for (const Expr& i : t->indices)
      post_order_visit(i, [&](const Expr& x) { along_inner = along_inner || x.as<Variable>() == inner; });
    (along_inner ? bytes.first : bytes.second) += b;
  });
  return bytes;
}

// A convolution (several reduce axes) whose input is larger than its weights
// and its output (a ResNet's 1 x 1 reductions of its first stages: 3.2 MB of
// 56 x 56 x 256 input, 64 KiB of weights, 0.8 MB out) runs the pixels
// outermost at S0 and its output-channel blocks inside them: consecutive
// iterations of the parallel loop then reuse one tile of input from L1
// for every block, instead of each block reading the whole input again
// from L3; the weights, the smaller operand, are what comes back from L2.
// Measured on Zen 5 (AVX-512, 2 threads, ResNet-50 in one process, against
// the blocks outermost): 256 -> 64 at 56 x 56 0.68-0.72x the time, 256 ->
// 128 0.69x, 512 -> 128 at 28 x 28 0.79-0.84x, 512 -> 256 0.84x; the whole
// model 24.98 against 24.37 ms, MobileNet-V2 3.93 against 3.45, ResNet-18
// 10.79 against 10.58; the znver3 target's code on the same host 49.9
// against 49.1. Where the output is the larger (an expansion of 16
// channels to 64 at 112 x 112) pixels outside ran 1.5-2.1x slower: the
// kernel is bound by its stores, and those then alternate between planes.
// (The blocks inside the pixels at S1 instead, a decision the search has,
// let LLVM hoist a tile's broadcasts out of the block loop and spill them.)
bool rows_outside_weights(const StageInfo& st) {
  if (st.reduce.size() < 2 || st.spatial.size() < 2) return false;
  auto [weights, input] = operand_bytes(st);
  int64_t output = st.tensor.dtype().bytes();
  for (int64_t e : st.spatial) output *= e;
  return weights > 0 && weights < input && output < input;
}

// Rows of a transposed read a Simple stage's loops tile (see simple()):
// sixteen 64-byte lines of the input, reused across the tile.
constexpr int64_t kTransposeTile = 16;

// Row tiles of a transposed A that its pack copies per run of one of A's rows (pack_transposed_a).
constexpr int64_t kTransposedPackTiles = 16;

// The output axis whose variable is the last index of a load that also
// uses the innermost output axis elsewhere (a transpose's input, read
// across its rows by the vectors), or -1.
int transposed_read_axis(const StageInfo& info) {
  size_t n = info.spatial.size();
  if (!info.op || n < 2) return -1;
  const Variable* inner = info.op->axis[n - 1].var().get();
  int found = -1;
  post_order_visit(info.body, [&](const Expr& e) {
    const TensorLoad* t = e.as<TensorLoad>();
    if (!t || t->indices.size() < 2 || found >= 0) return;
    const Variable* last = t->indices.back().as<Variable>();
    if (!last || last == inner) return;
    bool reads_inner = false;
    for (const Expr& i : t->indices) reads_inner = reads_inner || uses_var(i, [&](const Variable* v) { return v == inner; });
    for (size_t k = 0; k + 1 < n && reads_inner; ++k)
      if (info.op->axis[k].var().get() == last) found = static_cast<int>(k);
  });
  return found;
}

}  // namespace

size_t panel_position(const StageInfo& info, size_t n) {
  std::vector<bool> indexes = indexes_vector_operand(info);
  size_t first_row = 0;
  for (size_t k = 0; k + 1 < n; ++k)
    if (k < indexes.size() && indexes[k]) first_row = k + 1;
  return first_row == n - 1 ? n - 2 : first_row;  // every axis indexes B: the plain swap
}

namespace {

class Applier {
 public:
  Applier(const DagInfo& dag, const Sketch& sk, const std::vector<int>& d, te::Schedule& s)
      : dag_(dag), sk_(sk), d_(d), s_(s), attached_at_(dag.stages.size(), -1), outer_loop_(dag.stages.size()) {}

  void run() {
    for (size_t i = 0; i < sk_.plans.size(); ++i)
      if (sk_.plans[i].kind == PlanKind::Inline && !stored_per_row(sk_.plans[i])) s_[dag_.stages[i].tensor].compute_inline();
    for (size_t i = sk_.plans.size(); i-- > 0;) {
      const StagePlan& p = sk_.plans[i];
      switch (p.kind) {
        case PlanKind::Simple: simple(static_cast<int>(i), p); break;
        case PlanKind::Tiled:
          pack_operand(static_cast<int>(i), p);
          tiled(static_cast<int>(i), p);
          break;
        case PlanKind::TiledCache: {
          // Packed first, so that the accumulator reads the packed copy;
          // cache_write must be the first primitive on the stage.
          pack_operand(static_cast<int>(i), p);
          te::Tensor t = dag_.stages[i].tensor;
          te::Tensor local = s_.cache_write(t, "local");
          outer_inner(s_[t], s_[local], dag_.stages[i], p);
          break;
        }
        case PlanKind::TiledFused:
          pack_operand(static_cast<int>(i), p);
          outer_inner(s_[dag_.stages[p.consumer].tensor], s_[dag_.stages[i].tensor], dag_.stages[i], p, consumer_row_axes(dag_, static_cast<int>(i), p.consumer));
          break;
        case PlanKind::Rfactor: rfactor(static_cast<int>(i), p); break;
        case PlanKind::Inline:
          if (stored_per_row(p)) apply_row_stage(dag_.stages[i], sk_, p, d_, s_, s_[dag_.stages[p.consumer].tensor], outer_loop_[p.consumer]);
          break;
        case PlanKind::RowReduce: apply_row_reduce(dag_.stages[i], sk_, p, d_, s_, s_[dag_.stages[p.consumer].tensor], outer_loop_[p.consumer]); break;
        default: break;
      }
    }
  }

 private:
  const int* tile(int slot) const { return &d_[sk_.slots[slot].offset]; }
  int choice(int slot) const { return slot < 0 ? 0 : d_[sk_.slots[slot].offset]; }
  bool stored_per_row(const StagePlan& p) const { return p.kind == PlanKind::Inline && p.location >= 0 && choice(p.location) == 1; }
  int unroll_step(const StagePlan& p) const { return kUnrollSteps[choice(p.unroll)]; }
  static int64_t product(const int* f, int n) {
    int64_t x = 1;
    for (int i = 0; i < n; ++i) x *= f[i];
    return x;
  }
  static bool vectorizable(int64_t extent) { return extent >= 2 && extent <= kMaxVectorExtent; }

  // Unrolls the innermost loops of `loops` (from position `first` on, skipping
  // the vectorized one) while the product of their extents stays within the
  // step. The auto_unroll pragma alone would not reach them: the unroller
  // leaves nests holding a vectorized loop alone.
  static void unroll_inner(te::Stage& st, const std::vector<Loop>& loops, size_t first, int step, const IterVar& vectorized) {
    if (step <= 0) return;
    int64_t steps = 1;
    for (size_t k = loops.size(); k-- > first;) {
      const Loop& l = loops[k];
      if (vectorized.defined() && l.iv.same_as(vectorized)) continue;
      if (l.var) break;  // a symbolic extent: neither it nor the loops around it unroll
      if (l.extent <= 1) continue;
      steps *= l.extent;
      if (steps > step) break;
      st.unroll(l.iv);
    }
  }

  static void annotate_unroll(te::Stage& st, const std::vector<Loop>& loops, size_t first, int step, const IterVar& vectorized) {
    if (step <= 0 || loops.empty()) return;
    st.pragma(loops[0].iv, "auto_unroll_max_step", step);
    unroll_inner(st, loops, first, step, vectorized);
  }

  void simple(int i, const StagePlan& p) {
    if (p.rows) {
      outer_loop_[i] = apply_row_output(dag_.stages[i], sk_, p, d_, s_);
      return;
    }
    te::Stage& st = s_[dag_.stages[i].tensor];
    const StageInfo& info = dag_.stages[i];
    size_t n = info.spatial.size();
    std::vector<IterVar> roots = st.leaf_iter_vars();
    if (n == 0) {
      std::vector<Loop> loops;
      for (size_t k = 0; k < roots.size(); ++k) loops.push_back({roots[k], info.reduce[k], info.reduce_var[k]});
      annotate_unroll(st, loops, 0, unroll_step(p), IterVar());
      if (!roots.empty()) outer_loop_[i] = st.leaf_iter_vars()[0];
      return;
    }
    std::vector<Loop> lead;
    // A transposed read (contiguous along output axis `across`, not the
    // vector axis): a tile of `across` goes inside the vector loop's outer
    // part, so the lines the vectors gather from stay in L1 across it.
    int across = info.reduction ? -1 : transposed_read_axis(info);
    Loop across_inner;
    // The inner parts of the axes (StageInfo::inner_parts) go inside the others, unrolled.
    std::vector<Loop> tables;
    for (size_t k = 0; k + 1 < n; ++k) {
      const int64_t part = static_cast<int>(k) == across ? 1 : info.inner_part(k);
      if (part > 1 && part == info.spatial[k]) {
        tables.push_back({roots[k], part});
        continue;
      }
      if (part > 1) {
        const int factors[2] = {static_cast<int>(info.spatial[k] / part), static_cast<int>(part)};
        std::vector<Loop> split = split_into(st, roots[k], factors, 2);
        lead.push_back(split[0]);
        tables.push_back(split[1]);
        continue;
      }
      int64_t f = static_cast<int>(k) == across && !info.spatial_var[k] ? divisor_at_most(info.spatial[k], kTransposeTile) : 1;
      if (f == 1) {
        lead.push_back({roots[k], info.spatial[k], info.spatial_var[k]});
        continue;
      }
      const int factors[2] = {static_cast<int>(info.spatial[k] / f), static_cast<int>(f)};
      std::vector<Loop> split = split_into(st, roots[k], factors, 2);
      lead.push_back(split[0]);
      across_inner = split[1];
    }
    std::vector<Loop> parts = split_into(st, roots[n - 1], tile(p.vector_tile), 2, info.spatial_var[n - 1]);
    lead.push_back(parts[0]);
    Loop inner = parts[1];
    std::vector<Loop> order = lead;
    if (across_inner.iv.defined()) order.push_back(across_inner);
    order.insert(order.end(), tables.begin(), tables.end());
    for (size_t k = 0; k < info.reduce.size(); ++k) order.push_back({roots[n + k], info.reduce[k], info.reduce_var[k]});
    order.push_back(inner);
    // A reduction keeps the vector loop innermost, inside its reduce loops.
    if (info.reduction || across_inner.iv.defined() || !tables.empty()) reorder_loops(st, order);
    for (const Loop& t : tables) st.unroll(t.iv);
    size_t first = 1;
    if (p.consumer >= 0 && choice(p.location) == 1 && outer_loop_[p.consumer].defined() && readers_attached_at(i, p.consumer)) {
      st.compute_at(s_[dag_.stages[p.consumer].tensor], outer_loop_[p.consumer]);
      attached_at_[i] = p.consumer;
      first = 0;
    } else {
      int depth = std::min<int>(choice(p.parallel) + 1, static_cast<int>(lead.size()));
      // The vector axis's outer loop over a symbolic extent has a remainder
      // (a guard on its last tile): fused with the loops before it, the guard
      // could not be peeled off.
      if (info.spatial_var[n - 1] && tile(p.vector_tile)[1] > 1 && depth == static_cast<int>(lead.size()) && depth > 1) --depth;
      Loop fused = fuse_prefix(st, &order, depth);
      st.parallel(fused.iv);
    }
    IterVar vec;
    if (vectorizable(inner.extent)) {
      st.vectorize(inner.iv);
      vec = inner.iv;
    }
    annotate_unroll(st, order, first, unroll_step(p), vec);
    outer_loop_[i] = st.leaf_iter_vars()[0];
  }

  // The pack rule: the operand is copied into panels as wide as the packed
  // axis's innermost tile factor, so each vector of the register tile reads
  // one contiguous row of a panel. The copy is parallel over panels and
  // vectorized along a panel row.
  void pack_operand(int i, const StagePlan& p) {
    if (p.pack < 0) return;
    const StageInfo& info = dag_.stages[i];
    int width = tile(p.spatial_tiles.back())[3];
    te::Tensor packed = s_.pack(dag_.stages[p.pack].tensor, {info.tensor}, info.pack_dim, width);
    te::Stage& st = s_[packed];
    std::vector<IterVar> axes = st.leaf_iter_vars();  // [panels, the other dimensions..., width]
    st.parallel(axes.front());
    if (vectorizable(width)) st.vectorize(axes.back());
    pack_transposed_a(info, p);
  }

  // With B, a transposed A (StageInfo::pack_a_operand) is packed by the row
  // tile: each reduce step's broadcasts then read one contiguous run. Not
  // where the row tile does not divide A's rows (a padded row tile).
  void pack_transposed_a(const StageInfo& info, const StagePlan& p) {
    if (info.pack_a_operand < 0 || info.pack_a_axis >= static_cast<int>(p.spatial_tiles.size())) return;
    int rows = tile(p.spatial_tiles[static_cast<size_t>(info.pack_a_axis)])[3];
    const te::Tensor& a = dag_.stages[info.pack_a_operand].tensor;
    const int64_t* extent = as_const_int(a.shape()[info.pack_a_dim]);
    if (rows < 2 || !extent || *extent % rows != 0) return;
    te::Tensor packed = s_.pack(a, {info.tensor}, info.pack_a_dim, rows);
    te::Stage& st = s_[packed];
    std::vector<IterVar> axes = st.leaf_iter_vars();  // [row tiles, the other dimensions..., rows]
    // A transposed A is contiguous along the packed rows: blocks of row tiles
    // outside its other dimensions, so each of its rows is read as one run
    // of 16 tiles (the copy goes through A in order, writing 16 panels).
    // Tile by tile, the copy walked K rows 12 KB apart for 6 floats each:
    // BERT's weight gradients (A = dY [1024, 3072]) ran at 51-55 GFLOP/s on
    // one AVX2 core against 96-99 for the same GEMM with A given untransposed.
    const int64_t* tiles = as_const_int(packed.shape()[0]);
    if (info.pack_a_dim + 1 == a.ndim() && axes.size() > 2 && tiles) {
      auto [outer, inner] = st.split(axes.front(), static_cast<int>(divisor_at_most(*tiles, kTransposedPackTiles)));
      std::vector<IterVar> order = {outer};
      order.insert(order.end(), axes.begin() + 1, axes.end() - 1);
      order.push_back(inner);
      order.push_back(axes.back());
      st.reorder(order);
      st.parallel(outer);
      return;
    }
    st.parallel(axes.front());
  }

  // Panel-outer: the innermost axis's loop goes before the axes of rows
  // within one tile level (those after the last axis that indexes B), so a
  // panel of B stays in cache while the rows of A stream past it (as in the
  // hand GEMM). A batch axis B shares (A[b, i, k] x B[k, j], as an ONNX
  // MatMul of a sequence gives) is rows too: with the panel inside it, each
  // panel of a 7 MB B was streamed from L3 once per row block (QKV of a
  // BERT layer: 108 against 155 GFLOP/s of the other projections).
  void order_level(std::vector<Loop>* level, const StagePlan& p, const StageInfo& info) const {
    size_t n = level->size();
    if (n < 2 || choice(p.panel_order) != 1) return;
    size_t first_row = panel_position(info, n);
    std::rotate(level->begin() + static_cast<std::ptrdiff_t>(first_row), level->end() - 1, level->end());
  }

  // S0 with the row axes outside the weight axes (rows_outside_weights).
  void order_s0(std::vector<Loop>* level, const StagePlan& p, const StageInfo& info) const {
    order_level(level, p, info);
    if (!rows_outside_weights(info)) return;
    std::vector<bool> indexes = indexes_vector_operand(info);
    std::vector<Loop> rows, weights;
    for (size_t k = 0; k + 1 < level->size(); ++k) (k < indexes.size() && indexes[k] ? weights : rows).push_back((*level)[k]);
    rows.insert(rows.end(), weights.begin(), weights.end());
    rows.push_back(level->back());
    *level = std::move(rows);
  }

  // Fuses the first `count` loops of `order` into the parallel one, except
  // leading loops over a symbolic extent (a batch of images, whole in S0):
  // they stay outside, serial, for inside a fused loop of symbolic extent
  // the attached accumulator's bounds would be divisions by the shape
  // variable, which bound inference cannot pin to one iteration (it would
  // size the accumulator by the batch). Returns the parallel loop's position.
  // Symbolic loops among the `count` go first, so that they too stay
  // outside: fused after a constant loop (j.outer of 96 tiles, then the
  // batch), the constant loop's index would be the fused one divided by the
  // shape variable, and its tile's extent a min/max bound inference cannot
  // pin to the full tile: the tile's vector loop would become a loop of
  // run-time length. *moved says whether the order changed.
  static size_t fuse_parallel(te::Stage& st, std::vector<Loop>* order, int count, bool* moved = nullptr) {
    int c = std::clamp(count, 0, static_cast<int>(order->size()));
    std::vector<Loop> before(order->begin(), order->begin() + c);
    std::stable_partition(order->begin(), order->begin() + c, [](const Loop& l) { return l.var; });
    bool changed = false;
    for (int k = 0; k < c; ++k) changed = changed || (*order)[k].iv.get() != before[k].iv.get();
    if (changed) reorder_loops(st, *order);
    if (moved) *moved = changed;
    size_t lead = 0;
    while (static_cast<int>(lead) + 1 < count && lead + 1 < order->size() && (*order)[lead].var) ++lead;
    if (lead == 0) {
      fuse_prefix(st, order, count);
      return 0;
    }
    // After lowering they fold into the parallel loop (pass::fold_into_parallel): one launch, not one per image.
    for (size_t k = 0; k < lead; ++k) st.pragma((*order)[k].iv, "fold_into_parallel", 1);
    std::vector<Loop> rest(order->begin() + static_cast<std::ptrdiff_t>(lead), order->end());
    fuse_prefix(st, &rest, count - static_cast<int>(lead));
    order->resize(lead);
    order->insert(order->end(), rest.begin(), rest.end());
    return lead;
  }

  // A stage may go inside output o's loop only if all its readers run there.
  bool readers_attached_at(int i, int o) const {
    for (int r : dag_.stages[i].readers)
      if (r != o && attached_at_[r] != o) return false;
    return true;
  }

  // Splits the stage's spatial axes into the tile levels [first, 4) and its
  // reduce axes into R0 R1; S[level][axis], R[level][axis].
  void split_levels(te::Stage& st, const StageInfo& info, const StagePlan& p, int first, std::vector<std::vector<Loop>>* S, std::vector<std::vector<Loop>>* R) const {
    size_t n = info.spatial.size(), m = info.reduce.size();
    std::vector<IterVar> roots = st.leaf_iter_vars();
    S->assign(4, {});
    R->assign(2, {});
    for (size_t k = 0; k < n; ++k) {
      // At a consumer's tile (first > 0), the stage's extents are that tile's, not symbolic.
      std::vector<Loop> l = split_into(st, roots[k], tile(p.spatial_tiles[k]) + first, 4 - first, first == 0 && info.spatial_var[k]);
      for (int v = first; v < 4; ++v) (*S)[v].push_back(l[v - first]);
    }
    for (size_t k = 0; k < m; ++k) {
      std::vector<Loop> l = split_into(st, roots[n + k], tile(p.reduce_tiles[k]), 2, info.reduce_var[k]);
      for (int v = 0; v < 2; ++v) (*R)[v].push_back(l[v]);
    }
  }

  // The register tile: vectorize the innermost S3 loop, unroll within the
  // last `tail` loops (S2 R1 S3), the pragma on the outermost loop.
  void annotate_tile(te::Stage& st, const std::vector<Loop>& order, const Loop& innermost, size_t tail, const StagePlan& p) const {
    IterVar vec;
    if (vectorizable(innermost.extent)) {
      st.vectorize(innermost.iv);
      vec = innermost.iv;
    }
    annotate_unroll(st, order, order.size() - tail, unroll_step(p), vec);
  }

  void tiled(int i, const StagePlan& p) {
    const StageInfo& info = dag_.stages[i];
    te::Stage& st = s_[info.tensor];
    std::vector<std::vector<Loop>> S, R;
    split_levels(st, info, p, 0, &S, &R);
    order_s0(&S[0], p, info);
    order_level(&S[1], p, info);
    std::vector<Loop> order;
    for (const auto* level : {&S[0], &S[1], &R[0], &S[2], &R[1], &S[3]}) order.insert(order.end(), level->begin(), level->end());
    reorder_loops(st, order);
    size_t lead = fuse_parallel(st, &order, choice(p.parallel) + 1);
    st.parallel(order[lead].iv);
    annotate_tile(st, order, S[3].back(), 2 * info.spatial.size() + info.reduce.size(), p);
  }

  // Rules 2 (cache_write) and 3 (fusion) share one structure: the outer stage
  // (the copy out of the cache, or the elementwise consumer) takes the S0 S1
  // levels and is parallel; the inner stage (the accumulator) is computed at
  // its S1 (or S0) loop and takes the remaining levels with R0 R1.
  void outer_inner(te::Stage& outer, te::Stage& inner, const StageInfo& info, const StagePlan& p, int rows = 1) {
    bool at_s0 = choice(p.location) == 1;
    IterVar attach = tile_outer(outer, info, p, at_s0, rows);
    inner.compute_at(outer, attach);
    std::vector<std::vector<Loop>> S, R;
    split_levels(inner, info, p, at_s0 ? 1 : 2, &S, &R);
    order_level(&S[1], p, info);
    std::vector<Loop> order;
    for (const auto* level : {&S[1], &R[0], &S[2], &R[1], &S[3]}) order.insert(order.end(), level->begin(), level->end());
    reorder_loops(inner, order);
    annotate_tile(inner, order, S[3].back(), 2 * info.spatial.size() + info.reduce.size(), p);
  }

  // The outer stage of outer_inner: S0 S1 and the inner tile (S2*S3 per
  // axis, vectorized). Returns the loop the inner stage is computed at.
  IterVar tile_outer(te::Stage& outer, const StageInfo& info, const StagePlan& p, bool at_s0, int rows = 1) const {
    int n = static_cast<int>(info.spatial.size());
    std::vector<IterVar> roots = outer.leaf_iter_vars();
    if (rows > 1) {
      // The consumer's leading axes are the stage's one row axis (fusible_consumer): fused into it.
      std::vector<IterVar> lead(roots.begin(), roots.begin() + rows);
      outer.fuse(lead);
      roots = outer.leaf_iter_vars();
    }
    std::vector<Loop> O0, O1, IN;
    for (int k = 0; k < n; ++k) {
      const int* f = tile(p.spatial_tiles[k]);
      int levels[3] = {f[0], f[1], f[2] * f[3]};
      std::vector<Loop> l = split_into(outer, roots[k], levels, 3, info.spatial_var[k]);
      O0.push_back(l[0]);
      O1.push_back(l[1]);
      IN.push_back(l[2]);
    }
    order_s0(&O0, p, info);
    order_level(&O1, p, info);
    std::vector<Loop> order = O0;
    order.insert(order.end(), O1.begin(), O1.end());
    order.insert(order.end(), IN.begin(), IN.end());
    reorder_loops(outer, order);
    int depth = std::clamp(choice(p.parallel) + 1, 1, 2 * n);
    bool moved = false;
    int lead = static_cast<int>(fuse_parallel(outer, &order, depth, &moved));
    outer.parallel(order[lead].iv);
    // The attach loop: the last S0 (or S1) loop, or the fused loop holding it
    // (also where symbolic loops moved out of the fused ones: it is inside them all).
    int attach = at_s0 ? n - 1 : 2 * n - 1;
    size_t attach_pos = static_cast<size_t>(attach < lead && !moved ? attach : attach < depth ? lead : attach - depth + lead + 1);
    IterVar attach_iv = order[attach_pos].iv;
    // Vectorize the copy-out: the last inner loop, or its split by f3.
    int f3 = tile(p.spatial_tiles[n - 1])[3];
    IterVar vec;
    if (vectorizable(IN.back().extent)) {
      vec = IN.back().iv;
    } else if (vectorizable(f3)) {
      auto [o, v] = outer.split(IN.back().iv, f3);
      order.back() = {o, IN.back().extent / f3};
      order.push_back({v, f3});
      vec = v;
    }
    if (vec.defined()) outer.vectorize(vec);
    unroll_inner(outer, order, attach_pos + 1, unroll_step(p), vec);
    return attach_iv;
  }

  // Rule 4: the fused reduce axis splits into (outer reduce, parallel part,
  // vector part); the inner two become the data-parallel axis of C.rf.
  void rfactor(int i, const StagePlan& p) {
    const StageInfo& info = dag_.stages[i];
    te::Stage& st = s_[info.tensor];
    size_t n = info.spatial.size();
    std::vector<IterVar> roots = st.leaf_iter_vars();
    std::vector<IterVar> reduce(roots.begin() + n, roots.end());
    IterVar k = st.fuse(reduce);
    const int* f = tile(p.rfactor_tile);
    auto [ko, ki] = st.split(k, f[1] * f[2]);
    (void)ko;
    te::Tensor rf_t = s_.rfactor(info.tensor, ki, 0);
    te::Stage& rf = s_[rf_t];
    std::vector<IterVar> leaves = rf.leaf_iter_vars();  // [ki, spatial..., ko]
    auto [kio, kii] = rf.split(leaves[0], f[2]);
    bool reduce_var = false;
    for (bool v : info.reduce_var) reduce_var = reduce_var || v;
    std::vector<Loop> order{{kio, f[1]}};
    for (size_t d = 0; d < n; ++d) order.push_back({leaves[1 + d], info.spatial[d], info.spatial_var[d]});
    order.push_back({leaves.back(), f[0], reduce_var});
    order.push_back({kii, f[2]});
    reorder_loops(rf, order);
    fuse_prefix(rf, &order, std::min<int>(choice(p.parallel) + 1, static_cast<int>(n) + 1));
    rf.parallel(order[0].iv);
    IterVar vec;
    if (vectorizable(f[2])) {
      rf.vectorize(kii);
      vec = kii;
    }
    annotate_unroll(rf, order, order.size() - 1, unroll_step(p), vec);
  }

  const DagInfo& dag_;
  const Sketch& sk_;
  const std::vector<int>& d_;
  te::Schedule& s_;
  std::vector<int> attached_at_;
  std::vector<IterVar> outer_loop_;
};

}  // namespace

void apply_sketch(const DagInfo& dag, const Sketch& sketch, const std::vector<int>& decisions, te::Schedule& s) {
  check_decisions(sketch, decisions);
  Applier(dag, sketch, decisions, s).run();
}

}  // namespace kiln::ops::detail
