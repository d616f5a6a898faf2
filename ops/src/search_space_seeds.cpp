// Seeds: for each multi-level-tiled sketch, a few complete candidates whose
// decisions follow from the target the way the hand schedules' tiles do
// (ops/src/cpu_gemm.cpp, cpu_conv2d.cpp): a register tile of one or two
// vectors of the innermost axis (a matmul's four on AVX-512) times as many rows as fit the vector
// registers, the innermost reduce axis unrolled by up to one vector's
// lanes, every outer tile level in S0, all S0 loops fused into the parallel
// loop (panel-outer), and the accumulator at S0. They are ordinary points of the sketch
// (the search measures them first and evolves from them), so a search
// starts from the structure an expert would write for the target instead of
// waiting for random sampling to find a tile that does not spill.
#include <algorithm>

#include "kiln/ir/functor.h"
#include "kiln/ops/broadcast.h"
#include "kiln/ops/streamed_weights.h"
#include "kiln/ops/tile_padding.h"
#include "search_space_internal.h"

namespace kiln::ops::detail {

namespace {

// A tile of `levels` factors with `inner` innermost, the rest in the outermost level.
void put_tile(const Slot& slot, int64_t inner, std::vector<int>* d) {
  int* v = d->data() + slot.offset;
  std::fill(v, v + slot.size, 1);
  v[slot.size - 1] = static_cast<int>(inner);
  v[0] *= static_cast<int>(slot.extent / inner);
}

// The smallest unroll step that covers `steps` unrolled iterations (the last when none does).
int unroll_choice(int64_t steps) {
  for (int k = 1; k < kNumUnrollSteps; ++k)
    if (kUnrollSteps[k] >= steps) return k;
  return kNumUnrollSteps - 1;
}

// The innermost axis's register-tile width: `vectors` vectors when that
// divides the extent (and the sketch allows it), else 0.
int64_t tile_width(const Slot& slot, int lanes, int vectors) {
  int64_t w = int64_t(lanes) * vectors;
  if (slot.extent % w != 0 || w > kMaxVectorExtent) return 0;
  const std::vector<int>& a = slot.inner_allowed;
  if (!a.empty() && std::find(a.begin(), a.end(), w) == a.end()) return 0;
  return w;
}

}  // namespace

// Per spatial axis of a tiled stage: whether it indexes an operand that the
// stage reads along its innermost axis (B of a matmul, the weights of a
// conv). Register-tile rows along such an axis each need a vector load of
// their own; rows along the others share one (so rows go there first).
std::vector<bool> indexes_vector_operand(const StageInfo& st) {
  std::vector<bool> marked(st.spatial.size(), false);
  if (!st.op || st.op->axis.empty()) return marked;
  const Variable* inner = st.op->axis.back()->var.get();
  post_order_visit(st.body, [&](const Expr& e) {
    const TensorLoad* t = e.as<TensorLoad>();
    if (!t) return;
    std::vector<const Variable*> vars;
    for (const Expr& i : t->indices)
      post_order_visit(i, [&](const Expr& x) {
        if (const Variable* v = x.as<Variable>()) vars.push_back(v);
      });
    if (std::find(vars.begin(), vars.end(), inner) == vars.end()) return;
    for (size_t k = 0; k + 1 < st.op->axis.size() && k < marked.size(); ++k)
      if (std::find(vars.begin(), vars.end(), st.op->axis[k]->var.get()) != vars.end()) marked[k] = true;
  });
  return marked;
}

namespace {

// Rows a matmul's register tile takes at most (a stage with one reduce
// axis: matmul, batch matmul, and their transposed forms). On Zen 5
// (AVX-512, two vectors wide, B packed, cold inputs) matmuls ran at 270 to
// 280 GFLOP/s with 8 rows and 160 to 200 with 12 (what fits the
// registers), but 240 to 390 with 6, for K of 128 to 2048 and A read by
// rows or transposed. On AVX2, 6 rows are what fits two vectors anyway.
// Convolutions (several reduce axes) keep the rows that fit; their
// defaults were measured on whole models. Where no divisor of the rows'
// extent is 6, the nearest one that fits the registers, the larger on a
// tie: BERT's 128-row projections took 4 rows (the largest divisor up to 6)
// and ran at 162 GFLOP/s on one core where 8 rows run at 199-200 (1.22x; 2
// cores 1.29-1.32x: 283-296 against 364-383), Zen 5.
constexpr int64_t kMaxMatmulRows = 6;

// Output pixels of an image under which a blocked conv's tile takes images first (seed_plan).
constexpr int64_t kSmallImagePixels = 16;

// The S0 loops the default runs parallel, minus one: all of them, or where
// a tile splits its axis with a remainder (tile_extent), those before the
// first such axis in the S0 order (at least one). Fused with the others,
// the remainder axis's index is a modulo of the parallel one and its last
// tile cannot be peeled off; unfused, loop_partition peels it.
// A symbolic axis split by more than 1 always has a remainder.
int parallel_choice(const StageInfo& st, const Sketch& sk, const StagePlan& p, const std::vector<int>& d) {
  size_t n = p.spatial_tiles.size();
  std::vector<size_t> order(n);
  for (size_t k = 0; k < n; ++k) order[k] = k;
  if (n >= 2 && p.panel_order >= 0) std::rotate(order.begin() + static_cast<std::ptrdiff_t>(panel_position(st, n)), order.end() - 1, order.end());
  for (size_t pos = 0; pos < n; ++pos) {
    const Slot& s = sk.slots[p.spatial_tiles[order[pos]]];
    bool remainder = s.extent != st.spatial[order[pos]];
    if (st.spatial_var[order[pos]]) remainder = d[s.offset] != s.extent;  // split below S0
    if (remainder) return static_cast<int>(std::max<size_t>(pos, 1)) - 1;
  }
  return static_cast<int>(n) - 1;
}

// The divisor of `extent` nearest to `want` among those up to `limit`, the larger on a tie.
int64_t divisor_near(int64_t extent, int64_t want, int64_t limit) {
  int64_t best = 1;
  for (int64_t d : divisors(extent)) {
    if (d > limit) break;
    if (std::abs(d - want) <= std::abs(best - want)) best = d;
  }
  return best;
}

// Whether a tiled stage reduces packed dot products (bfloat16 pairs, int8 quads).
bool has_pair_dot(const DagInfo& dag) {
  bool found = false;
  for (const StageInfo& st : dag.stages)
    if (st.reduction && st.body.defined())
      post_order_visit(st.body, [&](const Expr& e) {
        const Call* c = e.as<Call>();
        found = found || (c && (c->op == Intrinsic::DotBF16x2 || c->op == Intrinsic::DotI8x4));
      });
  return found;
}

// Rows a four-vector matmul tile pays from: Swin-T's 7 x 7 stage (49 rows,
// N 768 to 3072) ran at half the GFLOP/s of the two-vector tile (81 vs 155),
// BERT's 128 and ViT's 197 rows 0.85-0.91x the time (see seed_decisions).
constexpr int64_t kWideMatmulRows = 128;

// Whether every tiled stage reduces over one axis (matmul, batch matmul) and
// has rows enough for a tile four vectors wide (symbolic rows count as
// enough: their variants share one packing of the weights). A convolution's
// four-vector tiles were not measured.
bool wide_matmul(const DagInfo& dag) {
  bool any = false;
  for (const StageInfo& st : dag.stages)
    if (st.reduction && !st.inlined) {
      if (st.reduce.size() != 1) return false;
      int64_t rows = 1;
      bool symbolic = false;
      for (size_t k = 0; k + 1 < st.spatial.size(); ++k) {
        rows *= st.spatial[k];
        symbolic = symbolic || st.spatial_var[k];
      }
      if (!symbolic && rows < kWideMatmulRows) return false;
      any = true;
    }
  return any;
}

// One seed of plan p with a register tile `width` wide and about `reduce`
// reduce steps unrolled around it (R1, innermost axes first); false when the
// plan is not tiled.
bool seed_plan(const DagInfo& dag, const StageInfo& st, const Sketch& sk, const StagePlan& p, int64_t width, int64_t reduce, bool folded,
               std::vector<int>* d) {
  if (p.spatial_tiles.empty()) return false;
  std::vector<bool> shares_no_vector = indexes_vector_operand(st);
  for (size_t k = 0; k < shares_no_vector.size(); ++k) shares_no_vector[k] = !shares_no_vector[k];
  size_t n = p.spatial_tiles.size();
  const Slot& last = sk.slots[p.spatial_tiles[n - 1]];
  put_tile(last, width, d);
  int vectors = static_cast<int>((width + dag.lanes - 1) / dag.lanes);
  // One register spare beside the tile, as the hand schedules keep it
  // (LLVM loads the next step's vector early); or, `folded`, the vector
  // operand read by the FMAs from memory and every other register a row.
  int64_t fit_left = folded ? max_rows_loads_folded(dag, vectors) : max_tile_rows(dag.registers - 1, vectors), rows = 1;
  // A depthwise conv (a reduction over its window alone) loads a fresh input
  // for every FMA, so a wider tile saves only the weight loads (1 in rows+1
  // of them). Its accumulators take at most half the registers: the rest
  // hold the border's masked loads (which fold into no FMA) and an
  // epilogue's temporaries. At 14 x 2 vectors (AVX-512) MobileNetV2's and
  // EfficientNet-B0's 14 x 14 layers spilled, the SiLU ones most.
  if (st.reduce.size() == 2) fit_left = std::min<int64_t>(fit_left, std::max(1, dag.registers / 2 / vectors));
  const bool matmul = st.reduce.size() == 1;
  int64_t rows_left = matmul ? std::min(fit_left, kMaxMatmulRows) : fit_left;
  // Rows first along the axes that share the vector operand's loads, then the others.
  // Innermost axes first (a conv's columns, its rows, then images); but a
  // blocked conv over small images takes images first: tiles of one image's
  // few pixels each pass over an output-channel block's weights (590 KB for
  // 512 -> 512 3x3), then the next block, so the weights stream from L3 once
  // per image. ResNet-18's 512 -> 512 3x3 at 4 x 4 (112 x 112 inputs; 1 core,
  // CPU time, Xeon AVX-512) ran at 169 GFLOP/s with 8 images a tile, 119 with
  // 2 x 4 pixels of one; at 7 x 7 the columns' 7 rows keep the lead (188 against 173).
  const bool images_first = st.reduce.size() == 4 && n >= 4 && st.spatial[n - 3] * st.spatial[n - 2] <= kSmallImagePixels &&
                            !shares_no_vector.empty() && shares_no_vector[0] && !(!st.spatial_var.empty() && st.spatial_var[0]);
  std::vector<size_t> order;
  for (size_t k = n - 1; k-- > 0;) order.push_back(k);
  if (images_first) std::rotate(order.begin(), order.end() - 1, order.end());  // axis 0 (the images) first
  for (bool sharing : {true, false})
    for (size_t k : order) {
      if (k < shares_no_vector.size() && shares_no_vector[k] != sharing) continue;
      // A row along an axis that indexes the vector operand (a conv's
      // output-channel blocks) brings its own operand vectors, which the
      // `rows` rows sharing them keep in registers when there are several:
      // R_other * V * (rows + 1) + 1 registers, one spare. On Zen 5 a 7-wide
      // tile took two channel blocks without this (33 registers) and ran
      // ResNet's 7x7 convs, 1x1 and 3x3, in 1.2-1.3x the time of one block.
      // Checked per axis, so it also bounds a depthwise conv (no axis shares
      // the operand) once earlier non-sharing axes gave rows: MobileNetV2's
      // 7x7 depthwise convs then take one block, measured faster than two.
      if (!sharing && !folded && rows > 1)
        rows_left = std::min<int64_t>(rows_left, std::max(1, (dag.registers - 2) / (vectors * (static_cast<int>(rows) + 1))));
      const Slot& s = sk.slots[p.spatial_tiles[k]];
      int64_t r = matmul && sharing ? divisor_near(s.extent, rows_left, fit_left) : divisor_at_most(s.extent, rows_left);
      // A symbolic axis (a batch of images, the heads' rows) takes rows only
      // as the first row axis (a sequence's rows); elsewhere a remainder
      // would guard a tile of the static axes inside it, so it stays whole
      // in S0, an outer loop.
      if (k < st.spatial_var.size() && st.spatial_var[k] && rows > 1) r = 1;
      put_tile(s, r, d);
      rows *= r;
      rows_left = std::max<int64_t>(1, rows_left / r);
      fit_left = std::max<int64_t>(1, fit_left / r);
    }
  int64_t reduce_unroll = 1;
  // A convolution (several reduce axes) whose innermost reduce axis is a blocked layout's two
  // vectors of input channels unrolls half a vector of them: on AVX-512, 8 of a 32-channel block
  // ran ResNet-18's 3x3 NCHWc convs 6 to 19% faster than 16 (2x on the 14 x 14 x 256 layers,
  // where 2 x 16 fell off); on AVX2, 4 and 8 time the same. Other convolutions (a training
  // step's, reducing over all channels) keep the full vector: halving it slowed them 1.5x.
  if (st.reduce.size() > 1 && !p.reduce_tiles.empty() && sk.slots[p.reduce_tiles.back()].extent == 2 * dag.lanes)
    reduce = std::max<int64_t>(reduce / 2, 1);
  for (size_t k = p.reduce_tiles.size(); k-- > 0;) {
    const Slot& s = sk.slots[p.reduce_tiles[k]];
    int64_t r = divisor_at_most(s.extent, std::max<int64_t>(1, reduce / reduce_unroll));
    // A blocked conv2d (reduce axes: channel blocks, kernel rows and columns, the
    // channels of a block) unrolls the channels of its block only, not the
    // kernel columns around a narrow block: unrolled, the columns' taps reread
    // the inputs of the tile's neighbouring pixels, which LLVM then keeps in
    // registers beside the tile. The 3-channel 3x3 stride-2 stems spilled 175
    // times per tile (AVX-512); rolled, 17, and ran 1.4x (3 -> 24) to 1.9x
    // (3 -> 32) faster on 2 cores (Sapphire Rapids-class Xeon).
    if (st.reduce.size() == 4 && k + 1 < p.reduce_tiles.size()) r = 1;
    put_tile(s, r, d);
    reduce_unroll *= r;
  }
  auto set_choice = [&](int slot, int value) {
    if (slot >= 0) (*d)[sk.slots[slot].offset] = std::clamp(value, 0, sk.slots[slot].choices - 1);
  };
  set_choice(p.parallel, parallel_choice(st, sk, p, *d));  // every S0 loop, or those before a remainder
  set_choice(p.location, 0);                         // the accumulator at S1 (S1 is 1: the same tile as at S0, fewer loops of extent 1)
  // Panel-outer, as the hand GEMM: a panel of the packed operand stays in
  // cache while the rows of the other stream past it.
  set_choice(p.panel_order, 1);
  // A matmul unrolls at most 64 steps (its rows, not the whole reduce tile
  // as well): with a bias fused, 8 rows x 16 reduce steps unrolled ran at
  // 148 GFLOP/s on one Zen 5 core, 8 rows alone at 198; 6 rows 192 against 200.
  // A full 6 x 4-vector tile (AVX-512) unrolls up to 512 steps, its 16
  // reduce steps too: ViT's projections and FFN (197 rows) ran in 0.90-0.94x
  // the time, the whole ViT-B/16 0.90-0.92x (Sapphire Rapids-class, 1 core);
  // 4 x 4 at BERT's 128 rows gained nothing (0.99-1.02x) and keeps 64.
  const int unroll = unroll_choice(rows * reduce_unroll);
  const int matmul_cap = vectors == 4 && rows >= 6 ? kUnrollSteps[3] : kUnrollSteps[2];
  set_choice(p.unroll, matmul ? std::min(unroll, unroll_choice(matmul_cap)) : unroll);
  return true;
}

// A blocked 1 x 1 convolution (reduce axes: channel blocks, a 1 x 1
// window, the channels of a block) whose weights for one output-channel
// block outgrow L1 (kStreamedWeightBytes): with the accumulator at S1 each
// register tile runs the whole reduction, streaming that block's weights
// from L2 for a handful of pixels while its inputs jump a whole channel
// plane per step. Streamed instead: the accumulator goes to S0 (one
// output-channel block, the rows of up to kStreamedAccumulatorBytes), the
// channel blocks become the outermost reduce loop (R0) and each step sweeps
// every tile (S2) over one contiguous slice of input channels with that
// slice's weights in L1. Measured on Zen 3 (AVX2, cold inputs, 2 threads,
// against the seed): ResNet-50's 1024->256 at 14x14 1.31-1.40x, 512->1024
// stride 2 1.19-1.34x, 2048->512 at 7x7 1.08-1.18x, 1024->2048 stride 2
// 1.03-1.12x; with 16 KiB of weights a block (256->512 stride 2) 0.77-0.90x,
// so smaller blocks keep the seed; 3 x 3 windows gained nothing reliable
// there. With `windows`, the same for a conv whose window is wider than
// 1 x 1 and whose block's weights reach kStreamedWindowWeightBytes (see
// default_streams_windows): the taps run inside each step (R1).
constexpr int64_t kStreamedWeightBytes = 32 << 10;
constexpr int64_t kStreamedWindowWeightBytes = 512 << 10;

// Turns seed d of plan p into the streamed form above (windows: only a
// window wider than 1 x 1; else only 1 x 1); false (d unchanged) where it
// does not apply.
bool stream_channel_blocks(const DagInfo& dag, const StageInfo& st, const Sketch& sk, const StagePlan& p, std::vector<int>* d, bool windows) {
  size_t n = p.spatial_tiles.size(), m = p.reduce_tiles.size();
  if (n < 2 || m < 3 || p.location < 0 || sk.slots[p.location].choices < 2 || st.reduce.size() != m || st.spatial.size() != n)
    return false;  // not tiled with a choice of accumulator level, or not a blocked conv's axes
  int64_t taps = 1;
  for (size_t k = 1; k + 1 < m; ++k) taps *= st.reduce[k];
  if ((taps != 1) != windows) return false;
  int64_t block = st.reduce.back(), out_block = st.spatial.back();
  if (block % dag.lanes != 0 || out_block % dag.lanes != 0) return false;
  int64_t bytes = st.tensor.dtype().bytes();
  if (st.reduce.front() * taps * block * out_block * bytes < (windows ? kStreamedWindowWeightBytes : kStreamedWeightBytes)) return false;
  std::vector<int> out = *d;
  auto factors = [&](int slot) { return out.data() + sk.slots[slot].offset; };  // 4 levels S0..S3 (spatial), 2 (reduce)
  std::vector<bool> weight_axis = indexes_vector_operand(st);
  // Row axes (those that do not index the weights) move from S0 to S2.
  std::vector<size_t> rows;
  for (size_t k = 0; k + 1 < n; ++k)
    if (k >= weight_axis.size() || !weight_axis[k]) {
      int* f = factors(p.spatial_tiles[k]);
      f[2] *= f[0];
      f[0] = 1;
      rows.push_back(k);
    }
  auto tile_bytes = [&] {
    int64_t b = bytes;
    for (size_t k = 0; k < n; ++k) {
      const int* f = factors(p.spatial_tiles[k]);
      b *= int64_t(f[1]) * f[2] * f[3];
    }
    return b;
  };
  auto s0_iterations = [&] {
    int64_t it = 1;
    for (size_t k = 0; k < n; ++k) it *= factors(p.spatial_tiles[k])[0];
    return it;
  };
  // Rows back to S0, outermost first, until the accumulator fits and every core has a few tiles.
  for (size_t k : rows) {
    int* f = factors(p.spatial_tiles[k]);
    while (f[2] > 1 && (tile_bytes() > kStreamedAccumulatorBytes || s0_iterations() < 4 * dag.cores)) {
      int64_t q = prime_factors(f[2]).front();
      f[2] = static_cast<int>(f[2] / q);
      f[0] = static_cast<int>(f[0] * q);
    }
  }
  if (tile_bytes() > kStreamedAccumulatorBytes || s0_iterations() < 2 * dag.cores) return false;
  // Channel blocks all in R0, a block's channels all in R1.
  int* outer = factors(p.reduce_tiles.front());
  outer[0] = static_cast<int>(st.reduce.front());
  outer[1] = 1;
  int* inner = factors(p.reduce_tiles.back());
  inner[0] = 1;
  inner[1] = static_cast<int>(block);
  if (windows) {
    // The window's taps run inside each step (R1) beside the block's
    // channels the seed unrolls; the rest of the block's channels join the
    // channel blocks outside (R0): one step's weights stay a few KiB.
    const int* seed = d->data() + sk.slots[p.reduce_tiles.back()].offset;
    inner[0] = seed[0];
    inner[1] = seed[1];
    for (size_t k = 1; k + 1 < m; ++k) {
      int* f = factors(p.reduce_tiles[k]);
      f[0] = 1;
      f[1] = static_cast<int>(st.reduce[k]);
    }
  }
  out[sk.slots[p.location].offset] = 1;  // the accumulator at S0
  *d = std::move(out);
  return true;
}

// Whether the default takes the streamed form where it applies: on targets
// of 16 vector registers (AVX2), where it was measured (Zen 3, above). With
// 32 (AVX-512) the seed's tile runs the reduction from L1 and L2 faster:
// on Zen 5 (2 threads, ResNet-50, interleaved in one process) streamed
// 1 x 1 convs took 1.3x to 2.2x the seed's time (every one of them, 256 to
// 2048 input channels), the whole model 31.0 ms against 25.2; MobileNet-V2
// 4.82 against 4.61; ResNet-18 the same. Not a question of the unrolled
// channels: 8 or 16 a step instead of the block's 32 streamed as slowly.
// Its AVX2 code on the same host times the same either way. The search
// still measures the streamed seeds on every target.
bool default_streams(const DagInfo& dag) { return dag.registers <= 16; }

// Whether the default streams the channel blocks of a conv with a window
// wider than 1 x 1 (3 x 3) whose weights for one block of output channels
// reach kStreamedWindowWeightBytes: on targets of 32 vector registers
// (AVX-512), where it was measured. Unstreamed, each row of register tiles
// runs the whole reduction and rereads the block's weights from L2, a
// quarter of it on a 2 MiB L2 shared with the inputs; streamed, each step's
// few KiB of weights serve every row from L1. On a Sapphire Rapids-class
// Xeon (ResNet-18 in the model, minimum of 20-25 runs, interleaved, loaded
// machine) the 512 -> 512 3 x 3 convs at 7 x 7 (590 KiB a block) ran in
// 0.80-0.93x the time at 1 thread (medians 0.3-0.9x at 2); the 256 -> 512
// stride-2 one (295 KiB) gained nothing reliable (0.86-1.07x at 1 thread,
// up to 1.3x slower at 2) and 128 -> 256 (147 KiB) was 1.6x slower (all 32
// channels of a block a step), hence the bar. AVX2's blocks of 8 channels
// keep a block's weights under it.
bool default_streams_windows(const DagInfo& dag) { return dag.registers > 16; }

// Whether the default streams the channel blocks of a 1 x 1 conv on a
// target of 32 vector registers (AVX-512), where the plain seed keeps
// them (default_streams): where its weights (kStreamedL3WeightBytes and
// more) outgrow every target's L2 and its whole output for one block of
// output channels fits the accumulator (kStreamedAccumulatorBytes: the
// rows of tiles all inside each step). Unstreamed, the first row of tiles
// over each block pulls that block's weights from L3 (or memory) at 7
// FMAs a weight vector, and the L2 prefetcher does not keep up; streamed,
// each step's few KiB serve every pixel of the image from L1, so each
// weight is fetched once, behind 49 FMAs at 7 x 7. ResNet-50's layer4
// (2048 -> 512 and 512 -> 2048 at 7 x 7, 4 MiB of weights; 1024 -> 2048
// stride 2, 8 MiB) in the model, Sapphire Rapids-class Xeon (2 MiB L2),
// both forms compiled and profiled interleaved in one process, 40-60 runs,
// machine load 3: 0.87-0.90 ms against 0.96-1.02 (min) at 1 thread, the
// stride-2 one 1.79 against 1.94; 0.43-0.46 against 0.46-0.48 at 2
// threads (its stride-2 one level). ONNX Runtime's nodes took 0.74-0.78
// at 1 thread in the same hour: the gap narrows, it does not close. Where
// the weights stay in L2 streaming loses (256 -> 256 at 7 x 7: 0.032 ms
// against 0.028): each step stores and reloads the accumulator. The
// graph gives these convolutions one-vector channel blocks (default_conv_cap,
// graph/src/passes/layout_defaults.cpp); kStreamedL3WeightBytes and the
// test are shared with it (kiln/ops/streamed_weights.h).
bool streams_from_l3(const DagInfo& dag, const StageInfo& st) {
  if (dag.registers <= 16 || st.reduce.size() != 4 || st.reduce[1] != 1 || st.reduce[2] != 1 || st.spatial.size() < 2) return false;
  for (bool v : st.spatial_var)
    if (v) return false;
  std::vector<bool> weight_axis = indexes_vector_operand(st);
  const int64_t bytes = st.tensor.dtype().bytes(), block = st.spatial.back();
  int64_t K = block, pixels = 1;
  for (size_t k = 0; k + 1 < st.spatial.size(); ++k) (k < weight_axis.size() && weight_axis[k] ? K : pixels) *= st.spatial[k];
  return ops::streams_1x1_weights_from_l3(st.reduce_size(), K, pixels, block, bytes, dag.registers);
}

// Applies stream_channel_blocks to every tiled plan of d; whether any changed.
bool stream_seed(const DagInfo& dag, const Sketch& sk, std::vector<int>* d, bool windows = false) {
  bool any = false;
  for (size_t si = 0; si < sk.plans.size(); ++si)
    if (!sk.plans[si].spatial_tiles.empty()) any = stream_channel_blocks(dag, dag.stages[si], sk, sk.plans[si], d, windows) || any;
  return any;
}

// Applies stream_channel_blocks to the tiled plans of d that streams_from_l3 picks; whether any changed.
bool stream_l3_weights(const DagInfo& dag, const Sketch& sk, std::vector<int>* d) {
  bool any = false;
  for (size_t si = 0; si < sk.plans.size(); ++si)
    if (!sk.plans[si].spatial_tiles.empty() && streams_from_l3(dag, dag.stages[si]))
      any = stream_channel_blocks(dag, dag.stages[si], sk, sk.plans[si], d, false) || any;
  return any;
}

// A matmul whose transposed A (packed by the row tile, StageInfo::pack_a_operand)
// is far larger than its packed B keeps the panel loop outermost only while
// A streams from L3 well: panel-outer reads all of A once per panel of B.
// A linear layer's weight gradient dW = X^T dY with 3072 inputs (BERT's
// FFN down-projection, A = [1024, 3072] read transposed, 12 MiB packed,
// B = [1024, 768], 3 MiB) read A 48 times; in blocks of rows instead (A's
// block of kRowBlockBytes in L2, every panel of B passing over it, B read
// once per block) it ran in 0.86x the time with the SGD momentum epilogue
// (73.6 against 63.3 GFLOP/s, AVX2 code on one loaded Xeon core, CPU time,
// interleaved), 0.90x without. Where A is the smaller operand (768 rows:
// A 3 MiB, B 12 MiB) the blocks ran 1.2-1.3x slower: panel-outer stays.
// Few panels keep it too: AVX-512's 64-wide ones read the same A 12 times,
// and panel-outer ran as fast as the blocks there (127 against 124 GFLOP/s).
constexpr int64_t kBlockedAMinBytes = 6 << 20;
constexpr int64_t kBlockedAMinPanels = 24;
constexpr int64_t kRowBlockBytes = 192 << 10;

int64_t const_bytes(const te::Tensor& t) {
  int64_t bytes = t.dtype().bytes();
  for (int64_t e : ops::const_shape(t)) bytes *= e;
  return bytes;
}

// Blocks the rows of d's tiled matmul plans as above.
void block_rows_of_large_a(const DagInfo& dag, const Sketch& sk, std::vector<int>* d) {
  for (size_t si = 0; si < sk.plans.size(); ++si) {
    const StagePlan& p = sk.plans[si];
    const StageInfo& st = dag.stages[si];
    if (p.spatial_tiles.empty() || p.pack < 0 || p.panel_order < 0 || st.reduce.size() != 1 || st.pack_a_operand < 0 || st.reduce_var[0]) continue;
    if (st.pack_a_axis < 0 || st.pack_a_axis >= static_cast<int>(p.spatial_tiles.size()) || st.spatial_var[st.pack_a_axis]) continue;
    const te::Tensor& a = dag.stages[st.pack_a_operand].tensor;
    const te::Tensor& b = dag.stages[p.pack].tensor;
    const int64_t a_bytes = const_bytes(a), b_bytes = const_bytes(b);
    if (a_bytes < kBlockedAMinBytes || a_bytes < 2 * b_bytes) continue;
    const Slot& rows = sk.slots[p.spatial_tiles[st.pack_a_axis]];
    int* f = d->data() + rows.offset;
    const int64_t tile = f[rows.size - 1], a_rows = ops::const_shape(a)[st.pack_a_dim];
    if (rows.size != 4 || tile < 2 || a_rows % tile != 0 || rows.extent != a_rows) continue;  // A is packed only where the tile divides its rows
    const Slot& cols = sk.slots[p.spatial_tiles.back()];
    if (cols.extent / (*d)[cols.offset + cols.size - 1] < kBlockedAMinPanels) continue;
    const int64_t tiles = rows.extent / tile;
    const int64_t block = divisor_at_most(tiles, std::max<int64_t>(1, kRowBlockBytes / (tile * st.reduce[0] * a.dtype().bytes())));
    if (block < 2 || block == tiles) continue;
    f[0] = static_cast<int>(tiles / block);
    f[1] = static_cast<int>(block);
    f[2] = 1;
    (*d)[sk.slots[p.panel_order].offset] = 0;
  }
}

// A blocked 1 x 1 convolution whose input outgrows L2 (kSharedInputBytes:
// with the output streaming through beside it, more than half of 2 MiB)
// while its weights stay in L2 (kSharedWeightBytes, the smallest L2 of
// the targets measured) re-reads that input from L3 once per block of
// output channels, the blocks being the outermost loop. With the blocks
// moved inside the pixel tiles (their S0 factor to S1), each tile's
// input is read once for all of them, and the weights come from L2
// instead. Measured on one core of an AVX-512 Xeon (cold weights,
// interleaved): 256 -> 256 at 56 x 56 0.86x the time (AVX2 code, 0.91x),
// 512 -> 512 at 28 x 28 0.88-0.91x, 512 -> 256 at 28 x 28 0.94-0.98x,
// 256 -> 64 or 128 at 56 x 56 and 512 -> 128 at 28 x 28 the same; with
// more output channels than input ones it did not pay (128 -> 256 at
// 56 x 56 with a residual: the same on AVX-512, 1.14-1.19x on AVX2;
// 128 -> 512 at 28 x 28 1.09-1.12x), nor with weights of 4 MiB and more
// read again for every tile (1.5-1.8x at 7 x 7).
constexpr int64_t kSharedInputBytes = (3 << 20) / 2;
constexpr int64_t kSharedWeightBytes = 1 << 20;

// Moves the output-channel blocks of a plain seed d inside its pixel
// tiles where the above applies; false (d unchanged) elsewhere.
bool share_input_tiles(const DagInfo& dag, const StageInfo& st, const Sketch& sk, const StagePlan& p, std::vector<int>* d) {
  size_t n = p.spatial_tiles.size();
  if (n < 2 || st.reduce.size() != 4 || st.spatial.size() != n || st.reduce[1] != 1 || st.reduce[2] != 1) return false;
  for (size_t k = 0; k < n; ++k)
    if (st.spatial_var[k]) return false;
  std::vector<bool> weight_axis = indexes_vector_operand(st);
  const int64_t bytes = st.tensor.dtype().bytes(), C = st.reduce_size();
  int64_t K = st.spatial.back(), pixels = 1;
  for (size_t k = 0; k + 1 < n; ++k) (k < weight_axis.size() && weight_axis[k] ? K : pixels) *= st.spatial[k];
  if (C < K || C * pixels * bytes < kSharedInputBytes || C * K * bytes > kSharedWeightBytes) return false;
  bool moved = false;
  for (size_t k = 0; k + 1 < n; ++k) {
    if (k >= weight_axis.size() || !weight_axis[k]) continue;
    int* f = d->data() + sk.slots[p.spatial_tiles[k]].offset;
    moved = moved || f[0] > 1;
    f[1] *= f[0];
    f[0] = 1;
  }
  return moved;
}

// The default's parallel loop: every S0 loop, except for a Simple stage
// (not a row loop), which runs parallel the fewest outer loops that give
// every core kChunksPerCore iterations (all when the axes before the vector
// axis give fewer). Fused, the loops inside must be recovered from the one
// index by a division and a modulo each, per vector; a stage that gathers
// (Winograd's input transform reads 4 inputs per output, at indices that
// depend on the output's position in its tile) paid that on every read:
// 0.160 ms on ResNet's 56x56 layer with every loop fused against 0.066
// with only the outermost parallel (Zen 5, 2 cores).
constexpr int64_t kChunksPerCore = 8;
// Whether stage r's body reads stage t.
bool reads_stage(const StageInfo& r, const StageInfo& t) {
  bool reads = false;
  if (!r.op || !t.op) return false;
  post_order_visit(r.op->body, [&](const Expr& e) {
    const TensorLoad* l = e.as<TensorLoad>();
    reads = reads || (l && static_cast<const te::TensorNode*>(l->producer.get())->op.get() == t.op);
  });
  return reads;
}

int default_parallel_choice(const DagInfo& dag, const Sketch& sk, const StagePlan& p, const StageInfo& st) {
  const int all = sk.slots[p.parallel].choices - 1;
  if (p.kind != PlanKind::Simple || p.rows) return all;
  // The outer loops in their order there: the inner parts of axes run inside (see simple()).
  int64_t iterations = 1;
  int outer = 0;
  for (size_t k = 0; k + 1 < st.spatial.size(); ++k) {
    if (st.inner_part(k) > 1 && st.inner_part(k) == st.spatial[k]) continue;
    // A symbolic extent may be 1 (a batch of one image): it counts for nothing.
    if (!st.spatial_var[k]) iterations *= st.spatial[k] / st.inner_part(k);
    if (iterations >= kChunksPerCore * dag.cores) return std::min(outer, all);
    ++outer;
  }
  return all;
}

}  // namespace

std::vector<std::vector<int>> seed_decisions(const DagInfo& dag, const Sketch& sk, bool folded_loads) {
  std::vector<std::vector<int>> out;
  // Two or one vectors wide; one vector's lanes of reduce steps unrolled, or
  // four; then (x86, with folded_loads) two vectors with the rows of folded
  // loads. The default takes none of those (tile_intensity would prefer
  // them, unmeasured); the search measures every seed first.
  struct Shape {
    int vectors, reduce;
    bool folded;
  };
  std::vector<Shape> shapes = {{2, 1, false}, {1, 1, false}, {2, 4, false}, {1, 4, false}};
  // bfloat16 pair dot products (vdpbf16ps) do twice an FMA's products per
  // instruction: four vectors wide first, so each broadcast pair feeds more.
  if (has_pair_dot(dag)) shapes.insert(shapes.begin(), {4, 1, false});
  // With 32 vector registers (AVX-512) a matmul's tile four vectors wide
  // first (the default where tile_intensity prefers it): 6 rows x 4 vectors
  // load 10 vectors for 24 FMAs where 6 x 2 load 8 for 12. On a Sapphire
  // Rapids-class Xeon (1 core, CPU time, interleaved) BERT's and ViT's
  // projections and FFN (K 768 or 3072, N 768 to 3072) ran in 0.85-0.91x
  // the time of 6 x 2 at 197 rows and of 8 x 2 at 128 (4 x 4 there; 6 x 4
  // over 132 padded rows was 1.13x slower). The graph packs B in panels as
  // wide (alter_conv_layout.cpp).
  else if (dag.registers >= 32 && wide_matmul(dag)) shapes.insert(shapes.begin(), {4, 1, false});
  if (dag.fma_memory_operand && folded_loads) shapes.insert(shapes.end(), {{2, 1, true}, {2, 4, true}});
  for (auto [vectors, reduce, folded] : shapes) {
    std::vector<int> d(sk.num_decisions, 0);
    // Untiled slots (Simple stages beside the tiled one): their first valid value.
    for (const Slot& s : sk.slots)
      if (s.kind == Slot::Kind::Tile) put_tile(s, s.inner_allowed.empty() ? 1 : s.inner_allowed.front(), &d);
    bool any = false;
    for (size_t si = 0; si < sk.plans.size(); ++si) {
      const StagePlan& p = sk.plans[si];
      if (p.kind == PlanKind::Simple && p.vector_tile >= 0) {
        // Vectors along the innermost axis, enough outer loops parallel.
        const Slot& v = sk.slots[p.vector_tile];
        put_tile(v, divisor_at_most(v.extent, 2 * dag.lanes), &d);
        if (p.parallel >= 0) d[sk.slots[p.parallel].offset] = default_parallel_choice(dag, sk, p, dag.stages[si]);
      }
      if (p.spatial_tiles.empty()) continue;
      int64_t width = tile_width(sk.slots[p.spatial_tiles.back()], dag.lanes, vectors);
      if (width == 0 || !seed_plan(dag, dag.stages[si], sk, p, width, int64_t(reduce) * dag.lanes, folded, &d)) {
        any = false;
        break;
      }
      any = true;
    }
    if (any && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
  }
  // The streamed forms of each seed they apply to (a 1 x 1 conv's, a wider
  // window's), after all of them (so the default's pick by tile_intensity
  // sees the plain seeds first).
  for (size_t i = 0, count = out.size(); i < count; ++i) {
    std::vector<int> d = out[i];
    if (stream_seed(dag, sk, &d) && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
    d = out[i];
    if (stream_seed(dag, sk, &d, true) && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
    // A matmul's K-blocked form (search_space_k_blocks.cpp), for the search
    // only: its register tile is the plain seed's, so the default's pick (the
    // first of the highest tile_intensity) keeps the plain seed.
    d = out[i];
    bool blocked = false;
    for (size_t si = 0; si < sk.plans.size(); ++si)
      if (!sk.plans[si].spatial_tiles.empty()) blocked = block_k_of_wide_panels(dag.stages[si], sk, sk.plans[si], &d) || blocked;
    if (blocked && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
  }
  return out;
}

// A blocked conv's output columns are padded where the tile their divisors
// allow does under this share of the full tile's FMAs per load. SqueezeNet
// 1.0 (2 threads, interleaved in one run): its 109 x 109 stem (prime: one
// pixel a tile) ran 2.4x faster padded to 8 tiles of 14 (AVX-512) and 1.5x
// as 19 of 6 (AVX2); its 1 x 1 convs at 27 x 27 1.3-1.4x faster as 5 tiles
// of 6 than 9 of 3 (AVX2, 80%), but 5-13% slower as 2 of 14 than 3 of 9
// (AVX-512, 94%, as at 54 x 54). 14 x 14 on AVX2 keeps its 2 x 2 (89%).
constexpr double kPaddedConvGain = 0.85;

int64_t tile_extent(const DagInfo& dag, const StageInfo& s, size_t axis, bool packed) {
  size_t n = s.spatial.size();
  int64_t extent = s.spatial[axis];
  const bool matmul = s.reduce.size() == 1;
  // A matmul's axes, or a blocked conv2d's (reduce axes: channel blocks,
  // kernel rows and columns, the channels of a block) output columns; a
  // packed axis's panels must divide it.
  // A symbolic vector axis is tiled as its hint in whole vectors (the rest a tail).
  if (s.spatial_var[axis] && axis + 1 == n && !packed) return ops::padded_vector_extent(extent, dag.lanes);
  if (!(matmul || s.reduce.size() == 4) || packed) return extent;
  if (axis + 1 == n) return matmul ? ops::padded_vector_extent(extent, dag.lanes) : extent;  // a conv's is its channel block
  // The row axis: the innermost one of more than one row that shares the
  // vector operand's loads (ViT's projections read [197, 1, 768]: the batch
  // axis of 197, not the row axis of 1; a blocked conv's output columns).
  std::vector<bool> indexes = indexes_vector_operand(s);
  size_t rows = n;
  for (size_t k = 0; k + 1 < n; ++k)
    if (s.spatial[k] > 1 && !(k < indexes.size() && indexes[k])) rows = k;
  if (axis != rows) return extent;
  if (matmul) {
    int64_t fit = max_tile_rows(dag.registers - 1, 2), want = std::min(fit, kMaxMatmulRows);
    int64_t rows_extent = ops::padded_rows_extent(extent, want, fit);
    // A symbolic row count has no divisors to respect: where the hint's
    // would give fewer rows than wanted (128 on AVX2: 4, not 6), tile by
    // `want` and leave the rest to the tail.
    if (s.spatial_var[axis] && divisor_near(rows_extent, want, fit) < want) rows_extent = (extent + want - 1) / want * want;
    // With 16 registers the nearest divisor leaves the two-vector tile short
    // of accumulators (1024 rows: 4 x 2, 8 accumulators, barely the FMA
    // units' latency times their count): pad to whole tiles of `want` where
    // the partial tile is under 1% of the rows. BERT's 1024 x 768 x 3072 on
    // AVX2 (1 core, CPU time): 4 x 2 at 84 GFLOP/s, 6 x 2 at 94.
    // The rows count over every axis that shares the vector operand: a
    // batched matmul with one weight (BERT's [8, 128, 768] x [768, 3072]
    // forward) walks 1024 rows in tiles that pad each batch's 128 to 132:
    // 0.92x the CPU time of 4 x 2 (93-95 GFLOP/s against 86-88, AVX2, 1 core).
    int64_t shared_rows = 1;
    for (size_t k = 0; k + 1 < n; ++k)
      if (!(k < indexes.size() && indexes[k])) shared_rows *= s.spatial[k];
    // Not where the pad is a large share of the axis: torch's attention
    // projects a [128, 8, 768] sequence-first input, whose 8 rows padded
    // to 12 computed half as many rows again (QKV forward 1.19x the time of
    // OpenBLAS's [1024, 768] x [768, 2304]; 4-row tiles of the 8, 1.08-1.12x).
    const int64_t padded = (extent + want - 1) / want * want;
    if (!s.spatial_var[axis] && dag.registers < 32 && extent % want != 0 && shared_rows >= 100 * want && 8 * padded <= 9 * extent)
      rows_extent = padded;
    return rows_extent;
  }
  // A conv's rows: as many output pixels as fit beside the default's tile
  // of two vectors of output channels (one where its block is one vector),
  // columns first, then rows of the image (seed_plan). Padded only where the
  // divisors' tile does under kPaddedConvGain of the full tile's FMAs per
  // load (tile_intensity), as the remainder costs a little: see below.
  int64_t vectors = s.spatial[n - 1] % (2 * int64_t(dag.lanes)) == 0 ? 2 : 1;
  int64_t fit = max_tile_rows(dag.registers - 1, static_cast<int>(vectors)), left = fit, pixels = 1;
  for (size_t k = rows + 1; k-- > 0;)
    if (!(k < indexes.size() && indexes[k])) {
      int64_t r = divisor_at_most(s.spatial[k], left);
      pixels *= r;
      left = std::max<int64_t>(1, left / r);
    }
  auto intensity = [&](int64_t p) { return double(p * vectors) / double(p + vectors); };
  if (intensity(pixels) >= kPaddedConvGain * intensity(fit)) return extent;
  return ops::padded_rows_extent(extent, fit, fit);
}

// FMAs per vector load or broadcast in one reduce step of the register
// tiles of d, counting only the rows along axes that share the vector
// operand's loads (rows along the others, such as a conv's output-channel
// blocks, each stream their own slice of the weights: no reuse in registers,
// and the slice a tile walks through outgrows the cache). The best of the
// tiled stages. Without a measurement, the seed with the highest figure is
// the default.
double tile_intensity(const DagInfo& dag, const Sketch& sk, const std::vector<int>& d) {
  double best = 0;
  for (size_t si = 0; si < sk.plans.size(); ++si) {
    const StagePlan& p = sk.plans[si];
    if (p.spatial_tiles.empty()) continue;
    std::vector<bool> weight_axis = indexes_vector_operand(dag.stages[si]);
    auto inner = [&](int slot) { return double(d[sk.slots[slot].offset + sk.slots[slot].size - 1]); };
    double rows = 1, vectors = std::max(1.0, inner(p.spatial_tiles.back()) / dag.lanes);
    for (size_t k = 0; k + 1 < p.spatial_tiles.size(); ++k)
      if (k >= weight_axis.size() || !weight_axis[k]) rows *= inner(p.spatial_tiles[k]);
    best = std::max(best, rows * vectors / (rows + vectors));
  }
  return best;
}

// Unpacked, each reduce step of the register tile reads B's next row: a
// new cache line and, for rows of 4 KiB and more, a new page, which the
// prefetchers do not follow well. Packed, the copy is one more pass over
// B, paid back when enough output rows reuse each panel. Measured with the
// default tiles and cold inputs, packed against plain, interleaved:
//   AVX-512 (Zen 5): 0.70x to 0.88x for B of 2 to 12 MiB reused by 768 or
//     more rows; 0.94x to 0.99x for smaller B or fewer rows;
//   AVX2 (znver3 target): 0.42x to 0.46x for B of 9 to 12 MiB, 0.92x for
//     2.3 MiB, and 1.00x to 1.06x for B of 1 MiB or less (it stays in L2).
// B read transposed, B[j, k], loads each vector lane by lane unpacked: the
// copy pays for any B reused by 8 rows or more.
// Rows: the output extents along the axes that do not index the operand.
bool pack_pays(const DagInfo& dag, const StageInfo& s) {
  if (s.pack_operand < 0) return false;
  std::vector<bool> indexes = indexes_vector_operand(s);
  int64_t rows = 1;
  for (size_t k = 0; k + 1 < s.spatial.size(); ++k)
    if (k >= indexes.size() || !indexes[k]) {
      // Symbolic rows may be few (a sequence of 1): the copy of B, paid at
      // every call, would then cost more than the product (a 768 x 768 B
      // against one row is 2.3 MB copied for 1.2 MFLOP).
      if (s.spatial_var[k]) return false;
      rows *= s.spatial[k];
    }
  const te::Tensor& b = dag.stages[s.pack_operand].tensor;
  if (s.pack_dim + 1 != b.ndim()) return rows >= 8;
  int64_t bytes = b.dtype().bytes();
  for (int64_t d : ops::const_shape(b)) bytes *= d;
  return rows >= 64 && bytes > (int64_t(1) << 20);
}

std::vector<int> default_decisions(const DagInfo& dag, const Sketch& sk) {
  std::vector<std::vector<int>> seeds = seed_decisions(dag, sk, false);
  if (!seeds.empty()) {
    // The first of the best (two vectors wide before one, on ties).
    size_t pick = 0;
    for (size_t i = 1; i < seeds.size(); ++i)
      if (tile_intensity(dag, sk, seeds[i]) > tile_intensity(dag, sk, seeds[pick]) + 1e-9) pick = i;
    if (default_streams(dag) && stream_seed(dag, sk, &seeds[pick])) return seeds[pick];
    if (default_streams_windows(dag) && stream_seed(dag, sk, &seeds[pick], true)) return seeds[pick];
    if (stream_l3_weights(dag, sk, &seeds[pick])) return seeds[pick];
    block_rows_of_large_a(dag, sk, &seeds[pick]);
    for (size_t si = 0; si < sk.plans.size(); ++si)
      if (!sk.plans[si].spatial_tiles.empty()) share_input_tiles(dag, dag.stages[si], sk, sk.plans[si], &seeds[pick]);
    return seeds[pick];
  }
  // No seed (no tiled stage, or a tiled axis no whole vector divides, as
  // 1000 classes on 16 lanes): the same structure with the widest tile the
  // extent allows.
  std::vector<int> d(sk.num_decisions, 0);
  for (const Slot& s : sk.slots)
    if (s.kind == Slot::Kind::Tile) put_tile(s, s.inner_allowed.empty() ? 1 : s.inner_allowed.front(), &d);
  for (size_t si = 0; si < sk.plans.size(); ++si) {
    const StagePlan& p = sk.plans[si];
    if (p.vector_tile >= 0) {
      const Slot& v = sk.slots[p.vector_tile];
      put_tile(v, divisor_at_most(v.extent, 2 * dag.lanes), &d);
    }
    if (p.parallel >= 0) d[sk.slots[p.parallel].offset] = default_parallel_choice(dag, sk, p, dag.stages[si]);
    // Rule 7's elementwise stage read by a row reduction and by the output
    // (a softmax's exponentials) is stored per row, computed once: inlined,
    // each exponential ran twice. Softmax over 12 x 128 x 128 on one core
    // (Xeon, AVX-512, loaded): 0.16-0.20 ms against 0.23-0.30. One the
    // output does not read (a layer norm's squares) stays inlined.
    if (p.kind == PlanKind::Inline && p.location >= 0 && p.consumer >= 0 && reads_stage(dag.stages[p.consumer], dag.stages[si]))
      d[sk.slots[p.location].offset] = 1;
    if (p.spatial_tiles.empty()) continue;
    const Slot& last = sk.slots[p.spatial_tiles.back()];
    int64_t width = 1;
    for (int64_t w : divisors(last.extent)) {
      bool allowed = last.inner_allowed.empty() ||
                     std::find(last.inner_allowed.begin(), last.inner_allowed.end(), w) != last.inner_allowed.end();
      if (w <= std::min<int64_t>(2 * dag.lanes, kMaxVectorExtent) && allowed) width = w;
    }
    seed_plan(dag, dag.stages[si], sk, p, width, dag.lanes, false, &d);
  }
  return d;
}

}  // namespace kiln::ops::detail
