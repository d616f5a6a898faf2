// Bound inference: which region of each stage must be computed, and the
// ranges of every loop. Consumers are visited before producers, so when a
// stage is computed inside a consumer's loop, the consumer's loops are known
// and the region is what the consumer reads in one iteration of that loop.
#include <algorithm>
#include <unordered_map>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/support/error.h"
#include "iter_relations.h"
#include "lower_internal.h"

namespace kiln::te::detail {

using arith::Analyzer;
using arith::IntervalSet;

static const ComputeOpNode* as_compute(const Operation& op) {
  return op->kind == OpKind::Compute ? static_cast<const ComputeOpNode*>(op.get()) : nullptr;
}

void inline_stages(LowerState* st) {
  for (const auto& sp : st->sch.stages()) {
    const ComputeOpNode* c = as_compute(sp->op());
    if (!c) continue;
    // Producers come first, so their bodies are already inlined transitively.
    Expr body = replace_tensor_reads(c->body, [&](const TensorNode* t, const std::vector<Expr>& idx) -> Expr {
      const Stage* p = st->sch.state()->find(t->op.get());
      if (!p || p->attach_type() != AttachType::Inline) return Expr();
      const auto* pc = as_compute(p->op());
      const Expr& pbody = st->bodies.at(pc);
      return substitute(pbody, [&](const Variable* v) -> Expr {
        for (size_t d = 0; d < pc->axis.size(); ++d)
          if (pc->axis[d].var().get() == v) return idx[d];
        return Expr();
      });
    });
    st->bodies[c] = body;
    if (sp->attach_type() == AttachType::Inline) continue;
    post_order_visit(body, [&](const Expr& e) {
      const TensorLoad* t = e.as<TensorLoad>();
      if (!t) return;
      auto& rs = st->readers[static_cast<const TensorNode*>(t->producer.get())->op.get()];
      if (std::find(rs.begin(), rs.end(), sp.get()) == rs.end()) rs.push_back(sp.get());
    });
  }
}

std::vector<Expr> split_guards(const LowerState& st, const Stage& s) { return split_guards(s.relations(), s.leaf_iter_vars(), st.ranges, st.values); }

// The interval of each root variable of `consumer` while the loops inside
// the attach point run (all its loops when attach is undefined).
static std::unordered_map<const Variable*, IntervalSet> relaxed_roots(const LowerState& st, const Stage& consumer, const IterVar& attach, Analyzer* ana) {
  std::unordered_map<const Variable*, IntervalSet> leaf_dom;
  bool inside = !attach.defined();
  for (const IterVar& leaf : consumer.leaf_iter_vars()) {
    Range r = loop_range(st, leaf);
    if (inside) leaf_dom[leaf.var().get()] = IntervalSet::from_range(r);
    else ana->bind(leaf.var(), r);
    if (leaf.same_as(attach)) inside = true;
  }
  std::unordered_map<const Variable*, IntervalSet> roots;
  for (const IterVar& root : consumer.root_iter_vars()) {
    const Range& r = st.ranges.at(root.get());
    IntervalSet s = ana->eval_interval(st.values.at(root.get()), leaf_dom);
    // Guards keep the consumer inside its domain, so clamp to it.
    IntervalSet dom = IntervalSet::from_range(r);
    Expr lo = s.min.defined() ? ana->simplify(max(s.min, dom.min)) : dom.min;
    Expr hi = s.max.defined() ? ana->simplify(min(s.max, dom.max)) : dom.max;
    roots[root.var().get()] = {lo, hi};
  }
  return roots;
}

void bind_known_loops(const LowerState& st, Analyzer* ana) {
  for (const auto& sp : st.sch.stages())
    for (const IterVar& leaf : sp->leaf_iter_vars())
      if (st.ranges.count(leaf.get())) ana->bind(leaf.var(), loop_range(st, leaf));
}

// An index of a reader whose loops fuse axes, as an expression of its loops
// rather than of its axes: fused over [seq, batch], the axes of a tile of
// the fused loop each span their whole extent, while a read at the linear
// index x*batch + y is the fused loop itself (the simplifier undoes the
// division). Its interval where that is a constant width and the axes'
// interval `by_axes` is not, else by_axes.
static IntervalSet through_leaves(const LowerState& st, const Stage& reader, const IterVar& attach, Analyzer* ana, const Expr& index,
                                  const IntervalSet& by_axes) {
  auto constant_width = [&](const IntervalSet& s) { return s.min.defined() && s.max.defined() && as_const_int(ana->simplify(s.max - s.min)) != nullptr; };
  if (constant_width(by_axes)) return by_axes;
  std::unordered_map<const Variable*, IntervalSet> inner;
  bool inside = !attach.defined();
  for (const IterVar& leaf : reader.leaf_iter_vars()) {
    if (inside) inner[leaf.var().get()] = IntervalSet::from_range(loop_range(st, leaf));
    if (leaf.same_as(attach)) inside = true;
  }
  Expr via = ana->simplify(substitute(index, [&](const Variable* v) -> Expr {
    for (const IterVar& root : reader.root_iter_vars())
      if (root.var().get() == v) return st.values.at(root.get());
    return Expr();
  }));
  IntervalSet s = ana->eval_interval(via, inner);
  return constant_width(s) ? s : by_axes;
}

// Adds to `region` what `reader` reads of `producer` while its loops inside `attach` run.
// `outer` relaxes the result further: the loops of the parent that enclose a reader
// computed at a loop inside the producer's.
static void add_reads(LowerState* st, const Stage& producer, const Stage& reader, const IterVar& attach, std::vector<IntervalSet>* region,
                      std::vector<bool>* seen, const std::unordered_map<const Variable*, IntervalSet>& outer = {}) {
  Analyzer ana;
  bind_known_loops(*st, &ana);
  auto roots = relaxed_roots(*st, reader, attach, &ana);
  bool fused = false;
  for (const IterVarRelation& r : reader.relations()) fused = fused || r.kind == IterVarRelation::Kind::Fuse;
  post_order_visit(st->bodies.at(reader.op().get()), [&](const Expr& e) {
    const TensorLoad* t = e.as<TensorLoad>();
    if (!t || static_cast<const TensorNode*>(t->producer.get())->op.get() != producer.op().get()) return;
    for (size_t d = 0; d < region->size(); ++d) {
      IntervalSet s = ana.eval_interval(t->indices[d], roots);
      if (fused) s = through_leaves(*st, reader, attach, &ana, t->indices[d], s);
      if (!outer.empty()) {
        if (s.min.defined()) s.min = ana.eval_interval(s.min, outer).min;
        if (s.max.defined()) s.max = ana.eval_interval(s.max, outer).max;
      }
      (*region)[d] = (*seen)[d] ? arith::interval_union((*region)[d], s) : s;
      (*seen)[d] = true;
    }
  });
}

// GPU storage ranks, and the rank of the thread index a loop is bound to: memory of
// rank r is one per unit of rank r, so the threads of every unit of a higher rank
// share it (a block's shared memory is shared by its threads).
enum { kRankGlobal = 0, kRankShared = 1, kRankLocal = 2 };

static int thread_rank(const std::string& tag) {
  if (tag.rfind("blockIdx.", 0) == 0) return kRankGlobal;
  if (tag.rfind("threadIdx.", 0) == 0 || tag == "vthread") return kRankShared;
  return -1;
}

// The thread-bound loops of the attach path of s: the loops of its parent down to and
// including the one it is computed at, then the same for the parent, up to the root.
static std::vector<std::pair<IterVar, int>> attach_path_threads(const Stage& s) {
  std::vector<std::pair<IterVar, int>> out;
  for (const Stage* cur = &s; cur->attach_type() == AttachType::Scope; cur = cur->attach_stage()) {
    const Stage& parent = *cur->attach_stage();
    IterVar attach = cur->attach_ivar();
    for (const IterVar& leaf : parent.leaf_iter_vars()) {
      const IterVarAttr* a = parent.attr(leaf);
      if (a && a->kind == ForKind::ThreadBinding && thread_rank(a->thread_tag) >= 0) out.emplace_back(leaf, thread_rank(a->thread_tag));
      if (leaf.same_as(attach)) break;
    }
  }
  return out;
}

// The storage rank of s: its scope when explicit; "global", the default, takes the rank its
// place implies (as gpu_storage_scope later does): inside thread loops local, else shared
// inside block loops, else global.
static int storage_rank(const Stage& s, const std::vector<std::pair<IterVar, int>>& path) {
  if (s.scope() == "shared") return kRankShared;
  if (s.scope() == "local") return kRankLocal;
  int deepest = -1;
  for (const auto& p : path) deepest = std::max(deepest, p.second);
  return deepest + 1;
}

// One copy of a stage serves every thread whose index rank is at or above its storage
// rank (a shared stage serves all threads of its block), so its region is the union of
// what each of them needs: relaxed over the attach path's loops bound to those indices.
static void relax_over_threads(const LowerState& st, const Stage& s, Analyzer* ana, std::vector<IntervalSet>* region) {
  auto path = attach_path_threads(s);
  int rank = storage_rank(s, path);
  std::unordered_map<const Variable*, IntervalSet> dom;
  for (const auto& [iv, r] : path)
    if (r >= rank) dom[iv.var().get()] = IntervalSet::from_range(loop_range(st, iv));
  if (dom.empty()) return;
  for (IntervalSet& set : *region) {
    if (set.min.defined()) set.min = ana->eval_interval(set.min, dom).min;
    if (set.max.defined()) set.max = ana->eval_interval(set.max, dom).max;
  }
}

// True when `reader` is computed at a loop of `parent` inside `attach` (a local cache of a
// shared tile at the reduction's inner loop); *between gets the ranges of the parent's
// loops after `attach` down to the reader's, which one iteration of `attach` runs through.
static bool inner_loops_to(const LowerState& st, const Stage& reader, const Stage& parent, const IterVar& attach,
                           std::unordered_map<const Variable*, IntervalSet>* between) {
  if (reader.attach_type() != AttachType::Scope || reader.attach_stage() != &parent) return false;
  IterVar at = reader.attach_ivar();
  bool inside = false;
  for (const IterVar& leaf : parent.leaf_iter_vars()) {
    if (inside) (*between)[leaf.var().get()] = IntervalSet::from_range(loop_range(st, leaf));
    if (inside && leaf.same_as(at)) return true;
    if (leaf.same_as(attach)) inside = true;
  }
  between->clear();
  return false;
}

// The region of `producer`, computed at loop `attach` of `parent`, that its readers need in
// one iteration of that loop: the parent's reads over its inner loops, and the whole reads of
// siblings computed at the same loop (they run after the producer in the same iteration).
static std::vector<Range> required_region(LowerState* st, const Stage& producer, const Stage& parent, const IterVar& attach) {
  size_t ndim = producer.op()->shape.size();
  std::vector<IntervalSet> region(ndim);
  std::vector<bool> seen(ndim, false);
  for (const Stage* r : st->readers[producer.op().get()]) {
    bool sibling = r->attach_type() == AttachType::Scope && r->attach_stage() == &parent && r->attach_ivar().same_as(attach);
    std::unordered_map<const Variable*, IntervalSet> between;
    bool nested = !sibling && r != &parent && inner_loops_to(*st, *r, parent, attach, &between);
    KILN_USER_CHECK(r == &parent || sibling || nested)
        << "stage '" << producer.name() << "' is computed at '" << parent.name() << "' but is also read by '" << r->name()
        << "', which is not computed inside that loop; compute it at a loop that encloses all its readers, or compute_root";
    add_reads(st, producer, *r, r == &parent ? attach : IterVar(), &region, &seen, between);
  }
  Analyzer ana;
  bind_known_loops(*st, &ana);
  // A loop of one iteration is a constant. Its variable left in the bounds
  // can keep an extent from folding (a block loop fused from loops of extent
  // 1 left 'f*256 + 256' as the extent of the thread loop inside it).
  std::unordered_map<const Variable*, Expr> single;
  for (const auto& sp : st->sch.stages())
    for (const IterVar& leaf : sp->leaf_iter_vars())
      if (st->ranges.count(leaf.get())) {
        Range r = loop_range(*st, leaf);
        if (is_one(r.extent)) single[leaf.var().get()] = r.min;
      }
  auto fixed = [&](const Expr& e) {
    return substitute(e, [&](const Variable* v) -> Expr {
      auto it = single.find(v);
      return it == single.end() ? Expr() : it->second;
    });
  };
  relax_over_threads(*st, producer, &ana, &region);
  std::vector<Range> out;
  for (size_t d = 0; d < ndim; ++d) {
    const Expr& shape = producer.op()->shape[d];
    Expr lo = region[d].min.defined() ? ana.simplify(max(fixed(region[d].min), 0)) : Expr(0);
    Expr hi = region[d].max.defined() ? ana.simplify(min(fixed(region[d].max), shape - 1)) : ana.simplify(shape - 1);
    // Negative where the readers' iteration lies outside the producer (a
    // split tail): such a loop runs nothing, and Fuse clamps the factors it
    // multiplies (iter_relations.cpp). Not clamped here, where a max would
    // hide the extent's form from the tile-size bounds of the stages above.
    out.emplace_back(lo, ana.simplify(hi - lo + 1));
  }
  return out;
}

void infer_bounds(LowerState* st) {
  const auto& stages = st->sch.stages();
  for (auto it = stages.rbegin(); it != stages.rend(); ++it) {
    const Stage& s = **it;
    const ComputeOpNode* c = as_compute(s.op());
    if (!c || s.attach_type() == AttachType::Inline) continue;
    std::vector<Range> region;
    if (s.attach_type() == AttachType::Scope) {
      const Stage& parent = *s.attach_stage();
      KILN_USER_CHECK(parent.attach_type() != AttachType::Inline) << "stage '" << s.name() << "' is computed at '" << parent.name() << "', which is inlined; compute it at a stored stage";
      IterVar attach = s.attach_ivar();
      KILN_CHECK(attach.defined()) << "stage '" << s.name() << "' is computed at '" << parent.name() << "', but no loop of it derives from the axis it was attached to";
      region = required_region(st, s, parent, attach);
    } else {
      for (const Expr& e : c->shape) region.emplace_back(0, e);
    }
    st->regions[c] = region;
    for (size_t d = 0; d < c->axis.size(); ++d) st->ranges[c->axis[d].get()] = region[d];
    for (const IterVar& r : c->reduce_axis) st->ranges[r.get()] = r.dom();
    pass_down(s.relations(), &st->ranges);
    pass_up(s.relations(), s.leaf_iter_vars(), st->ranges, &st->values);
  }
}

}  // namespace kiln::te::detail
