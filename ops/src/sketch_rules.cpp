// The sketch rules (in the manner of Ansor, for the CPU): which stages are
// inlined, tiled, fused or factored, and which decisions each sketch leaves
// open. See tuner/README.md for the rules in prose.
#include <algorithm>
#include <functional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/structural.h"
#include "kiln/ops/tile_padding.h"
#include "kiln/support/error.h"
#include "search_space_internal.h"

namespace kiln::ops::detail {

int64_t StageInfo::spatial_size() const {
  int64_t n = 1;
  for (int64_t e : spatial) n *= e;
  return n;
}

int64_t StageInfo::reduce_size() const {
  int64_t n = 1;
  for (int64_t e : reduce) n *= e;
  return n;
}

const char* plan_kind_name(PlanKind k) {
  switch (k) {
    case PlanKind::None: return "input";
    case PlanKind::Inline: return "inline";
    case PlanKind::Simple: return "simple";
    case PlanKind::Tiled: return "tiled";
    case PlanKind::TiledCache: return "tiled+cache_write";
    case PlanKind::TiledFused: return "tiled, at its consumer";
    case PlanKind::FusedConsumer: return "fused consumer";
    case PlanKind::Rfactor: return "rfactor";
    case PlanKind::RowReduce: return "row-wise";
    case PlanKind::GpuThreads: return "a thread per element";
    case PlanKind::GpuBlockReduce: return "a block per element, reduced across its threads";
    case PlanKind::GpuTiled: return "block/thread/register tiles, inputs in shared memory";
    case PlanKind::GpuTiledFused: return "block/thread/register tiles at its consumer, inputs in shared memory";
    case PlanKind::GpuRows: return "a block per row";
    case PlanKind::GpuRowReduce: return "reduced across the threads of its row's block";
    case PlanKind::GpuAtThread: return "computed per thread";
    case PlanKind::GpuTensorCore: return "warps of 16x16 fragments on tensor cores, inputs in shared memory";
  }
  return "?";
}

namespace {

int64_t const_extent(const Task& task, const Expr& e, const std::string& what) {
  const int64_t* v = as_const_int(e);
  KILN_USER_CHECK(!v || *v > 0) << "search space: " << what << " has extent " << *v << "; extents must be positive";
  return v ? *v : hinted_extent(e, task.size_hints);
}

// Reuse (Ansor's condition for multi-level tiling): some read leaves out a
// spatial axis, so one input element feeds several output elements. Axes of
// extent 1 do not count: leaving them out reuses nothing.
bool has_data_reuse(const StageInfo& s) {
  bool reuse = false;
  post_order_visit(s.body, [&](const Expr& e) {
    const TensorLoad* t = e.as<TensorLoad>();
    if (!t) return;
    for (size_t d = 0; d < s.op->axis.size(); ++d) {
      if (s.spatial[d] <= 1) continue;
      const Variable* ax = s.op->axis[d].var().get();
      bool found = false;
      for (const Expr& idx : t->indices) found = found || uses_var(idx, [&](const Variable* v) { return v == ax; });
      reuse = reuse || !found;
    }
  });
  return reuse;
}

// An operand whose packed dimension is its last and holds at most two
// vectors (conv2d_nchwc's weights) is laid out as panels already: each
// reduce step's vectors are adjacent to the previous step's, so a pack would
// only copy it.
bool already_panels(const StageInfo& operand, int dim, int lanes) {
  const te::Tensor& t = operand.tensor;
  const int64_t* e = as_const_int(t.shape()[dim]);
  return e && *e <= 2 * lanes && dim + 1 == t.ndim();
}

// Rule 1's exception: an inlined stage with a condition in its body
// (padding) that this reuse stage reads gets the choice to be stored.
void mark_materializable(DagInfo& dag, const std::unordered_map<const te::OperationNode*, int>& index, const StageInfo& s) {
  post_order_visit(s.op->body, [&](const Expr& e) {
    const TensorLoad* t = e.as<TensorLoad>();
    if (!t) return;
    StageInfo& p = dag.stages[index.at(static_cast<const te::TensorNode*>(t->producer.get())->op.get())];
    if (!p.inlined) return;
    int reader = index.at(s.op);
    if (std::find(p.pad_readers.begin(), p.pad_readers.end(), reader) == p.pad_readers.end()) p.pad_readers.push_back(reader);
    if (p.may_materialize) return;
    bool conditional = false;
    post_order_visit(p.op->body, [&](const Expr& x) {
      const Call* c = x.as<Call>();
      conditional = conditional || x.as<Select>() || (c && c->op == Intrinsic::IfThenElse);
    });
    p.may_materialize = conditional;
  });
}

// The pack rule's operand: an input whose every read has the innermost
// spatial axis (the vectorized one) as one index, a plain variable no other
// index uses, while another index follows a reduce axis -- B of a matmul or
// batch matmul, B[k, j], or B transposed, B[j, k]. Along the reduction the
// first jumps a whole row, so the register tile's vectors come from a new
// cache line (and, for a wide row, a new page) at every step; the second
// gathers each vector from as many rows as it has lanes. The packed copy
// [N/f, ..., K, f] makes them contiguous. Inputs only: a computed operand
// would need its own schedule to follow the copy. Sets s.pack_operand and
// s.pack_dim (the index the innermost axis is).
void find_pack_operand(const DagInfo& dag, const std::unordered_map<const te::OperationNode*, int>& index, StageInfo& s) {
  size_t n = s.spatial.size();
  if (n == 0 || s.pack_widths.empty()) return;
  const Variable* inner = s.op->axis[n - 1].var().get();
  auto is_reduce = [&](const Variable* v) {
    for (const IterVar& r : s.op->reduce_axis)
      if (r.var().get() == v) return true;
    return false;
  };
  std::unordered_map<int, std::pair<int, bool>> seen;  // stage -> (dimension, every read qualifies)
  std::vector<int> order;
  post_order_visit(s.op->body, [&](const Expr& e) {
    const TensorLoad* t = e.as<TensorLoad>();
    if (!t) return;
    int p = index.at(static_cast<const te::TensorNode*>(t->producer.get())->op.get());
    int dim = -1;
    bool ok = dag.stages[p].op == nullptr && t->indices.size() >= 2, strided = false;
    for (size_t k = 0; ok && k < t->indices.size(); ++k) {
      if (dim < 0 && t->indices[k].as<Variable>() == inner) {
        dim = static_cast<int>(k);
        continue;
      }
      ok = !uses_var(t->indices[k], [&](const Variable* v) { return v == inner; });
      strided = strided || uses_var(t->indices[k], is_reduce);
    }
    auto [it, fresh] = seen.try_emplace(p, dim, true);
    if (fresh) order.push_back(p);
    it->second.second = it->second.second && ok && strided && dim >= 0 && dim == it->second.first;
  });
  auto constant_shape = [&](int p) {
    for (const Expr& e : dag.stages[p].tensor.shape())
      if (is_symbolic_extent(e)) return false;
    return true;
  };
  for (int p : order)
    if (seen[p].second && constant_shape(p) && !already_panels(dag.stages[p], seen[p].first, dag.lanes)) {
      s.pack_operand = p;
      s.pack_dim = seen[p].first;
      return;
    }
}

// The transposed-A operand: an input whose every read has the row axis
// (the spatial axis just outside the vectorized one) as its last index, a
// plain variable no other index uses, another index following a reduce
// axis, and no index using the vectorized axis -- A^T[k, i] of a weight
// gradient's Gemm (transA). The register tile broadcasts the row tile's
// elements of A at each reduce step: here a few floats of a new row each
// step, a new cache line (and, for a wide row, a new page) where A read by
// rows streams along them. Packed into panels [M/r, K, r] by the row tile r
// they are one contiguous stream. Inputs only, as find_pack_operand.
void find_transposed_a(const DagInfo& dag, const std::unordered_map<const te::OperationNode*, int>& index, StageInfo& s) {
  size_t n = s.spatial.size();
  if (n < 2 || s.reduce.size() != 1) return;
  const Variable* inner = s.op->axis[n - 1].var().get();
  const Variable* row = s.op->axis[n - 2].var().get();
  const Variable* red = s.op->reduce_axis[0].var().get();
  std::unordered_map<int, bool> ok_of;
  std::vector<int> order;
  post_order_visit(s.op->body, [&](const Expr& e) {
    const TensorLoad* t = e.as<TensorLoad>();
    if (!t) return;
    int p = index.at(static_cast<const te::TensorNode*>(t->producer.get())->op.get());
    size_t m = t->indices.size();
    bool ok = dag.stages[p].op == nullptr && m >= 2 && t->indices[m - 1].as<Variable>() == row, follows_reduce = false;
    for (size_t k = 0; ok && k + 1 < m; ++k) {
      ok = !uses_var(t->indices[k], [&](const Variable* v) { return v == row || v == inner; });
      follows_reduce = follows_reduce || uses_var(t->indices[k], [&](const Variable* v) { return v == red; });
    }
    auto [it, fresh] = ok_of.try_emplace(p, true);
    if (fresh) order.push_back(p);
    it->second = it->second && ok && follows_reduce;
  });
  for (int p : order) {
    if (!ok_of[p] || p == s.pack_operand) continue;
    bool constant = true;
    for (const Expr& e : dag.stages[p].tensor.shape()) constant = constant && !is_symbolic_extent(e);
    if (!constant) continue;
    s.pack_a_operand = p;
    s.pack_a_dim = dag.stages[p].tensor.ndim() - 1;
    s.pack_a_axis = static_cast<int>(n - 2);
    return;
  }
}

// Counts a variable's uses in an expression, those inside the condition of a
// select (Select or if_then_else) and those in the index of a read, and
// collects the m of the tests (v mod m) == constant in conditions.
class ConditionUses : public IRVisitor {
 public:
  explicit ConditionUses(const Variable* v) : v_(v) {}
  int all = 0, in_conditions = 0, in_load_indices = 0;
  std::vector<int64_t> moduli_in_conditions;

 protected:
  void visit(const Variable* op) override {
    if (op != v_) return;
    ++all;
    if (condition_depth_ > 0) ++in_conditions;
    if (load_depth_ > 0) ++in_load_indices;
  }
  void visit(const EQ* op) override {
    if (condition_depth_ > 0) {
      for (const auto& [x, y] : {std::make_pair(op->a, op->b), std::make_pair(op->b, op->a)}) {
        const FloorMod* mod = x.as<FloorMod>();
        const IntImm* m = mod ? mod->b.as<IntImm>() : nullptr;
        if (mod && m && m->value > 1 && mod->a.as<Variable>() == v_ && y.as<IntImm>()) moduli_in_conditions.push_back(m->value);
      }
    }
    IRVisitor::visit(op);
  }
  void visit(const Select* op) override {
    condition(op->condition);
    visit_expr(op->true_value);
    visit_expr(op->false_value);
  }
  void visit(const Call* op) override {
    if (op->op != Intrinsic::IfThenElse || op->args.size() != 3) return IRVisitor::visit(op);
    condition(op->args[0]);
    visit_expr(op->args[1]);
    visit_expr(op->args[2]);
  }
  void visit(const TensorLoad* op) override {
    ++load_depth_;
    IRVisitor::visit(op);
    --load_depth_;
  }

 private:
  void condition(const Expr& c) {
    ++condition_depth_;
    visit_expr(c);
    --condition_depth_;
  }
  const Variable* v_;
  int condition_depth_ = 0, load_depth_ = 0;
};

// StageInfo::inner_parts of an elementwise stage. Two kinds of output axis
// (not the innermost) pick, by constant tables, which inputs of one
// neighbourhood an element reads:
// - an axis used only in the conditions of selects, and among them in the
//   index of a read (a Winograd input transform's tile element e: its 16
//   reads are rows of B^T chosen by e);
// - an axis whose value modulo m such conditions compare with constants, its
//   extent a multiple of m (a Winograd output transform's row y: y mod m
//   picks the row of A^T, y / m the tile).
// Outermost, every value of such an axis streams the whole input again (36
// times for F(4x4, 3x3)'s e); run inside the others and unrolled, its selects
// fold to constants and its iterations share one tile's loads from L1. At
// most kMaxInnerPart values: the unrolled body grows with it.
constexpr int64_t kMaxInnerPart = 64;
std::vector<int64_t> find_inner_parts(const StageInfo& s) {
  std::vector<int64_t> out;
  if (!s.op || s.reduction) return out;
  for (size_t k = 0; k + 1 < s.spatial.size(); ++k) {
    if (s.spatial_var[k]) continue;  // a part must divide the extent
    ConditionUses uses(s.op->axis[k].var().get());
    uses.visit_expr(s.body);
    int64_t part = 1;
    if (uses.all > 0 && uses.in_conditions == uses.all && uses.in_load_indices > 0) {
      part = s.spatial[k];
    } else if (!uses.moduli_in_conditions.empty()) {
      int64_t m = uses.moduli_in_conditions.front();
      bool one_modulus = std::all_of(uses.moduli_in_conditions.begin(), uses.moduli_in_conditions.end(), [&](int64_t c) { return c == m; });
      if (one_modulus && s.spatial[k] % m == 0) part = m;
    }
    if (part < 2 || part > kMaxInnerPart) continue;
    out.resize(s.spatial.size(), 1);
    out[k] = part;
  }
  return out;
}

}  // namespace

DagInfo analyze_dag(const Task& task) {
  DagInfo dag;
  dag.lanes = std::max(1, task.target.natural_lanes(DataType::Float(32)));
  dag.registers = std::max(8, task.target.num_vector_registers());
  dag.fma_memory_operand = task.target.triple.rfind("x86_64", 0) == 0 || task.target.triple.rfind("i686", 0) == 0;
  dag.cores = task.target.num_cores > 0 ? task.target.num_cores : std::max(1u, std::thread::hardware_concurrency());
  std::vector<te::Operation> ops = te::topo_sort(task.outputs);
  std::unordered_map<const te::OperationNode*, int> index;
  for (size_t i = 0; i < ops.size(); ++i) index[ops[i].get()] = static_cast<int>(i);
  dag.stages.resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    StageInfo& s = dag.stages[i];
    s.tensor = ops[i].output();
    s.name = ops[i]->name;
    for (const te::Tensor& t : task.outputs) s.output = s.output || t.op().same_as(ops[i]);
    if (ops[i]->kind != te::OpKind::Compute) continue;
    s.op = static_cast<const te::ComputeOpNode*>(ops[i].get());
    s.reduction = s.op->is_reduction();
    s.inlined = !s.output && !s.reduction;
    for (size_t d = 0; d < s.op->axis.size(); ++d) {
      s.spatial.push_back(const_extent(task, s.op->shape[d], "dimension " + std::to_string(d) + " of '" + s.name + "'"));
      s.spatial_var.push_back(is_symbolic_extent(s.op->shape[d]));
    }
    for (const IterVar& r : s.op->reduce_axis) {
      KILN_USER_CHECK(is_zero(r.dom().min)) << "search space: reduce axis '" << r.name() << "' of '" << s.name << "' must start at 0";
      s.reduce.push_back(const_extent(task, r.dom().extent, "reduce axis '" + r.name() + "' of '" + s.name + "'"));
      s.reduce_var.push_back(is_symbolic_extent(r.dom().extent));
    }
    // Substitute inlined producers (already expanded: producers come first).
    s.body = te::replace_tensor_reads(s.op->body, [&](const te::TensorNode* t, const std::vector<Expr>& idx) -> Expr {
      const StageInfo& p = dag.stages[index.at(t->op.get())];
      if (!p.inlined) return Expr();
      return substitute(p.body, [&](const Variable* v) -> Expr {
        for (size_t d = 0; d < p.op->axis.size(); ++d)
          if (p.op->axis[d].var().get() == v) return idx[d];
        return Expr();
      });
    });
    post_order_visit(s.body, [&](const Expr& e) {
      const TensorLoad* t = e.as<TensorLoad>();
      if (!t) return;
      int p = index.at(static_cast<const te::TensorNode*>(t->producer.get())->op.get());
      if (std::find(s.reads.begin(), s.reads.end(), p) == s.reads.end()) s.reads.push_back(p);
    });
    s.has_reuse = s.reduction && has_data_reuse(s);
    s.inner_parts = find_inner_parts(s);
    if (s.has_reuse && !s.spatial.empty()) s.pack_widths = panel_widths(s.spatial.back(), dag.lanes, dag.registers);
    if (s.has_reuse) find_pack_operand(dag, index, s);
    if (s.has_reuse && s.pack_operand >= 0) find_transposed_a(dag, index, s);
    if (s.has_reuse) mark_materializable(dag, index, s);
  }
  for (size_t i = 0; i < dag.stages.size(); ++i)
    if (!dag.stages[i].inlined)
      for (int p : dag.stages[i].reads) dag.stages[p].readers.push_back(static_cast<int>(i));
  return dag;
}

namespace {

// Whether index e is the linear index of the first `count` axes of o (a
// row-major ravel over o's extents), as ops::matmul_packed_b reads back the
// product it ran over its symbolic rows fused into one.
bool is_row_ravel(const Expr& e, const te::ComputeOpNode* o, size_t count) {
  if (count == 1) return e.same_as(o->axis[0].var());
  Expr r = o->axis[0].var();
  for (size_t d = 1; d < count; ++d) r = r * o->shape[d] + o->axis[d].var();
  return structural_equal(arith::simplify(e), arith::simplify(r));
}

}  // namespace

int consumer_row_axes(const DagInfo& dag, int c, int d) {
  const StageInfo& s = dag.stages[c];
  const StageInfo& o = dag.stages[d];
  if (!o.op || !s.op || o.spatial.size() < s.spatial.size() || s.spatial.empty()) return 0;
  size_t count = o.spatial.size() - s.spatial.size() + 1;
  // Same extents past the rows; the fused rows the product of the consumer's.
  for (size_t k = 1; k < s.spatial.size(); ++k)
    if (!structural_equal(s.op->shape[k], o.op->shape[k + count - 1])) return 0;
  if (count > 1) {
    Expr rows = o.op->shape[0];
    for (size_t k = 1; k < count; ++k) rows = rows * o.op->shape[k];
    if (!structural_equal(arith::simplify(rows), arith::simplify(s.op->shape[0]))) return 0;
  }
  bool exact = true;
  post_order_visit(o.body, [&](const Expr& e) {
    const TensorLoad* t = e.as<TensorLoad>();
    if (!t || static_cast<const te::TensorNode*>(t->producer.get())->op.get() != s.op) return;
    exact = exact && t->indices.size() == s.spatial.size() && is_row_ravel(t->indices[0], o.op, count);
    for (size_t k = 1; exact && k < t->indices.size(); ++k) exact = t->indices[k].same_as(o.op->axis[k + count - 1].var());
  });
  return exact ? static_cast<int>(count) : 0;
}

int fusible_consumer(const DagInfo& dag, int c) {
  const StageInfo& s = dag.stages[c];
  if (s.output || s.readers.size() != 1) return -1;
  int d = s.readers[0];
  const StageInfo& o = dag.stages[d];
  if (!o.output || o.reduction) return -1;
  return consumer_row_axes(dag, c, d) > 0 ? d : -1;
}

namespace {

// Rule 4's condition: too few output elements to fill the cores' vector
// lanes twice over, and a reduction long enough to split.
bool needs_rfactor(const DagInfo& dag, const StageInfo& s) {
  return s.reduction && s.spatial_size() < 2 * dag.cores * dag.lanes && s.reduce_size() >= 16 * dag.lanes;
}

// Enumerates the cartesian product of the per-stage options, producers first
// (a producer's rule 3 decides its consumer's plan).
class Enumerator {
 public:
  explicit Enumerator(const DagInfo& dag) : dag_(dag) {}

  std::vector<std::vector<StagePlan>> run() {
    std::vector<StagePlan> plans(dag_.stages.size());
    std::vector<bool> set(dag_.stages.size(), false);
    visit(0, plans, set);
    return std::move(out_);
  }

 private:
  void visit(size_t i, std::vector<StagePlan>& plans, std::vector<bool>& set) {
    if (out_.size() >= static_cast<size_t>(kMaxSketches)) return;
    if (i == plans.size()) {
      out_.push_back(plans);
      return;
    }
    if (set[i]) return visit(i + 1, plans, set);
    const StageInfo& s = dag_.stages[i];
    auto with = [&](PlanKind k, int consumer = -1, bool pack = false) {
      std::vector<StagePlan> p = plans;
      std::vector<bool> st = set;
      p[i].kind = k;
      p[i].consumer = consumer;
      p[i].pack = pack ? s.pack_operand : -1;
      if (consumer >= 0 && k == PlanKind::TiledFused) {
        p[consumer].kind = PlanKind::FusedConsumer;
        st[consumer] = true;
      }
      visit(i + 1, p, st);
    };
    if (!s.op) return with(PlanKind::None);
    if (s.inlined) {
      with(PlanKind::Inline);
      if (s.may_materialize) with(PlanKind::Simple);
      return;
    }
    if (s.has_reuse) {
      // The pack rule adds a packed variant of each tiling sketch.
      int d = fusible_consumer(dag_, static_cast<int>(i));
      std::vector<bool> packs = {false};
      if (s.pack_operand >= 0) packs.push_back(true);
      for (bool pack : packs) {
        if (d >= 0 && !set[d]) {
          with(PlanKind::TiledFused, d, pack);
        } else {
          with(PlanKind::TiledCache, -1, pack);
          with(PlanKind::Tiled, -1, pack);
        }
      }
    } else if (int row = rowwise_choice(i, plans); row != 0) {
      // Rule 7: as the first reduction of the same rows chose.
      if (row > 0) return with(PlanKind::RowReduce);
      with(PlanKind::Simple);
    } else {
      with(PlanKind::Simple);
      if (rowwise_target(dag_, static_cast<int>(i)) >= 0) with(PlanKind::RowReduce);
    }
    if (needs_rfactor(dag_, s)) with(PlanKind::Rfactor);
  }

  // Rule 7 is all or nothing per output: 1 (-1) when an earlier reduction
  // of the same output's rows is (is not) row-wise, 0 when i is the first.
  int rowwise_choice(size_t i, const std::vector<StagePlan>& plans) const {
    int t = rowwise_target(dag_, static_cast<int>(i));
    if (t < 0) return 0;
    for (size_t j = 0; j < i; ++j)
      if (rowwise_target(dag_, static_cast<int>(j)) == t) return plans[j].kind == PlanKind::RowReduce ? 1 : -1;
    return 0;
  }

  const DagInfo& dag_;
  std::vector<std::vector<StagePlan>> out_;
};

// The output a Simple stage may be computed at: every reader is that output
// (a Simple root stage) or another stage that may be computed at it. -1 if none.
std::vector<int> attach_targets(const DagInfo& dag, const std::vector<StagePlan>& plans) {
  std::vector<int> target(plans.size(), -1);
  for (size_t i = plans.size(); i-- > 0;) {
    const StageInfo& s = dag.stages[i];
    if (plans[i].kind != PlanKind::Simple || s.output || s.readers.empty()) continue;
    int t = -1;
    bool ok = true;
    for (int r : s.readers) {
      int cand = dag.stages[r].output && plans[r].kind == PlanKind::Simple ? r : target[r];
      ok = ok && cand >= 0 && (t < 0 || t == cand);
      t = cand;
    }
    target[i] = ok ? t : -1;
  }
  return target;
}

class Layout {
 public:
  explicit Layout(Sketch* sk) : sk_(sk) {}
  int tile(const std::string& label, int64_t extent, int levels, bool vector_pref = false, std::vector<int> inner_allowed = {}) {
    Slot s;
    s.kind = Slot::Kind::Tile;
    s.size = levels;
    s.extent = extent;
    s.vector_pref = vector_pref;
    s.inner_allowed = std::move(inner_allowed);
    s.label = label;
    return add(std::move(s));
  }
  int choice(const std::string& label, int choices) {
    Slot s;
    s.kind = Slot::Kind::Choice;
    s.choices = std::max(1, choices);
    s.label = label;
    return add(std::move(s));
  }

 private:
  int add(Slot s) {
    s.offset = sk_->num_decisions;
    sk_->num_decisions += s.size;
    sk_->slots.push_back(std::move(s));
    return static_cast<int>(sk_->slots.size()) - 1;
  }
  Sketch* sk_;
};

std::string axis_label(const StageInfo& s, size_t k, bool reduce) {
  const IterVar& iv = reduce ? s.op->reduce_axis[k] : s.op->axis[k];
  return s.name + "." + iv.name();
}

void lay_out(const DagInfo& dag, Sketch* sk) {
  Layout lay(sk);
  std::vector<int> targets = attach_targets(dag, sk->plans);
  for (size_t i = 0; i < sk->plans.size(); ++i)
    if (sk->plans[i].kind == PlanKind::RowReduce) {
      sk->plans[i].consumer = rowwise_target(dag, static_cast<int>(i));
      sk->plans[sk->plans[i].consumer].rows = true;
    }
  for (size_t i = 0; i < sk->plans.size(); ++i) {
    StagePlan& p = sk->plans[i];
    const StageInfo& s = dag.stages[i];
    size_t n = s.spatial.size();
    switch (p.kind) {
      case PlanKind::Simple:
        if (p.rows) {
          // Rule 7's output: a parallel (1) or serial (0) row loop.
          p.vector_tile = lay.tile(axis_label(s, n - 1, false), ops::padded_vector_extent(s.spatial[n - 1], dag.lanes), 2, true);
          p.parallel = lay.choice(s.name + ".parallel_rows", 2);
          p.unroll = lay.choice(s.name + ".unroll", kNumUnrollSteps);
          break;
        }
        if (n > 0) {
          // A symbolic innermost axis is tiled as its hint rounded up to whole vectors; the rest is a tail.
          int64_t inner = s.spatial_var[n - 1] ? ops::padded_vector_extent(s.spatial[n - 1], dag.lanes) : s.spatial[n - 1];
          p.vector_tile = lay.tile(axis_label(s, n - 1, false), inner, 2, !s.reduction);
          p.parallel = lay.choice(s.name + ".parallel", static_cast<int>(n));
        }
        p.consumer = targets[i];
        if (p.consumer >= 0) p.location = lay.choice(s.name + ".location", 2);
        p.unroll = lay.choice(s.name + ".unroll", kNumUnrollSteps);
        break;
      case PlanKind::Tiled:
      case PlanKind::TiledCache:
      case PlanKind::TiledFused:
        // With a pack, the last axis's innermost factor is the panel width.
        for (size_t k = 0; k < n; ++k) {
          bool last = k + 1 == n;
          p.spatial_tiles.push_back(lay.tile(axis_label(s, k, false), tile_extent(dag, s, k, last && p.pack >= 0), 4, last, last && p.pack >= 0 ? s.pack_widths : std::vector<int>{}));
          // The rows of the register tile: at most what fits beside the narrowest panel (fit_rows_to_registers narrows it to the sampled one).
          if (p.pack >= 0 && !last) sk->slots[p.spatial_tiles.back()].sample_max = max_tile_rows(dag.registers, (s.pack_widths.front() + dag.lanes - 1) / dag.lanes);
        }
        for (size_t k = 0; k < s.reduce.size(); ++k) p.reduce_tiles.push_back(lay.tile(axis_label(s, k, true), s.reduce[k], 2));
        p.parallel = lay.choice(s.name + ".parallel", static_cast<int>(2 * n));
        if (p.kind != PlanKind::Tiled) p.location = lay.choice(s.name + ".location", 2);
        if (n >= 2) p.panel_order = lay.choice(s.name + ".panel_outer", 2);
        p.unroll = lay.choice(s.name + ".unroll", kNumUnrollSteps);
        break;
      case PlanKind::Inline:
        // Rule 7: computed once per row into a row buffer instead of at each reader.
        for (size_t o = 0; o < sk->plans.size(); ++o)
          if (sk->plans[o].rows && row_storable(dag, sk->plans, static_cast<int>(i), static_cast<int>(o))) {
            p.consumer = static_cast<int>(o);
            p.location = lay.choice(s.name + ".stored_per_row", 2);
            p.vector_tile = lay.tile(axis_label(s, n - 1, false), ops::padded_vector_extent(s.spatial[n - 1], dag.lanes), 2, true);
            break;
          }
        break;
      // Rule 7's rows are vectorized over their padded extent (a softmax over 197 keys: whole vectors and a peeled rest).
      case PlanKind::RowReduce:
        p.vector_tile = lay.tile(axis_label(s, 0, true), ops::padded_vector_extent(s.reduce[0], dag.lanes), 2, true);
        p.unroll = lay.choice(s.name + ".unroll", kNumUnrollSteps);
        break;
      case PlanKind::Rfactor:
        p.rfactor_tile = lay.tile(s.name + ".rfactor", s.reduce_size(), 3, true);
        p.parallel = lay.choice(s.name + ".parallel", static_cast<int>(n + 1));
        p.unroll = lay.choice(s.name + ".unroll", kNumUnrollSteps);
        break;
      default:
        break;
    }
  }
}

std::string describe(const DagInfo& dag, const Sketch& sk) {
  std::ostringstream os;
  bool first = true;
  for (size_t i = 0; i < sk.plans.size(); ++i) {
    const StagePlan& p = sk.plans[i];
    if (p.kind == PlanKind::None) continue;
    os << (first ? "" : "; ") << dag.stages[i].name << ": " << plan_kind_name(p.kind);
    first = false;
    if (p.kind == PlanKind::TiledFused) os << " '" << dag.stages[p.consumer].name << "'";
    if (p.pack >= 0) os << ", pack '" << dag.stages[p.pack].name << "'";
    if (p.pack >= 0 && dag.stages[i].pack_a_operand >= 0) os << " and transposed '" << dag.stages[dag.stages[i].pack_a_operand].name << "' where the row tile divides it";
    if (p.kind == PlanKind::Inline && p.consumer >= 0) os << " (or stored per row of '" << dag.stages[p.consumer].name << "')";
    if (p.kind == PlanKind::RowReduce) os << " at the rows of '" << dag.stages[p.consumer].name << "'";
    if (p.kind == PlanKind::Simple && p.consumer >= 0) os << " (or at '" << dag.stages[p.consumer].name << "')";
  }
  os << " [" << sk.slots.size() << " decisions]";
  return os.str();
}

}  // namespace

std::vector<Sketch> generate_sketches(const DagInfo& dag) {
  std::vector<Sketch> sketches;
  for (std::vector<StagePlan>& plans : Enumerator(dag).run()) {
    Sketch sk;
    sk.plans = std::move(plans);
    lay_out(dag, &sk);
    sk.description = describe(dag, sk);
    sketches.push_back(std::move(sk));
  }
  KILN_CHECK(!sketches.empty()) << "no sketch generated";
  return sketches;
}

}  // namespace kiln::ops::detail
