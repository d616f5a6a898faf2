// Local buffers allocated at block level hold, in kiln's IR, every thread's
// part side by side (C.local[ty*32 + i*16 + tx*2 + j] for a 16x16 tile); on
// the GPU each thread has its own copy, so it needs only its part. Where all
// accesses add one and the same thread-dependent offset to a thread-free
// rest, the CUDA array is shrunk to the rest's span and indexed by the rest
// (C_local[i*2 + j]: 4 registers instead of 256). The GPU simulator runs the
// IR as it is and reports threads whose parts overlap, so what it accepts is
// what this rewrite preserves.
#include <map>
#include <set>
#include <unordered_set>
#include <vector>

#include "codegen_cuda.h"
#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/structural.h"

namespace kiln::codegen::cuda_detail {

namespace {

using VarSet = std::unordered_set<const Variable*>;

using pass::sum_terms;

// Adds the terms of rest, each loop variable times a constant, to *radix;
// false for any other term (then the rest is kept as it is).
bool collect_radix(const Expr& rest, const std::unordered_map<const Variable*, int64_t>& extents, std::map<int64_t, int64_t>* radix) {
  std::vector<std::pair<int, Expr>> terms;
  sum_terms(rest, 1, &terms);
  std::set<int64_t> seen;  // one term per coefficient, or the rest's digits are ambiguous
  for (const auto& [sign, term] : terms) {
    if (is_zero(term)) continue;
    const Variable* v = term.as<Variable>();
    int64_t c = 1;
    if (const Mul* m = term.as<Mul>()) {
      const int64_t* k = as_const_int(m->b);
      v = m->a.as<Variable>();
      if (!k) return false;
      c = *k;
    }
    auto e = v ? extents.find(v) : extents.end();
    if (sign < 0 || c <= 0 || e == extents.end() || !seen.insert(c).second) return false;
    int64_t& slot = (*radix)[c];
    slot = std::max(slot, e->second);
  }
  return true;
}

// Mixed-radix renumbering: when the coefficients, smallest first, each exceed
// the largest value of the terms below them, every rest value is distinct and
// the terms can be packed densely (coefficients 1, e1, e1*e2, ...).
void densify(const std::map<int64_t, int64_t>& radix, LocalPlan* plan) {
  int64_t reach = 0, d = 1;
  std::map<int64_t, int64_t> dense;
  for (const auto& [c, e] : radix) {
    if (c <= reach) return;
    reach += c * (e - 1);
    dense[c] = d;
    d *= e;
  }
  if (d < plan->size) plan->size = d, plan->dense = std::move(dense);
}

}  // namespace

Expr LocalPlan::rewrite(const Expr& rest) const {
  if (dense.empty()) return rest;
  std::vector<std::pair<int, Expr>> terms;
  sum_terms(rest, 1, &terms);
  Expr out;
  for (const auto& [sign, term] : terms) {
    if (is_zero(term)) continue;
    Expr v = term;
    int64_t c = 1;
    if (const Mul* m = term.as<Mul>()) v = m->a, c = *as_const_int(m->b);
    int64_t d = dense.at(c);
    Expr t = d == 1 ? v : v * IntImm::make(v.dtype(), d);
    out = out.defined() ? out + t : t;
  }
  return out.defined() ? out : make_zero(rest.dtype());
}

namespace {

// Block-level local allocations: those with no thread loop around them.
void block_level_locals(const Stmt& s, std::vector<const Allocate*>* out) {
  if (const For* op = s.as<For>()) {
    if (op->kind != ForKind::ThreadBinding || pass::thread_dim_index(op->thread_tag) < 0) block_level_locals(op->body, out);
  } else if (const Allocate* op = s.as<Allocate>()) {
    if (op->buffer.scope() == "local") out->push_back(op);
    block_level_locals(op->body, out);
  } else if (const Seq* op = s.as<Seq>()) {
    for (const Stmt& c : op->seq) block_level_locals(c, out);
  } else if (const IfThenElse* op = s.as<IfThenElse>()) {
    block_level_locals(op->then_case, out);
    if (op->else_case.defined()) block_level_locals(op->else_case, out);
  } else if (const LetStmt* op = s.as<LetStmt>()) {
    block_level_locals(op->body, out);
  } else if (const AttrStmt* op = s.as<AttrStmt>()) {
    block_level_locals(op->body, out);
  } else if (const AssertStmt* op = s.as<AssertStmt>()) {
    block_level_locals(op->body, out);
  }
}

class Planner {
 public:
  // Binds every loop's range, and maps each thread variable to one variable
  // per tag, so that the offsets of different nests (each with its own loop
  // variables) compare equal.
  Planner(const PrimFunc& f, VarSet* thread_vars) : thread_vars_(thread_vars) {
    post_order_visit(f.body(), [&](const Expr& e) {
      // thread_allreduce binds its variable to threadIdx.x, as a thread nest does.
      const Call* c = e.as<Call>();
      if (!c || c->op != Intrinsic::ThreadAllreduce) return;
      Var each(c->args[2].as<Variable>());
      ana_.bind(each, Range(make_zero(each.dtype()), c->args[1]));
      extents_[each.get()] = *as_const_int(c->args[1]);
      canonical_[each.get()] = by_tag_.try_emplace("threadIdx.x", Var("threadIdx.x", each.dtype())).first->second;
      thread_vars->insert(each.get());
    }, [&](const Stmt& x) {
      const For* op = x.as<For>();
      if (!op) return;
      // An extent cut at a tile's edge (min(x + 4, n) - x) is bounded by the whole tile's.
      Expr extent = op->extent;
      if (!as_const_int(extent))
        if (int64_t most = arith::max_through_clamps(extent, &ana_); most != arith::ConstIntBound::kPosInf) extent = IntImm::make(extent.dtype(), most);
      ana_.bind(op->loop_var, Range(op->min, extent));
      if (const int64_t* e = as_const_int(extent); e && is_zero(op->min)) extents_[op->loop_var.get()] = *e;
      if (op->kind == ForKind::ThreadBinding && pass::thread_dim_index(op->thread_tag) >= 0) {
        auto it = by_tag_.try_emplace(op->thread_tag, Var(op->thread_tag, op->loop_var.dtype())).first;
        canonical_[op->loop_var.get()] = it->second;
        thread_vars->insert(op->loop_var.get());
      }
    });
  }

  // The plan for one allocation; size 0 when it cannot shrink.
  LocalPlan plan(const Allocate* a) {
    const Variable* data = a->buffer->data.get();
    const int64_t* size = as_const_int(a->buffer.num_elements());
    ok_ = size != nullptr, dense_ = true, offset_ = Expr(), span_ = 0, radix_.clear();
    post_order_visit(a->body, [&](const Expr& e) {
      if (const BufferLoad* l = e.as<BufferLoad>(); l && l->buffer->data.get() == data) check(l->indices);
    }, [&](const Stmt& x) {
      if (const BufferStore* w = x.as<BufferStore>(); w && w->buffer->data.get() == data) check(w->indices);
    });
    LocalPlan p;
    if (!ok_ || !offset_.defined() || span_ <= 0 || span_ >= *size) return p;
    p.size = span_;
    if (dense_) densify(radix_, &p);
    return p;
  }

 private:
  // One access: its thread part must be the same as every other's, its rest non-negative and bounded.
  void check(const std::vector<Expr>& indices) {
    Expr t, r;
    if (!ok_ || indices.size() != 1 || !pass::split_thread_part(indices[0], *thread_vars_, &t, &r)) return void(ok_ = false);
    Expr canon = ana_.simplify(substitute(t, [&](const Variable* v) {
      auto it = canonical_.find(v);
      return it == canonical_.end() ? Expr() : Expr(it->second);
    }));
    if (offset_.defined() && !structural_equal(offset_, canon)) return void(ok_ = false);
    offset_ = canon;
    arith::ConstIntBound b = ana_.const_int_bound(r);
    if (b.min < 0 || b.max == arith::ConstIntBound::kPosInf) return void(ok_ = false);
    span_ = std::max(span_, b.max + 1);
    dense_ = dense_ && collect_radix(r, extents_, &radix_);
  }

  VarSet* thread_vars_;
  arith::Analyzer ana_;
  std::unordered_map<const Variable*, Var> canonical_;
  std::unordered_map<std::string, Var> by_tag_;
  std::unordered_map<const Variable*, int64_t> extents_;  // loops from 0 of constant extent
  bool ok_ = true, dense_ = true;
  Expr offset_;
  int64_t span_ = 0;
  std::map<int64_t, int64_t> radix_;  // coefficient -> extent of the loops it scales
};

}  // namespace

std::unordered_map<const Variable*, LocalPlan> plan_local_compaction(const PrimFunc& f, VarSet* thread_vars) {
  Planner planner(f, thread_vars);
  std::vector<const Allocate*> locals;
  block_level_locals(f.body(), &locals);
  std::unordered_map<const Variable*, LocalPlan> out;
  for (const Allocate* a : locals)
    if (LocalPlan p = planner.plan(a); p.size > 0) out[a->buffer->data.get()] = std::move(p);
  return out;
}

}  // namespace kiln::codegen::cuda_detail
