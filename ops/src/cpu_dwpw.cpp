// The fused depthwise + pointwise schedule (cpu_dwpw.h).
#include "kiln/ops/cpu_dwpw.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <unordered_set>

#include "kiln/ops/cpu_conv2d.h"
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

// The 1x1 conv's channel steps unrolled (with the pixels): a multiply-add of
// every accumulator per step, the weight vectors loaded ahead.
constexpr int64_t kReduceUnroll = 8;

// The stages the schedule names: dw (the depthwise reduction), act (what
// the 1x1 conv reads: dw or the last of the elementwise stages after it),
// pw (the 1x1 conv), out; every other computed stage is inlined.
struct DwPwPlan {
  std::vector<te::Tensor> stages;
  te::Tensor dw, act, pw, out;
};

bool plan_dwpw(const Task& task, DwPwPlan* p, std::string* why) {
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
  std::vector<te::Tensor> reductions;
  for (const te::Tensor& t : p->stages) {
    if (!static_shape(t.shape())) return no("a symbolic extent");
    if (compute_of(t)->is_reduction()) reductions.push_back(t);
  }
  if (reductions.size() != 2) return no("not two reductions");
  p->dw = reductions[0], p->pw = reductions[1];
  const te::ComputeOpNode* dw = compute_of(p->dw);
  const te::ComputeOpNode* pw = compute_of(p->pw);
  if (p->dw.ndim() != 5 || dw->reduce_axis.size() != 2) return no("the first reduction is no blocked depthwise conv");
  if (p->pw.ndim() != 5 || pw->reduce_axis.size() != 4 || extent(pw->reduce_axis[1]->dom.extent) != 1 || extent(pw->reduce_axis[2]->dom.extent) != 1)
    return no("the second reduction is no blocked 1x1 conv");
  // The 1x1 conv reads one computed tensor of the depthwise output's shape, at stride 1.
  for (const te::Tensor& t : pw->input_tensors())
    if (compute_of(t)) {
      if (p->act.defined() && !p->act.same_tensor(t)) return no("the 1x1 conv reads two computed tensors");
      p->act = t;
    }
  if (!p->act.defined()) return no("the 1x1 conv reads no computed tensor");
  for (int k = 0; k < 5; ++k)
    if (extent(p->act.shape()[k]) != extent(p->dw.shape()[k])) return no("the 1x1 conv's input is not the depthwise output's shape");
  if (extent(p->act.shape()[2]) != extent(p->pw.shape()[2]) || extent(p->act.shape()[3]) != extent(p->pw.shape()[3]))
    return no("the 1x1 conv is strided or padded");
  if (extent(pw->reduce_axis[0]->dom.extent) * extent(pw->reduce_axis[3]->dom.extent) != extent(p->act.shape()[1]) * extent(p->act.shape()[4]))
    return no("the 1x1 conv does not reduce over all the depthwise output's channels");
  if (p->out.ndim() != 5) return no("the output is not blocked");
  for (int k = 0; k < 5; ++k)
    if (extent(p->out.shape()[k]) != extent(p->pw.shape()[k])) return no("the output's shape differs from the 1x1 conv's");
  return true;
}

te::Schedule apply_dwpw(const Task& task, const DwPwPlan& p) {
  te::Schedule sch = task.fresh_schedule();
  for (const te::Tensor& t : p.stages)
    if (!t.same_tensor(p.dw) && !t.same_tensor(p.act) && !t.same_tensor(p.pw) && !t.same_tensor(p.out)) sch[t].compute_inline();
  te::Tensor acc = p.pw;
  if (p.out.same_tensor(p.pw)) acc = sch.cache_write(p.out, "local");
  const int64_t ow = extent(p.out.shape()[3]), kb = extent(p.out.shape()[4]);
  const int lanes = register_budget(task.target).lanes;
  const int xt = depthwise_pointwise_tile(task.target, ow, static_cast<int>((kb + lanes - 1) / lanes));

  // Output: tiles of xt pixels of a row in parallel, per tile every output block
  // (xt pixels x one block). The depthwise stage per tile (all channels x xt
  // pixels, a few KB) stays in L1 beside the 1x1 conv's weights; per whole row
  // (144 channels x 56 pixels: 32 KB, + 14 KB of weights) it did not: fused /
  // unfused 0.89 against 0.78 for MobileNetV2's 24->24 56x56 block at 1 thread
  // (2-core Xeon, AVX-512, 48 KB L1), and it lost to the unfused pair at 2 threads.
  te::Stage& so = sch[p.out];
  std::vector<IterVar> ax = so.leaf_iter_vars();  // n, ko, y, x, ki
  auto [xo, xi] = so.split(ax[3], xt);
  so.reorder({ax[0], ax[2], xo, ax[1], xi, ax[4]});
  IterVar tile = so.fuse({ax[0], ax[2], xo});
  so.parallel(tile);
  so.vectorize(ax[4]);

  // The 1x1 conv's register tile at each tile of the output: all channels summed, pixels and a few channel steps unrolled.
  te::Stage& sa = sch[acc];
  sa.compute_at(so, ax[1]);
  std::vector<IterVar> aa = sa.leaf_iter_vars();  // n, ko, y, x, ki, rco, ry, rx, rci
  const int64_t cb = extent(p.act.shape()[4]);
  auto [rci_o, rci_i] = sa.split(aa[8], static_cast<int>(std::gcd<int64_t>(cb, kReduceUnroll)));
  sa.reorder({aa[0], aa[1], aa[2], aa[5], aa[6], aa[7], rci_o, rci_i, aa[3], aa[4]});
  sa.unroll(rci_i);
  sa.unroll(aa[3]);
  sa.vectorize(aa[4]);

  // The depthwise tile (all channels) once per output tile, in L1 until the 1x1 conv has read it.
  te::Stage& st = sch[p.act];
  st.compute_at(so, tile);
  std::vector<IterVar> ta = st.leaf_iter_vars();  // n, c, y, x, ci (+ ry, rx when act is dw)
  // Per tap the tile's accumulators take the tap's weight vectors and one input vector at a time beside them.
  const int dv = static_cast<int>((cb + lanes - 1) / lanes);
  const int dt = pick_conv_tile_width(xt, std::max(1, (register_budget(task.target).registers - 1 - 2 * dv) / dv));
  auto [txo, txi] = st.split(ta[3], dt);
  // A tile of dt pixels x one block summed over the taps in registers: dt independent
  // accumulators (one pixel at a time chains its taps' multiply-adds on one register).
  auto tap_tile = [](te::Stage& s, const IterVar& ry, const IterVar& rx, const IterVar& x, const IterVar& ci, std::vector<IterVar> order) {
    order.insert(order.end(), {ry, rx, x, ci});
    s.reorder(order);
    s.unroll(ry);
    s.unroll(rx);
    s.unroll(x);
    s.vectorize(ci);
  };
  if (p.act.same_tensor(p.dw)) {
    tap_tile(st, ta[5], ta[6], txi, ta[4], {ta[0], ta[1], ta[2], txo});
  } else {
    st.vectorize(ta[4]);
    te::Stage& sd = sch[p.dw];
    sd.compute_at(st, txo);
    std::vector<IterVar> da = sd.leaf_iter_vars();  // n, co, y, x, ci, ry, rx
    tap_tile(sd, da[5], da[6], da[3], da[4], {da[0], da[1], da[2]});
  }
  return sch;
}

}  // namespace

int depthwise_pointwise_tile(const Target& target, int64_t ow, int vectors) {
  RegisterBudget b = register_budget(target);
  // One register spare beside the tile, as cpu_conv2d's (LLVM loads the next weight vector early).
  return pick_conv_tile_width(static_cast<int>(ow), max_tile_rows(b.registers - 1, vectors));
}

std::optional<te::Schedule> depthwise_pointwise_schedule(const Task& task, std::string* why) {
  DwPwPlan plan;
  if (!plan_dwpw(task, &plan, why)) return std::nullopt;
  try {
    te::Schedule sch = apply_dwpw(task, plan);
    te::LowerOptions options;
    options.expand_loops = false;
    te::lower(sch, task.args, "dwpw_check", options);  // a form lowering refuses falls back to the rules
    return sch;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return std::nullopt;
  }
}

}  // namespace kiln::ops
