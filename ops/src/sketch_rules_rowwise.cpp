// The row-wise reduction rule (softmax, layer norm): reductions over the last
// axis of an elementwise output's rows are computed inside the output's row
// loop, each vectorized along the row. The simple rule (rule 6) can only
// vectorize such a reduction across rows, which reads the input with a
// stride of one row per lane, and it runs each stage as its own parallel
// loop over all rows. Here one row's reductions and its output run back to
// back while the row is in L1, in one loop over rows that is parallel or
// serial (a decision: at 0.05 ms a fork-join may cost more than it saves).
//
// Each reduction is split k -> (ko, ki) and rfactor'd over ki: the factored
// stage keeps ki lanes of partial results and is vectorized along ki, the
// reduction then folds those lanes. See tuner/README.md (rule 7).
#include <algorithm>

#include "kiln/ir/functor.h"
#include "kiln/support/error.h"
#include "search_space_internal.h"

namespace kiln::ops::detail {

namespace {

// Every read of t in body is indexed exactly by `axes` in its first `rows`
// dimensions (so the reader's row r reads t's row r) and at 0 in the rest
// (t's trailing axes of extent 1: ONNX's ReduceMean with keepdims).
bool reads_rows_exactly(const Expr& body, const te::ComputeOpNode* t, const std::vector<IterVar>& axes, size_t rows) {
  bool exact = true;
  post_order_visit(body, [&](const Expr& e) {
    const TensorLoad* l = e.as<TensorLoad>();
    if (!l || static_cast<const te::TensorNode*>(l->producer.get())->op.get() != t) return;
    exact = exact && l->indices.size() == t->axis.size();
    for (size_t k = 0; exact && k < l->indices.size(); ++k) exact = k < rows ? l->indices[k].same_as(axes[k].var()) : is_zero(l->indices[k]);
  });
  return exact;
}

// The reduce variable appears in reads only as their last index, so the
// vector along it reads contiguous memory.
bool reduces_along_rows(const StageInfo& s) {
  const Variable* k = s.op->reduce_axis[0].var().get();
  bool ok = true, any = false;
  post_order_visit(s.body, [&](const Expr& e) {
    const TensorLoad* l = e.as<TensorLoad>();
    if (!l || l->indices.empty()) return;
    for (size_t d = 0; d + 1 < l->indices.size(); ++d) ok = ok && !uses_var(l->indices[d], [&](const Variable* v) { return v == k; });
    const Expr& last = l->indices.back();
    if (last.as<Variable>() == k) any = true;
    else ok = ok && !uses_var(last, [&](const Variable* v) { return v == k; });
  });
  return ok && any;
}

}  // namespace

int rowwise_target(const DagInfo& dag, int i) {
  const StageInfo& s = dag.stages[i];
  if (!s.op || !s.reduction || s.has_reuse || s.output || s.reduce.size() != 1 || s.spatial.empty() || s.readers.empty()) return -1;
  if (s.reduce[0] < 2 * dag.lanes || !reduces_along_rows(s)) return -1;
  // The row axes: the spatial ones before any trailing axes of extent 1.
  size_t rows = s.spatial.size();
  while (rows > 0 && s.spatial[rows - 1] == 1) --rows;
  if (rows == 0) return -1;
  int target = -1;
  for (int r : s.readers) {
    const StageInfo& reader = dag.stages[r];
    int t = reader.output ? r : rowwise_target(dag, r);
    if (t < 0 || (target >= 0 && t != target)) return -1;
    target = t;
    if (!reads_rows_exactly(reader.body, s.op, reader.op->axis, rows)) return -1;
  }
  const StageInfo& o = dag.stages[target];
  if (o.reduction || o.spatial.size() != rows + 1 || !std::equal(s.spatial.begin(), s.spatial.begin() + rows, o.spatial.begin())) return -1;
  return target;
}

namespace {
const int* tile_of(const Sketch& sk, const std::vector<int>& d, int slot) { return &d[sk.slots[slot].offset]; }
int choice_of(const Sketch& sk, const std::vector<int>& d, int slot) { return slot < 0 ? 0 : d[sk.slots[slot].offset]; }
}  // namespace

bool row_storable(const DagInfo& dag, const std::vector<StagePlan>& plans, int e, int o) {
  const StageInfo& s = dag.stages[e];
  if (!s.op || !s.inlined || s.reduction || s.spatial != dag.stages[o].spatial) return false;
  bool ok = true, reduced = false;
  for (size_t r = 0; r < dag.stages.size(); ++r) {
    const StageInfo& reader = dag.stages[r];
    if (!reader.op || static_cast<int>(r) == e) continue;
    bool reads = false;
    post_order_visit(reader.op->body, [&](const Expr& x) {
      const TensorLoad* l = x.as<TensorLoad>();
      reads = reads || (l && static_cast<const te::TensorNode*>(l->producer.get())->op.get() == s.op);
    });
    if (!reads) continue;
    bool row_reduce = plans[r].kind == PlanKind::RowReduce && plans[r].consumer == o;
    reduced = reduced || row_reduce;
    ok = ok && (static_cast<int>(r) == o || row_reduce);
  }
  return ok && reduced;
}

void apply_row_stage(const StageInfo& info, const Sketch& sk, const StagePlan& p, const std::vector<int>& d, te::Schedule& s, te::Stage& out, const IterVar& row) {
  te::Stage& st = s[info.tensor];
  st.compute_at(out, row);
  std::vector<IterVar> leaves = st.leaf_iter_vars();
  const int* f = tile_of(sk, d, p.vector_tile);
  auto [co, ci] = st.split(leaves.back(), f[1]);
  (void)co;
  if (f[1] >= 2 && f[1] <= kMaxVectorExtent) st.vectorize(ci);
}

IterVar apply_row_output(const StageInfo& info, const Sketch& sk, const StagePlan& p, const std::vector<int>& d, te::Schedule& s) {
  te::Stage& st = s[info.tensor];
  std::vector<IterVar> roots = st.leaf_iter_vars();
  size_t n = info.spatial.size();
  std::vector<IterVar> rows(roots.begin(), roots.begin() + static_cast<long>(n - 1));
  // Rows over a symbolic extent are not fused: inside a fused loop the
  // reductions' bounds would be divisions by the shape variable that bound
  // inference cannot pin to one row, so they would be sized and strided by
  // it. The outermost row loop is then the parallel one, the innermost the
  // one the reductions run at.
  bool var_rows = false;
  for (size_t k = 0; k + 1 < n; ++k) var_rows = var_rows || info.spatial_var[k];
  IterVar row = rows.size() == 1 ? rows[0] : var_rows ? rows.back() : st.fuse(rows);
  IterVar outer = var_rows ? rows.front() : row;
  const int* f = tile_of(sk, d, p.vector_tile);
  auto [co, ci] = st.split(roots[n - 1], f[1]);
  if (choice_of(sk, d, p.parallel) == 1) st.parallel(outer);
  if (f[1] >= 2 && f[1] <= kMaxVectorExtent) st.vectorize(ci);
  int step = kUnrollSteps[choice_of(sk, d, p.unroll)];
  if (step > 0) st.pragma(outer, "auto_unroll_max_step", step);
  if (step > 0 && f[0] > 1 && f[0] <= step && !info.spatial_var[n - 1]) st.unroll(co);
  return row;
}

namespace {

// The lanes a row reduction's last fold takes one at a time: at most this
// many. Wider, each halving is a vector step of its own (fold_halves).
constexpr int kSerialFoldLanes = 4;

// Splits the row reduction of info.tensor's current stage into `factor` lanes and
// rfactors them out: a stage of the lanes' partial results, its loops reordered to
// [spatial..., outer, lane] (returned in that order) and computed at the row.
std::pair<te::Tensor, std::vector<IterVar>> rfactor_lanes(const StageInfo& info, te::Schedule& s, te::Stage& out, const IterVar& row, int64_t factor) {
  te::Stage& st = s[info.tensor];
  auto [outer, lane] = st.split(st.leaf_iter_vars()[info.spatial.size()], factor);
  (void)outer;
  te::Tensor t = s.rfactor(info.tensor, lane, 0);
  te::Stage& rf = s[t];
  std::vector<IterVar> leaves = rf.leaf_iter_vars();  // [lane, spatial..., outer]
  std::vector<IterVar> order(leaves.begin() + 1, leaves.end());
  order.push_back(leaves[0]);
  rf.reorder(order);
  rf.compute_at(out, row);
  return {t, order};
}

// Folds the `lanes` partial results of a factored row reduction in halves,
// each half a vector operation (another rfactor of the fold, vectorized),
// until kSerialFoldLanes are left for the serial fold; returns that count.
// Serially, the fold is a chain of dependent scalar steps, one per lane:
// for a softmax over 128 keys at 32 lanes, its max's and sum's chains
// took more time than the row's exponentials. Softmax over 12 x 128 x 128
// (12 x 197 x 197) on one core, Xeon AVX-512: 0.22 ms (0.38-0.60) against
// 0.34 (0.79) folded serially.
int fold_halves(const StageInfo& info, te::Schedule& s, te::Stage& out, const IterVar& row, int lanes) {
  while (lanes > kSerialFoldLanes && lanes % 2 == 0) {
    auto [half, order] = rfactor_lanes(info, s, out, row, lanes / 2);
    te::Stage& hs = s[half];
    hs.vectorize(order.back());
    hs.unroll(order[order.size() - 2]);
    lanes /= 2;
  }
  return lanes;
}

}  // namespace

void apply_row_reduce(const StageInfo& info, const Sketch& sk, const StagePlan& p, const std::vector<int>& d, te::Schedule& s, te::Stage& out, const IterVar& row) {
  const int* f = tile_of(sk, d, p.vector_tile);
  int step = kUnrollSteps[choice_of(sk, d, p.unroll)];
  if (f[1] >= 2) {
    auto [rf_t, order] = rfactor_lanes(info, s, out, row, f[1]);
    te::Stage& rf = s[rf_t];
    if (f[1] <= kMaxVectorExtent) rf.vectorize(order.back());
    if (step > 0) rf.pragma(order[0], "auto_unroll_max_step", step);
  }
  int lanes = f[1] >= 2 ? static_cast<int>(f[1]) : 1;  // the partial results the fold reduces
  if (lanes > 1 && lanes <= kMaxVectorExtent) lanes = fold_halves(info, s, out, row, lanes);
  te::Stage& folded = s[info.tensor];  // reduces over the lanes (or the whole row when not factored)
  folded.compute_at(out, row);
  std::vector<IterVar> fl = folded.leaf_iter_vars();
  if (step > 0 && lanes >= 2 && lanes <= step) folded.unroll(fl.back());
}

}  // namespace kiln::ops::detail
