// split_thread_nests: a shared stage computed inside thread loops (TVM's GPU
// schedules: the GEMM's shared tiles computed at the reduction's outer loop,
// inside the threadIdx loops of the output) becomes block-level code.
//
// Such a stage is one copy per block (bound inference relaxed its region over
// the thread indices), so its allocation and its fetch stand outside the
// thread nest, and the thread loops around it are pushed inward: through
// serial loops (for tx { for ko { S } } -> for ko { for tx { S } }), and
// distributed over sequences, one copy of the loops around each piece that
// needs no block level. A local buffer those loops enclose lives on across
// the pieces: it gets one part per thread (indexed by the thread loops,
// compacted back to one thread's part by the CUDA code generator). A loop of
// the stage bound to a tag the enclosing thread loops already bind is the
// same hardware index: it starts a new thread nest at block level (the
// cooperative fetch). Virtual threads (tag "vthread") are pushed in the same
// way and become unrolled loops inside the thread loops.
#include <unordered_map>
#include <unordered_set>

#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/pass/gpu.h"
#include "kiln/support/error.h"

namespace kiln::pass {

namespace {

bool is_vthread(const For* f) { return f && f->kind == ForKind::ThreadBinding && f->thread_tag == "vthread"; }
bool is_thread(const For* f) { return f && f->kind == ForKind::ThreadBinding && thread_dim_index(f->thread_tag) >= 0; }

// The thread (and virtual thread) loops being pushed inward, outermost first.
using Group = std::vector<const For*>;

bool uses_group(const Stmt& s, const Group& g) {
  return uses_var(s, [&](const Variable* v) {
    for (const For* f : g)
      if (f->loop_var.get() == v) return true;
    return false;
  });
}

bool uses_group(const Expr& e, const Group& g) {
  return uses_var(e, [&](const Variable* v) {
    for (const For* f : g)
      if (f->loop_var.get() == v) return true;
    return false;
  });
}

std::string group_names(const Group& g) {
  std::string out;
  for (const For* f : g) out += (out.empty() ? "'" : ", '") + f->loop_var.name() + "' (" + f->thread_tag + ")";
  return out;
}

// Accesses of one local buffer get the part of the thread running them.
class PerThreadPart : public IRMutator {
 public:
  PerThreadPart(const Variable* data, Buffer wide, Expr offset) : data_(data), wide_(std::move(wide)), offset_(std::move(offset)) {}

 protected:
  using IRMutator::visit;
  Expr visit(const BufferLoad* op) override {
    Expr e = IRMutator::visit(op);
    const BufferLoad* l = e.as<BufferLoad>();
    if (l->buffer->data.get() != data_) return e;
    return BufferLoad::make(wide_, {at(l->indices[0])});
  }
  Stmt visit(const BufferStore* op) override {
    Stmt s = IRMutator::visit(op);
    const BufferStore* w = s.as<BufferStore>();
    if (w->buffer->data.get() != data_) return s;
    return BufferStore::make(wide_, w->value, {at(w->indices[0])});
  }
  Expr at(const Expr& index) const { return is_zero(index) ? offset_ : offset_ + index; }

 private:
  const Variable* data_;
  Buffer wide_;
  Expr offset_;
};

class NestSplitter : public IRMutator {
 public:
  explicit NestSplitter(std::string name) : name_(std::move(name)) {}

 protected:
  using IRMutator::visit;

  // Block-level code: a thread nest (the chain of thread and virtual thread
  // loops at its top) is pushed apart where it holds block-level code, and
  // pushed to its leaves anyway when it has virtual threads, so that they run
  // inside the thread loops.
  Stmt visit(const For* op) override {
    if (!is_thread(op) && !is_vthread(op)) return IRMutator::visit(op);
    Group chain = {op};
    bool virt = is_vthread(op);
    while (const For* f = chain.back()->body.as<For>()) {
      if (!is_thread(f) && !is_vthread(f)) break;
      chain.push_back(f);
      virt = virt || is_vthread(f);
    }
    if (!virt && !has_shared(chain.back()->body)) return op;
    return push(chain.back()->body, chain);
  }

 private:
  static bool has_shared(const Stmt& s) {
    bool found = false;
    post_order_visit(s, [](const Expr&) {}, [&](const Stmt& x) {
      if (const Allocate* a = x.as<Allocate>(); a && a->buffer.scope() == "shared") found = true;
    });
    return found;
  }

  // Code the block runs together: shared memory, a loop bound again to a tag
  // of g, or a store to shared memory that is the same for every thread of g.
  static bool needs_block(const Stmt& s, const Group& g) {
    bool found = false;
    post_order_visit(s, [](const Expr&) {}, [&](const Stmt& x) {
      if (found) return;
      if (const Allocate* a = x.as<Allocate>(); a && a->buffer.scope() == "shared") found = true;
      if (const BufferStore* w = x.as<BufferStore>(); w && w->buffer.scope() == "shared") found = !uses_group(x, g);
      if (const For* f = x.as<For>(); is_thread(f))
        for (const For* o : g) found = found || o->thread_tag == f->thread_tag;
    });
    return found;
  }

  // s inside the loops g, as block-level code with the loops pushed down to its leaves.
  Stmt push(const Stmt& s, const Group& g) {
    if (!needs_block(s, g)) return wrap(s, g);
    if (const For* op = s.as<For>()) return push_for(op, g);
    if (const Allocate* op = s.as<Allocate>()) return push_allocate(op, g);
    if (const Seq* op = s.as<Seq>()) return push_seq(op, g);
    if (const IfThenElse* op = s.as<IfThenElse>()) {
      KILN_USER_CHECK(!uses_group(op->condition, g))
          << "kernel '" << name_ << "': a shared stage is computed under the condition " << op->condition << ", which depends on the thread loops "
          << group_names(g) << ", so the threads of a block would not all reach its barriers; compute the stage outside that condition";
      return IfThenElse::make(op->condition, push(op->then_case, g), op->else_case.defined() ? push(op->else_case, g) : Stmt());
    }
    if (const LetStmt* op = s.as<LetStmt>()) {
      if (!uses_group(op->value, g)) return LetStmt::make(op->var, op->value, push(op->body, g));
      // A value per thread: each piece computes it where it is used.
      return push(substitute(op->body, [&](const Variable* v) { return v == op->var.get() ? op->value : Expr(); }), g);
    }
    if (const AttrStmt* op = s.as<AttrStmt>()) return AttrStmt::make(op->key, op->value, push(op->body, g));
    if (const AssertStmt* op = s.as<AssertStmt>()) {
      KILN_USER_CHECK(!uses_group(op->condition, g)) << "kernel '" << name_ << "': a shared stage is computed under the assertion " << op->condition
                                                     << ", which depends on the thread loops " << group_names(g) << "; compute the stage outside it";
      return AssertStmt::make(op->condition, op->message, push(op->body, g));
    }
    return wrap(s, g);
  }

  Stmt push_for(const For* op, const Group& g) {
    if (is_thread(op) || is_vthread(op)) {
      bool uses = uses_group(Stmt(op), g);
      // A nest of its own (the cooperative fetch of a shared stage): block level.
      if (!uses) return mutate(Stmt(op));
      for (const For* o : g)
        KILN_USER_CHECK(o->thread_tag != op->thread_tag || is_vthread(op))
            << "kernel '" << name_ << "': loop '" << op->loop_var.name() << "' is bound to " << op->thread_tag << " inside loop '" << o->loop_var.name()
            << "', bound to the same index, and a shared stage is computed inside them, but it depends on the outer loop's index; the loops of a stage "
            << "computed inside thread loops that are bound to the same index must not use the enclosing thread indices (bind them to another index, "
            << "or compute the shared stage at a block-level loop)";
      Group inner = g;
      inner.push_back(op);
      return push(op->body, inner);
    }
    KILN_USER_CHECK(!uses_group(op->min, g) && !uses_group(op->extent, g))
        << "kernel '" << name_ << "': a shared stage is computed inside loop '" << op->loop_var.name() << "', whose bounds depend on the thread loops " << group_names(g)
        << ", so the threads of a block would not reach its barriers together; compute the stage at a loop whose extent is the same for every thread";
    return For::make(op->loop_var, op->min, op->extent, op->kind, push(op->body, g), op->thread_tag);
  }

  Stmt push_allocate(const Allocate* op, const Group& g) {
    if (op->buffer.scope() == "shared") return Allocate::make(op->buffer, push(op->body, g));
    // A per-thread buffer hoisted out of its threads: one part per thread, side by side.
    const BufferNode* b = op->buffer.get();
    const int64_t* n = b->shape.size() == 1 && b->strides.empty() ? as_const_int(b->shape[0]) : nullptr;
    KILN_USER_CHECK(n) << "kernel '" << name_ << "': " << b->scope << " buffer '" << b->name << "' is allocated in the thread loops " << group_names(g)
                       << " around a shared stage and has no constant flat size; give the stage constant bounds";
    // The thread's part: its index among the loops of g (outermost slowest) times the part's size.
    Expr offset;
    int64_t parts = 1;
    for (const For* f : g) {
      const int64_t* e = as_const_int(f->extent);
      KILN_USER_CHECK(e) << "kernel '" << name_ << "': loop '" << f->loop_var.name() << "' bound to " << f->thread_tag << " has no constant extent";
      Expr v = is_zero(f->min) ? Expr(f->loop_var) : f->loop_var - f->min;
      offset = offset.defined() ? offset * IntImm::make(DataType::Int(32), *e) + v : v;
      parts *= *e;
    }
    if (*n != 1) offset = offset * IntImm::make(DataType::Int(32), *n);
    Buffer wide(new BufferNode(b->name, b->dtype, {IntImm::make(DataType::Int(32), *n * parts)}, {}, b->data, b->scope));
    Stmt body = PerThreadPart(b->data.get(), wide, offset).mutate(op->body);
    return Allocate::make(wide, push(body, g));
  }

  // Runs of statements that need no block level share one copy of the loops;
  // one that uses none of them (an unbound fetch) stands alone at block level.
  Stmt push_seq(const Seq* op, const Group& g) {
    std::vector<Stmt> out, run;
    auto flush = [&] {
      if (!run.empty()) out.push_back(wrap(Seq::make(run), g));
      run.clear();
    };
    for (const Stmt& c : op->seq) {
      if (needs_block(c, g) || !uses_group(c, g)) {
        flush();
        out.push_back(push(c, g));
      } else {
        run.push_back(c);
      }
    }
    flush();
    return Seq::make(out);
  }

  // A leaf piece in its own copy of the loops g (fresh variables): threads
  // outermost, virtual threads as unrolled loops inside them. A piece that
  // uses none of them is the same for every thread and runs once, at block level.
  Stmt wrap(const Stmt& s, const Group& g) {
    if (!uses_group(s, g)) return mutate(s);
    std::unordered_map<const Variable*, Var> fresh;
    for (const For* f : g) fresh.emplace(f->loop_var.get(), Var(f->loop_var.name(), f->loop_var.dtype()));
    Stmt body = substitute(s, [&](const Variable* v) -> Expr {
      auto it = fresh.find(v);
      return it == fresh.end() ? Expr() : Expr(it->second);
    });
    for (auto it = g.rbegin(); it != g.rend(); ++it)
      if (is_vthread(*it)) body = For::make(fresh.at((*it)->loop_var.get()), (*it)->min, (*it)->extent, ForKind::Unrolled, body);
    for (auto it = g.rbegin(); it != g.rend(); ++it)
      if (!is_vthread(*it)) body = For::make(fresh.at((*it)->loop_var.get()), (*it)->min, (*it)->extent, (*it)->kind, body, (*it)->thread_tag);
    return body;
  }

  std::string name_;
};

// Virtual threads left inside thread nests are loops of each thread.
class VthreadUnroller : public IRMutator {
 protected:
  using IRMutator::visit;
  Stmt visit(const For* op) override {
    Stmt s = IRMutator::visit(op);
    const For* f = s.as<For>();
    return is_vthread(f) ? For::make(f->loop_var, f->min, f->extent, ForKind::Unrolled, f->body) : s;
  }
};

}  // namespace

PrimFunc split_thread_nests(const PrimFunc& f) {
  Stmt body = VthreadUnroller().mutate(NestSplitter(f.name()).mutate(f.body()));
  return body.same_as(f.body()) ? f : f.with_body(body);
}

}  // namespace kiln::pass
