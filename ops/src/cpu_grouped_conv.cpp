// The hand schedule of a blocked grouped convolution (cpu_grouped_conv.h).
#include "kiln/ops/cpu_grouped_conv.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <unordered_set>

#include "kiln/ops/register_tile.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"
#include "kiln/te/operation.h"

#include "hand_schedule_util.h"

namespace kiln::ops {

namespace {

using detail::compute_of;
using detail::static_shape;
using detail::extent;

// A block's channels unrolled a step: with 16, LLVM's Zen 4 schedule loaded
// later steps' weights early and spilled 27 to 39 accumulators of ResNeXt's
// 14 x 14 x 1024 and 7 x 7 x 1024 tiles a tap (none with 8); on a Xeon
// (AVX-512) 8 and 16 time the same.
constexpr int64_t kChannelUnroll = 8;

// The stages the schedule names: conv (the grouped reduction), input (its
// computed 5-D input, the padding; undefined where it reads a placeholder),
// out; every other computed stage is inlined.
struct GroupedPlan {
  std::vector<te::Tensor> stages;
  te::Tensor conv, input, out;
  int64_t blocks_per_group = 1;  ///< output blocks that read the same input channels
};

bool plan_grouped(const Task& task, GroupedPlan* p, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (task.target.kind != Target::Kind::LLVM) return no("not a CPU target");
  if (task.outputs.size() != 1) return no("the task has several outputs");
  std::unordered_set<const te::OperationNode*> seen;
  std::function<void(const te::Tensor&)> walk = [&](const te::Tensor& t) {
    if (!compute_of(t) || !seen.insert(t.op().get()).second) return;
    for (const te::Tensor& i : compute_of(t)->input_tensors()) walk(i);
    p->stages.push_back(t);
  };
  p->out = task.outputs[0];
  walk(p->out);
  for (const te::Tensor& t : p->stages) {
    if (!static_shape(t.shape())) return no("a symbolic extent");
    if (t.dtype() != DataType::Float(32)) return no("not float32");
    if (compute_of(t)->is_reduction()) {
      if (p->conv.defined()) return no("several reductions");
      p->conv = t;
    }
  }
  if (!p->conv.defined()) return no("no reduction");
  const te::ComputeOpNode* conv = compute_of(p->conv);
  if (p->conv.ndim() != 5 || conv->reduce_axis.size() != 4) return no("the reduction is no blocked conv (5-D, four reduce axes)");
  te::Tensor weights;
  for (const te::Tensor& t : conv->input_tensors()) {
    te::Tensor& slot = t.ndim() == 6 ? weights : p->input;
    if (slot.defined() || (t.ndim() != 5 && t.ndim() != 6)) return no("the conv does not read one 5-D input and 6-D weights");
    slot = t;
  }
  if (!weights.defined() || !p->input.defined() || compute_of(weights)) return no("the conv does not read one 5-D input and placeholder weights");
  if (!static_shape(p->input.shape()) || p->input.dtype() != DataType::Float(32)) return no("the conv's input is not static float32");
  const int64_t in_channels = extent(p->input.shape()[1]) * extent(p->input.shape()[4]);
  const int64_t reduced = extent(conv->reduce_axis[0]->dom.extent) * extent(conv->reduce_axis[3]->dom.extent);
  if (reduced >= in_channels) return no("the conv reduces over all its input's channels (not grouped)");
  if (!compute_of(p->input)) p->input = te::Tensor();
  // Past the conv only elementwise stages of its shape (bias, activation, a residual).
  std::unordered_set<const te::OperationNode*> input_side;
  std::function<void(const te::Tensor&)> mark = [&](const te::Tensor& t) {
    if (!compute_of(t) || !input_side.insert(t.op().get()).second) return;
    for (const te::Tensor& i : compute_of(t)->input_tensors()) mark(i);
  };
  if (p->input.defined()) mark(p->input);
  for (const te::Tensor& t : p->stages) {
    if (t.same_tensor(p->conv) || input_side.count(t.op().get())) continue;
    for (int k = 0; k < 5; ++k)
      if (t.ndim() != 5 || extent(t.shape()[k]) != extent(p->conv.shape()[k])) return no("a stage after the conv is not of its shape");
  }
  // Output blocks per group: the conv's blocks over the input's groups of `reduced` channels.
  const int64_t groups = in_channels % reduced == 0 ? in_channels / reduced : 0, blocks = extent(p->conv.shape()[1]);
  p->blocks_per_group = groups > 0 && blocks % groups == 0 ? blocks / groups : 1;
  return true;
}

te::Schedule apply_grouped(const Task& task, const GroupedPlan& p, const GroupedConvTile& t) {
  te::Schedule sch = task.fresh_schedule();
  for (const te::Tensor& s : p.stages)
    if (!s.same_tensor(p.conv) && !s.same_tensor(p.out) && !(p.input.defined() && s.same_tensor(p.input))) sch[s].compute_inline();
  te::Tensor acc = p.conv;
  if (p.out.same_tensor(p.conv)) acc = sch.cache_write(p.out, "local");
  auto vectorizable = [](int64_t e) { return e >= 2 && e <= 64; };

  // Output: images x groups of blocks x rows of tiles in parallel; the tile's blocks, rows, columns and channels inside.
  te::Stage& so = sch[p.out];
  std::vector<IterVar> ax = so.leaf_iter_vars();  // n, ko, y, x, ki
  auto [kg, kf] = so.split(ax[1], static_cast<int>(t.blocks));
  auto [yo, yi] = so.split(ax[2], static_cast<int>(t.rows));
  auto [xo, xi] = so.split(ax[3], static_cast<int>(t.cols));
  so.reorder({ax[0], kg, yo, xo, kf, yi, xi, ax[4]});
  IterVar row = so.fuse({ax[0], kg, yo});
  so.parallel(row);
  if (vectorizable(extent(p.out.shape()[4]))) so.vectorize(ax[4]);

  // The register tile at each tile of the output: the taps and the block's channels outside, unrolled inside.
  te::Stage& sa = sch[acc];
  sa.compute_at(so, xo);
  std::vector<IterVar> aa = sa.leaf_iter_vars();  // n, fo, y, x, fi, rco, ry, rx, rci
  const int64_t rci = extent(compute_of(p.conv)->reduce_axis[3]->dom.extent);
  auto [rci_o, rci_i] = sa.split(aa[8], static_cast<int>(std::gcd<int64_t>(rci, kChannelUnroll)));
  sa.reorder({aa[0], aa[5], aa[6], aa[7], rci_o, rci_i, aa[1], aa[2], aa[3], aa[4]});
  sa.unroll(rci_i);
  sa.unroll(aa[1]);
  sa.unroll(aa[2]);
  sa.unroll(aa[3]);
  if (vectorizable(extent(p.conv.shape()[4]))) sa.vectorize(aa[4]);

  // The padded input rows one row of tiles reads, once per row, in L1.
  if (p.input.defined()) {
    te::Stage& si = sch[p.input];
    si.compute_at(so, row);
    if (vectorizable(extent(p.input.shape()[4]))) si.vectorize(si.leaf_iter_vars().back());
  }
  return sch;
}

}  // namespace

GroupedConvTile grouped_conv_tile(const Target& target, int64_t oh, int64_t ow, int vectors, int64_t blocks, int64_t blocks_per_group) {
  RegisterBudget b = register_budget(target);
  // Cycles of one reduce step of a tile of `acc` accumulators and `loads`
  // loads (its weight vectors and broadcasts): two FMAs and two loads a
  // cycle, and each accumulator's chain waits out an FMA's latency (about
  // 4 cycles) a step, so a tile under 8 accumulators runs at its latency.
  auto step = [](int64_t acc, int64_t loads) { return std::max({acc / 2.0, loads / 2.0, 4.0}); };
  struct Choice {
    GroupedConvTile tile;
    double rate = 0;
    int64_t acc = 0, loads = 0;
  } best, best_tail;
  // Equal rates: the larger tile (fewer loop steps and epilogues), then fewer loads a step.
  auto better = [](const Choice& a, const Choice& o) {
    if (std::abs(a.rate - o.rate) > 1e-9) return a.rate > o.rate;
    return a.acc != o.acc ? a.acc > o.acc : a.loads < o.loads;
  };
  for (int64_t k = blocks; k >= 1; --k) {
    // k blocks of one group share their broadcasts; more span whole groups,
    // each group's own (RegNet's 7 x 7 groups of 8, one block each: two
    // blocks a tile ran in 0.9x the time of one).
    if (blocks % k != 0 || (blocks_per_group % k != 0 && k % blocks_per_group != 0)) continue;
    const int64_t groups = (k + blocks_per_group - 1) / blocks_per_group;
    // The weight vectors stay in registers beside the accumulators, one
    // broadcast and a spare: on AVX2 (no broadcast folded into the FMA) a
    // 14 x 14 output in blocks of two vectors ran 2 x 2 pixels in 0.78x
    // the time of 1 x 7 with the weights read by the FMAs from memory. Two
    // spare of 16 registers: 13 pixels x 1 vector (15 registers) spilled 3
    // accumulators a tap on AVX2, as LLVM loads the next step's weights early.
    const int spare = b.registers > 16 ? 1 : 2;
    const int64_t v = k * vectors, pixels = (b.registers - spare - 1 - v) / v;
    for (int64_t rows = 1; rows <= std::min(oh, pixels); ++rows) {
      if (oh % rows != 0) continue;  // row tails ran slow: 7 rows in tiles of 2 took 1.6x the time of whole rows
      for (int64_t cols = 1; cols <= std::min(ow, pixels / rows); ++cols) {
        // A row of tiles: ow / cols whole ones and a tail.
        const int64_t whole = ow / cols, tail = ow % cols;
        const double cycles = whole * step(v * rows * cols, v + groups * rows * cols) + (tail ? step(v * rows * tail, v + groups * rows * tail) : 0.0);
        const double rate = double(v * rows * ow) / cycles;
        Choice c{{k, rows, cols}, rate, v * rows * cols, v + groups * rows * cols};
        Choice& kept = tail ? best_tail : best;
        if (better(c, kept)) kept = c;
      }
    }
  }
  // A tail tile only where it gains more than its extra code costs: a prime width.
  return best_tail.rate > 1.1 * best.rate ? best_tail.tile : best.tile;
}

std::optional<te::Schedule> grouped_conv_schedule(const Task& task, std::string* why, GroupedConvTile* tile) {
  GroupedPlan plan;
  if (!plan_grouped(task, &plan, why)) return std::nullopt;
  const int lanes = register_budget(task.target).lanes;
  const int vectors = static_cast<int>((extent(plan.out.shape()[4]) + lanes - 1) / lanes);
  GroupedConvTile t = grouped_conv_tile(task.target, extent(plan.out.shape()[2]), extent(plan.out.shape()[3]), vectors, extent(plan.out.shape()[1]), plan.blocks_per_group);
  try {
    te::Schedule sch = apply_grouped(task, plan, t);
    te::LowerOptions options;
    options.expand_loops = false;
    te::lower(sch, task.args, "grouped_conv_check", options);  // a form lowering refuses falls back to the rules
    if (tile) *tile = t;
    return sch;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return std::nullopt;
  }
}

}  // namespace kiln::ops
