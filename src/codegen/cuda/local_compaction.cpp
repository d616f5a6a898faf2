// Local buffers allocated at block level hold, in kiln's IR, every thread's
// part side by side (C.local[ty*32 + i*16 + tx*2 + j] for a 16x16 tile); on
// the GPU each thread has its own copy, so it needs only its part. Where all
// accesses add one and the same thread-dependent offset to a thread-free
// rest, the CUDA array is shrunk to the rest's span and indexed by the rest
// (C_local[i*2 + j]: 4 registers instead of 256). The GPU simulator runs the
// IR as it is and reports threads whose parts overlap, so what it accepts is
// what this rewrite preserves.
#include <functional>
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

// The terms of a sum: e = sum of sign * term.
void terms_of(const Expr& e, int sign, std::vector<std::pair<int, Expr>>* out) {
  if (const Add* a = e.as<Add>()) {
    terms_of(a->a, sign, out);
    terms_of(a->b, sign, out);
  } else if (const Sub* s = e.as<Sub>()) {
    terms_of(s->a, sign, out);
    terms_of(s->b, -sign, out);
  } else {
    out->emplace_back(sign, e);
  }
}

Expr add_term(const Expr& acc, int sign, const Expr& t) {
  if (!acc.defined()) return sign > 0 ? t : make_zero(t.dtype()) - t;
  return sign > 0 ? acc + t : acc - t;
}

// Adds the terms of rest, each loop variable times a constant, to *radix;
// false for any other term (then the rest is kept as it is).
bool collect_radix(const Expr& rest, const std::unordered_map<const Variable*, int64_t>& extents, std::map<int64_t, int64_t>* radix) {
  std::vector<std::pair<int, Expr>> terms;
  terms_of(rest, 1, &terms);
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
  terms_of(rest, 1, &terms);
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

bool split_thread_part(const Expr& index, const VarSet& thread_vars, Expr* thread_part, Expr* rest) {
  std::vector<std::pair<int, Expr>> terms;
  terms_of(index, 1, &terms);
  Expr t, r;
  for (const auto& [sign, term] : terms) {
    bool any_thread = uses_var(term, [&](const Variable* v) { return thread_vars.count(v) > 0; });
    bool any_other = uses_var(term, [&](const Variable* v) { return thread_vars.count(v) == 0; });
    if (any_thread && any_other) return false;
    if (any_thread) t = add_term(t, sign, term);
    else r = add_term(r, sign, term);
  }
  *thread_part = t.defined() ? t : make_zero(index.dtype());
  *rest = r.defined() ? r : make_zero(index.dtype());
  return true;
}

std::unordered_map<const Variable*, LocalPlan> plan_local_compaction(const PrimFunc& f, VarSet* thread_vars) {
  // Thread variables, each mapped to one variable per tag so that the offsets
  // of different nests (each with its own loop variables) compare equal.
  std::unordered_map<const Variable*, Var> canonical;
  std::unordered_map<std::string, Var> by_tag;
  std::unordered_map<const Variable*, int64_t> extents;  // loops from 0 of constant extent
  arith::Analyzer ana;
  std::vector<const Allocate*> candidates;
  post_order_visit(f.body(), [](const Expr&) {}, [&](const Stmt& x) {
    const For* op = x.as<For>();
    if (!op) return;
    ana.bind(op->loop_var, Range(op->min, op->extent));
    if (const int64_t* e = as_const_int(op->extent); e && is_zero(op->min)) extents[op->loop_var.get()] = *e;
    if (op->kind == ForKind::ThreadBinding && pass::thread_dim_index(op->thread_tag) >= 0) {
      auto it = by_tag.try_emplace(op->thread_tag, Var(op->thread_tag, op->loop_var.dtype())).first;
      canonical[op->loop_var.get()] = it->second;
      thread_vars->insert(op->loop_var.get());
    }
  });
  // Block-level local allocations: those with no thread loop around them.
  std::function<void(const Stmt&)> find = [&](const Stmt& s) {
    if (const For* op = s.as<For>(); op && op->kind == ForKind::ThreadBinding && pass::thread_dim_index(op->thread_tag) >= 0) return;
    if (const Allocate* a = s.as<Allocate>(); a && a->buffer.scope() == "local") candidates.push_back(a);
    if (const For* op = s.as<For>()) find(op->body);
    else if (const Allocate* op = s.as<Allocate>()) find(op->body);
    else if (const Seq* op = s.as<Seq>()) for (const Stmt& c : op->seq) find(c);
    else if (const IfThenElse* op = s.as<IfThenElse>()) {
      find(op->then_case);
      if (op->else_case.defined()) find(op->else_case);
    }
    else if (const LetStmt* op = s.as<LetStmt>()) find(op->body);
    else if (const AttrStmt* op = s.as<AttrStmt>()) find(op->body);
    else if (const AssertStmt* op = s.as<AssertStmt>()) find(op->body);
  };
  find(f.body());
  std::unordered_map<const Variable*, LocalPlan> out;
  for (const Allocate* a : candidates) {
    const Variable* data = a->buffer->data.get();
    const int64_t* size = as_const_int(a->buffer.num_elements());
    bool ok = size != nullptr;
    Expr offset;
    int64_t span = 0;
    std::map<int64_t, int64_t> radix;  // coefficient -> extent of the loops it scales
    bool dense = true;
    auto check = [&](const std::vector<Expr>& indices) {
      Expr t, r;
      if (!ok || indices.size() != 1 || !split_thread_part(indices[0], *thread_vars, &t, &r)) return void(ok = false);
      Expr canon = ana.simplify(substitute(t, [&](const Variable* v) { auto it = canonical.find(v); return it == canonical.end() ? Expr() : Expr(it->second); }));
      if (offset.defined() && !structural_equal(offset, canon)) return void(ok = false);
      offset = canon;
      arith::ConstIntBound b = ana.const_int_bound(r);
      if (b.min < 0 || b.max == arith::ConstIntBound::kPosInf) return void(ok = false);
      span = std::max(span, b.max + 1);
      dense = dense && collect_radix(r, extents, &radix);
    };
    post_order_visit(a->body, [&](const Expr& e) {
      if (const BufferLoad* l = e.as<BufferLoad>(); l && l->buffer->data.get() == data) check(l->indices);
    }, [&](const Stmt& x) {
      if (const BufferStore* w = x.as<BufferStore>(); w && w->buffer->data.get() == data) check(w->indices);
    });
    if (!ok || !offset.defined() || span <= 0 || span >= *size) continue;
    LocalPlan plan{span, {}};
    if (dense) densify(radix, &plan);
    out[data] = plan;
  }
  return out;
}

}  // namespace kiln::codegen::cuda_detail
