// lower_thread_allreduce: a reduce loop bound to threadIdx.x (every thread
// of the nest updating one element) becomes per-thread partials and one
// thread_allreduce collective (see kiln/pass/gpu.h).
//
// Block-level code is walked from the block nest down. At each block-level
// loop the pass asks whether the loop is a reduction region: a thread nest
// with an update of an element every thread shares, or a serial loop whose
// body is such a region and whose variable the element's index does not use.
// The outermost region found is rewritten; anything else is walked into.
#include <functional>
#include <optional>
#include <unordered_set>

#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ir/structural.h"
#include "kiln/pass/gpu.h"
#include "kiln/support/error.h"

namespace kiln::pass {

namespace {

using VarSet = std::unordered_set<const Variable*>;

// Variables bound inside s: loop and let variables, and allocated buffers.
VarSet bound_inside(const Stmt& s) {
  VarSet out;
  post_order_visit(s, [](const Expr&) {}, [&](const Stmt& x) {
    if (const For* f = x.as<For>()) out.insert(f->loop_var.get());
    else if (const LetStmt* l = x.as<LetStmt>()) out.insert(l->var.get());
    else if (const Allocate* a = x.as<Allocate>()) out.insert(a->buffer->data.get());
  });
  return out;
}

bool uses_any(const Expr& e, const VarSet& vars) {
  return uses_var(e, [&](const Variable* v) { return vars.count(v) > 0; });
}

bool indices_use_any(const std::vector<Expr>& indices, const VarSet& vars) {
  for (const Expr& i : indices)
    if (uses_any(i, vars)) return true;
  return false;
}

bool reads_buffer(const Expr& e, const Variable* data) {
  bool found = false;
  post_order_visit(e, [&](const Expr& x) {
    if (const BufferLoad* l = x.as<BufferLoad>()) found = found || l->buffer->data.get() == data;
  });
  return found;
}

bool same_element(const BufferLoad* l, const BufferStore* w) {
  if (!l || l->buffer->data.get() != w->buffer->data.get() || l->indices.size() != w->indices.size()) return false;
  for (size_t i = 0; i < l->indices.size(); ++i)
    if (!structural_equal(l->indices[i], w->indices[i])) return false;
  return true;
}

// The types warp shuffles move (__shfl_down_sync's overloads).
bool shuffle_type(DataType t) {
  if (t.is_bfloat()) return t.bits() == 16;
  if (t.is_float()) return t.bits() == 16 || t.bits() == 32 || t.bits() == 64;
  return (t.is_int() || t.is_uint()) && (t.bits() == 32 || t.bits() == 64);
}

// One update B[idx] = combine(B[idx], value) that every thread of `nest` makes.
struct Update {
  const For* nest = nullptr;
  const BufferStore* store = nullptr;
  ReduceKind kind = ReduceKind::Sum;
  Expr value;
  // Conditions of the ifs between the nest and the store (negated for an else branch).
  std::vector<Expr> conditions;
};

// The reducer and operand of a store B[idx] = B[idx] op v (either order); false for anything else.
bool match_combine(const BufferStore* w, ReduceKind* kind, Expr* value) {
  Expr a, b;
  if (const Add* op = w->value.as<Add>()) *kind = ReduceKind::Sum, a = op->a, b = op->b;
  else if (const Mul* op = w->value.as<Mul>()) *kind = ReduceKind::Prod, a = op->a, b = op->b;
  else if (const Max* op = w->value.as<Max>()) *kind = ReduceKind::Max, a = op->a, b = op->b;
  else if (const Min* op = w->value.as<Min>()) *kind = ReduceKind::Min, a = op->a, b = op->b;
  else return false;
  if (same_element(b.as<BufferLoad>(), w)) std::swap(a, b);
  if (!same_element(a.as<BufferLoad>(), w) || reads_buffer(b, w->buffer->data.get())) return false;
  *value = b;
  return true;
}

// A store with the conditions of the ifs around it (negated in an else
// branch) and the thread-bound loops around it, inside one thread nest.
struct StoreSite {
  const BufferStore* store;
  std::vector<Expr> conditions;
  std::vector<const For*> thread_loops;
};

class StoreSites {
 public:
  std::vector<StoreSite> sites;

  void walk(const Stmt& s) {
    if (const BufferStore* w = s.as<BufferStore>()) return sites.push_back({w, conds_, loops_});
    if (const IfThenElse* op = s.as<IfThenElse>()) {
      conds_.push_back(op->condition);
      walk(op->then_case);
      conds_.back() = !op->condition;
      if (op->else_case.defined()) walk(op->else_case);
      conds_.pop_back();
      return;
    }
    if (const For* op = s.as<For>()) {
      bool thread = op->kind == ForKind::ThreadBinding && thread_dim_index(op->thread_tag) >= 0;
      if (thread) loops_.push_back(op);
      walk(op->body);
      if (thread) loops_.pop_back();
      return;
    }
    if (const Seq* op = s.as<Seq>()) {
      for (const Stmt& c : op->seq) walk(c);
      return;
    }
    if (const LetStmt* op = s.as<LetStmt>()) return walk(op->body);
    if (const Allocate* op = s.as<Allocate>()) return walk(op->body);
    if (const AttrStmt* op = s.as<AttrStmt>()) return walk(op->body);
    if (const AssertStmt* op = s.as<AssertStmt>()) return walk(op->body);
  }

 private:
  std::vector<Expr> conds_;
  std::vector<const For*> loops_;
};

// Replaces one store node by a statement.
class StoreReplacer : public IRMutator {
 public:
  StoreReplacer(const BufferStore* target, Stmt by) : target_(target), by_(std::move(by)) {}

 protected:
  using IRMutator::visit;
  Stmt visit(const BufferStore* op) override { return op == target_ ? by_ : IRMutator::visit(op); }

 private:
  const BufferStore* target_;
  Stmt by_;
};

class AllreduceLowering : public IRMutator {
 public:
  explicit AllreduceLowering(const PrimFunc& f) : name_(f.name()) {
    post_order_visit(f.body(), [](const Expr&) {}, [&](const Stmt& x) {
      const For* op = x.as<For>();
      int d = op && op->kind == ForKind::ThreadBinding ? thread_dim_index(op->thread_tag) : -1;
      const int64_t* e = d >= 0 ? as_const_int(op->extent) : nullptr;
      if (e && *e > block_[d]) block_[d] = *e;
    });
  }

 protected:
  using IRMutator::visit;

  Stmt visit(const For* op) override {
    if (op->kind == ForKind::ThreadBinding && block_dim_index(op->thread_tag) >= 0) {
      bool saved = in_block_;
      in_block_ = true;
      Stmt s = IRMutator::visit(op);
      in_block_ = saved;
      return s;
    }
    if (!in_block_) return IRMutator::visit(op);
    if (std::optional<Update> u = region(op)) return rewrite(op, *u);
    if (op->kind == ForKind::ThreadBinding) return op;  // a thread nest with no update across its threads
    ++serial_depth_;
    Stmt s = IRMutator::visit(op);
    --serial_depth_;
    return s;
  }

 private:
  // The update a reduction region `op` makes, or nothing when op is none.
  std::optional<Update> region(const For* op) {
    if (op->kind == ForKind::ThreadBinding) return thread_nest_update(op);
    const For* inner = op->body.as<For>();
    if (!inner) return std::nullopt;
    std::optional<Update> u = region(inner);
    if (!u || indices_use_any(u->store->indices, {op->loop_var.get()})) return std::nullopt;
    return u;
  }

  // The update across the threads of thread nest `nest`, checked; nothing when it has none.
  std::optional<Update> thread_nest_update(const For* nest) {
    VarSet inner = bound_inside(Stmt(nest));
    StoreSites found_sites;
    found_sites.walk(Stmt(nest));
    std::optional<Update> found;
    for (const StoreSite& site : found_sites.sites) {
      const BufferStore* w = site.store;
      // Threads share the buffer, and some thread loop around the store leaves its index alone.
      const For* across = nullptr;
      for (const For* t : site.thread_loops) {
        const int64_t* e = as_const_int(t->extent);
        if ((!e || *e > 1) && !indices_use_any(w->indices, {t->loop_var.get()})) across = t;
      }
      if (!across || w->buffer.scope() == "local" || inner.count(w->buffer->data.get())) continue;
      if (!reads_buffer(w->value, w->buffer->data.get())) continue;  // B[idx] = v: a race the simulator reports
      check_update(nest, across, w, inner, found.has_value());
      Update u;
      u.nest = nest, u.store = w, u.conditions = site.conditions;
      match_combine(w, &u.kind, &u.value);
      found = u;
    }
    if (found) check_only_access(nest, *found);
    return found;
  }

  void check_update(const For* nest, const For* across, const BufferStore* w, const VarSet& inner, bool second) {
    const std::string& b = w->buffer.name();
    std::string where = "kernel '" + name_ + "': every thread of loop '" + across->loop_var.name() + "' (bound to " + across->thread_tag + ") updates the same element of '" + b + "'";
    KILN_USER_CHECK(across->thread_tag == "threadIdx.x") << where << "; reductions across threads are supported over threadIdx.x only: bind the reduce loop to threadIdx.x "
                                                         << "(and the data-parallel loop to threadIdx.y or blockIdx)";
    KILN_USER_CHECK(across == nest && !has_thread_loop(nest->body)) << where << " in a nest that binds other loops to threads too; a reduction across threads binds only "
                                                                    << "its reduce loop: bind the data-parallel loops to blockIdx (or leave them serial)";
    KILN_USER_CHECK(block_[1] == 1 && block_[2] == 1) << where << ", in a block of " << block_[0] << "x" << block_[1] << "x" << block_[2]
                                                      << " threads; a reduction across threads needs a block of threadIdx.x alone: bind the other loops to blockIdx.y/z, "
                                                      << "or reduce through shared memory (rfactor, the final stage not bound to threads)";
    const int64_t* extent = as_const_int(nest->extent);
    KILN_USER_CHECK(extent && is_zero(nest->min)) << where << ", over " << to_string(nest->extent) << " threads; the threads of a reduction must be a constant number: "
                                                  << "split the reduce loop by a constant factor and bind the inner part";
    for (const Expr& i : w->indices)
      post_order_visit(i, [&](const Expr& e) {
        const Variable* v = e.as<Variable>();
        KILN_USER_CHECK(!v || !inner.count(v)) << where << " at an index that depends on '" << v->name << "', a loop inside the loop bound to threadIdx.x; "
                                               << "put that loop outside the thread loop (reorder), so each of its iterations reduces one element";
      });
    ReduceKind kind;
    Expr value;
    KILN_USER_CHECK(match_combine(w, &kind, &value)) << where << " as " << to_string(w->value) << ", which is no sum, product, maximum or minimum of the element and a value "
                                                     << "that does not read it; only those reducers (te.sum, te.prod, te.max, te.min) reduce across threads: "
                                                     << "write the reduction with one of them, or leave the reduce loop serial";
    KILN_USER_CHECK(!second) << where << ", and another element as well; one reduction across threads per thread nest: compute the other reduction as its own stage";
    DataType t = w->value.dtype();
    KILN_USER_CHECK(shuffle_type(t)) << where << " in " << t.str() << ", a type warp shuffles do not move; reduce in float16, bfloat16, float32, float64, "
                                     << "int32 or int64 (te.cast the operand, e.g. int8 to int32)";
  }

  // The shared element is read and written only by the update itself.
  void check_only_access(const For* nest, const Update& u) {
    int touches = 0;
    const Variable* data = u.store->buffer->data.get();
    post_order_visit(Stmt(nest), [&](const Expr& e) {
      if (const BufferLoad* l = e.as<BufferLoad>(); l && l->buffer->data.get() == data) ++touches;
    }, [&](const Stmt& x) {
      if (const BufferStore* w = x.as<BufferStore>(); w && w->buffer->data.get() == data) ++touches;
    });
    KILN_USER_CHECK(touches == 2) << "kernel '" << name_ << "': '" << u.store->buffer.name() << "' is reduced across the threads of loop '" << u.nest->loop_var.name()
                                  << "' and also read or written elsewhere in that loop, where its value is not known until all threads are done; "
                                  << "read the result after the loop (a stage computed after the reduction)";
  }

  // `region` with the update made to each thread's partial, the collective after it.
  Stmt rewrite(const For* region, const Update& u) {
    const For* nest = u.nest;
    const BufferStore* w = u.store;
    DataType t = w->value.dtype();
    int64_t n = *as_const_int(nest->extent);
    Buffer partial = Buffer::make(w->buffer.name() + ".red", t, {IntImm::make(DataType::Int(32), n)}, "local");
    const Var& tx = nest->loop_var;
    Stmt to_partial = BufferStore::make(partial, reduce_combine(u.kind, BufferLoad::make(partial, {tx}), u.value), {tx});
    Stmt body = StoreReplacer(w, to_partial).mutate(Stmt(region));
    Var init_t(tx.name(), tx.dtype());
    Stmt init = For::make(init_t, make_zero(tx.dtype()), nest->extent, ForKind::ThreadBinding,
                          BufferStore::make(partial, reduce_identity(u.kind, t), {init_t}), nest->thread_tag);
    Var each(tx.name(), tx.dtype());
    Expr all = Call::make(t, Intrinsic::ThreadAllreduce,
                          {StringImm::make(reduce_kind_name(u.kind)), IntImm::make(DataType::Int(32), n), each, BufferLoad::make(partial, {each})});
    // The collective first: the simulator then reads B[idx] after the collective's barrier, as thread 0 does on the GPU.
    Stmt result = BufferStore::make(w->buffer, reduce_combine(u.kind, all, BufferLoad::make(w->buffer, w->indices)), w->indices);
    if (Expr guard = outer_guard(region, u); guard.defined()) result = IfThenElse::make(guard, result);
    if (serial_depth_ > 0 && n > 32) result = Seq::make({make_sync_threads(), result});
    return Allocate::make(partial, Seq::make({init, body, result}));
  }

  // The conjuncts of the update's conditions that no variable of the region reaches (the output's bounds).
  static Expr outer_guard(const For* region, const Update& u) {
    VarSet inner = bound_inside(Stmt(region));
    std::vector<Expr> parts;
    std::function<void(const Expr&)> split = [&](const Expr& c) {
      if (const Call* l = c.as<Call>(); l && l->op == Intrinsic::Likely) return split(l->args[0]);
      if (const And* a = c.as<And>()) return split(a->a), split(a->b);
      if (!uses_any(c, inner)) parts.push_back(c);
    };
    for (const Expr& c : u.conditions) split(c);
    Expr g;
    for (const Expr& p : parts) g = g.defined() ? (g && p) : p;
    return g.defined() ? likely(g) : g;
  }

  std::string name_;
  int64_t block_[3] = {1, 1, 1};
  bool in_block_ = false;
  // Block-level serial loops around the statement being visited.
  int serial_depth_ = 0;
};

}  // namespace

PrimFunc lower_thread_allreduce(const PrimFunc& f) {
  Stmt body = AllreduceLowering(f).mutate(f.body());
  return body.same_as(f.body()) ? f : f.with_body(body);
}

}  // namespace kiln::pass
