// The AMX schedule of an int8 / bfloat16 matmul (cpu_amx.h).
#include "kiln/ops/cpu_amx.h"

#include <functional>
#include <tuple>
#include <unordered_set>

#include "kiln/ir/functor.h"
#include "kiln/pass/amx.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"
#include "kiln/te/operation.h"

#include "hand_schedule_util.h"

namespace kiln::ops {

namespace {

using detail::compute_of;
using detail::static_shape;

// The dot a reduction sums (sum over its axes of dot_i8x4 / dot_bf16x2 of two loads), else null.
const Call* summed_dot(const te::ComputeOpNode* op) {
  if (!op || op->reduce_axis.empty()) return nullptr;
  const Reduce* r = op->body.as<Reduce>();
  const Call* c = r && r->reduce_kind == ReduceKind::Sum && is_one(r->condition) ? r->source.as<Call>() : nullptr;
  if (!c || (c->op != Intrinsic::DotI8x4 && c->op != Intrinsic::DotBF16x2)) return nullptr;
  return c->args[0].as<TensorLoad>() && c->args[1].as<TensorLoad>() ? c : nullptr;
}

// The largest divisor of n up to `most`.
int64_t divisor_up_to(int64_t n, int64_t most) {
  for (int64_t d = std::min(n, most); d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

std::optional<te::Schedule> no(std::string* why, const std::string& reason) {
  if (why) *why = reason;
  return std::nullopt;
}

}  // namespace

bool target_has_amx(const Target& target, const std::string& dot) {
  bool x86 = target.triple.rfind("x86_64", 0) == 0 || target.triple.empty();  // tile instructions are 64-bit only
  return target.kind == Target::Kind::LLVM && x86 && target.has_feature("amx-tile") && target.has_feature(dot == "bf16" ? "amx-bf16" : "amx-int8");
}

namespace {

// What amx_schedule found: the stages, the product (dot) and its operands (d), and the blocks.
struct AmxPlan {
  std::vector<te::Tensor> stages;
  te::Tensor out, dot;
  const Call* d = nullptr;
  int r = 0, row = 0;
  int64_t mt = 0, nt = 0, R = 1;
};

bool plan_amx(const Task& task, AmxPlan* plan, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (task.outputs.size() != 1) return no("the task has several outputs");
  // Every computed stage: one reduction of a dot (D), the rest elementwise.
  std::vector<te::Tensor> stages;
  std::unordered_set<const te::OperationNode*> seen;
  std::function<void(const te::Tensor&)> walk = [&](const te::Tensor& t) {
    if (!compute_of(t) || !seen.insert(t.op().get()).second) return;
    for (const te::Tensor& i : compute_of(t)->input_tensors()) walk(i);
    stages.push_back(t);
  };
  walk(task.outputs[0]);
  te::Tensor out = task.outputs[0], dot;
  for (const te::Tensor& t : stages) {
    if (compute_of(t)->reduce_axis.empty()) continue;
    if (dot.defined() || !summed_dot(compute_of(t))) return no("a reduction other than one sum of dot_i8x4 / dot_bf16x2");
    dot = t;
  }
  if (!dot.defined()) return no("no sum of dot_i8x4 / dot_bf16x2");
  const Call* d = summed_dot(compute_of(dot));
  if (!target_has_amx(task.target, d->op == Intrinsic::DotBF16x2 ? "bf16" : "i8")) return no("the target has no AMX for this dot");
  const te::ComputeOpNode* dop = compute_of(dot);
  if (!static_shape(dot.shape()) || !static_shape(out.shape()) || dot.ndim() < 2 || out.ndim() != dot.ndim()) return no("symbolic or mismatched shapes");
  for (size_t k = 0; k < dot.shape().size(); ++k)
    if (*as_const_int(dot.shape()[k]) != *as_const_int(out.shape()[k])) return no("the output's shape differs from the product's");
  // The innermost reduce axis is the tiles' K: up to 16 words, or a multiple of 16.
  const int64_t* q = as_const_int(dop->reduce_axis.back().dom().extent);
  if (!q || (*q > 16 && *q % 16 != 0)) return no("the packed K is not a multiple of 16 words (64 int8 / 32 bfloat16 values)");
  const int r = dot.ndim();
  // The rows: the last axis before the columns with more than one ([seq, 1, N] takes seq).
  int row = r - 2;
  while (row > 0 && *as_const_int(dot.shape()[row]) == 1) --row;
  const int64_t M = *as_const_int(dot.shape()[row]), N = *as_const_int(dot.shape()[r - 1]);
  // The column block: within one panel of B where B is in panels.
  int64_t nt = divisor_up_to(N, 32);
  const TensorLoad* bl = d->args[1].as<TensorLoad>();
  const std::vector<Expr>& bshape = static_cast<const te::TensorNode*>(bl->producer.get())->op->shape;
  // Panels [N/nb, q, nb] (matmul_packed_b) rather than a batch [.., q, N].
  if (bshape.size() == 3 && !is_const_int(bshape[2], N)) {
    const int64_t* nb = as_const_int(bshape[2]);
    const int64_t* panels = as_const_int(bshape[0]);
    if (!nb || !panels || *nb * *panels != N) return no("B is neither [.., q, N] nor panels [N/nb, q, nb]");
    if (*nb > 32) return no("B's panels are wider than 32 columns");
    nt = *nb;
  }
  const int64_t mt = divisor_up_to(M, 32);
  if (mt < 4 || nt < 4) return no("rows or columns have no divisor from 4 to 32");
  // Row blocks per call (one tile configuration, R loads and stores of C):
  // up to 128 rows, keeping 8 or more blocks for the parallel loop.
  int64_t others = N / nt;
  for (int k = 0; k + 1 < r; ++k)
    if (k != row) others *= *as_const_int(dot.shape()[k]);
  int64_t R = 1;
  for (int64_t c = 1; c * mt <= std::min<int64_t>(M, 128); ++c)
    if ((M / mt) % c == 0 && (M / mt / c) * others >= 8) R = c;
  *plan = AmxPlan{stages, out, dot, d, r, row, mt, nt, R};
  return true;
}

// The schedule of a plan: blocks in one parallel loop, each block's accumulator in a nest marked amx.
te::Schedule apply_amx(const Task& task, const AmxPlan& p) {
  const std::vector<te::Tensor>& stages = p.stages;
  const te::Tensor &out = p.out, &dot = p.dot;
  const Call* d = p.d;
  const int r = p.r, row = p.row;
  const int64_t mt = p.mt, nt = p.nt, R = p.R;
  te::Schedule sch = task.fresh_schedule();
  te::Tensor acc = dot;
  if (out.same_tensor(dot)) acc = sch.cache_write(out, "local");
  for (const te::Tensor& t : stages) {
    if (t.same_tensor(dot) || t.same_tensor(out)) continue;
    bool operand = false;
    for (int k = 0; k < 2; ++k) operand = operand || static_cast<const te::TensorNode*>(d->args[k].as<TensorLoad>()->producer.get())->op.get() == t.op().get();
    // An operand computed in the group (packing) is stored whole first; the rest are inlined.
    if (operand) {
      te::Stage& s = sch[t];
      s.compute_root();
      s.parallel(s.leaf_iter_vars()[0]);
    } else {
      sch[t].compute_inline();
    }
  }
  te::Stage& so = sch[out];
  std::vector<IterVar> ax = so.leaf_iter_vars();
  auto [io, ii] = so.split(ax[row], static_cast<int>(mt * R));
  auto [jo, ji] = so.split(ax[r - 1], static_cast<int>(nt));
  std::vector<IterVar> outer;
  for (int k = 0; k + 1 < r; ++k) outer.push_back(k == row ? io : ax[k]);
  outer.push_back(jo);
  std::vector<IterVar> order = outer;
  order.push_back(ii);
  order.push_back(ji);
  so.reorder(order);
  IterVar block = outer.size() == 1 ? outer[0] : so.fuse(outer);
  so.parallel(block);
  if (nt % 16 == 0) so.vectorize(so.split(ji, 16).second);
  else if (nt % 8 == 0) so.vectorize(so.split(ji, 8).second);
  te::Stage& sa = sch[acc];
  sa.compute_at(so, block);
  // The accumulator's loops: the unit ones first, then the row blocks (R),
  // the reduction (a convolution's channel blocks and taps, then k), then
  // m, n: the nest marked amx.
  std::vector<IterVar> aa = sa.leaf_iter_vars(), a_order;
  IterVar m_in = aa[row], m_blocks;
  if (R > 1) std::tie(m_blocks, m_in) = sa.split(aa[row], static_cast<int>(mt));
  for (int i = 0; i + 1 < r; ++i)
    if (i != row) a_order.push_back(aa[i]);
  if (R > 1) a_order.push_back(m_blocks);
  a_order.insert(a_order.end(), aa.begin() + r, aa.end());
  a_order.insert(a_order.end(), {m_in, aa[r - 1]});
  sa.reorder(a_order);
  sa.pragma(R > 1 ? m_blocks : aa[r], "amx", 1);
  return sch;
}

// The backend reads the marked nest (kiln/pass/amx.h); a form it cannot
// take (an operand not contiguous along k or n) falls back here instead of
// failing the build. Empty when the lowered nest reads as one.
std::string check_lowered(const Task& task, const te::Schedule& sch) {
  te::LowerOptions options;
  options.expand_loops = false;
  try {
    PrimFunc f = te::lower(sch, task.args, "amx_check", options);
    int marked = 0;
    post_order_visit(f.body(), [](const Expr&) {}, [&](const Stmt& st) {
      if (const AttrStmt* a = st.as<AttrStmt>(); a && a->key == pass::kAmxPragma) {
        pass::read_amx_block(a);
        ++marked;
      }
    });
    if (marked == 0) return "the lowered nest kept no amx mark";
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

std::optional<te::Schedule> amx_schedule(const Task& task, std::string* why) {
  AmxPlan plan;
  if (!plan_amx(task, &plan, why)) return std::nullopt;
  te::Schedule sch = apply_amx(task, plan);
  std::string problem = check_lowered(task, sch);
  if (!problem.empty()) return no(why, problem);
  return sch;
}

}  // namespace kiln::ops
