// insert_barriers: sync_threads() exactly where the threads of a block pass
// shared data to each other (see kiln/pass/gpu.h).
//
// Block-level code is walked in program order with the shared buffers read
// and written since the last barrier. Thread nests (and thread-0 regions,
// block-level statements without a thread nest) are the units that touch
// memory: one that reads what is pending as written (read after write),
// or writes what is pending as read or written (write after read/write),
// gets a barrier in front of it. Serial block-level loops are first walked
// on their own, until the state at their back edge stops growing, so a
// barrier needed only from the second iteration on (the next fetch
// overwriting a tile still being read) is found and stands in the body; a
// barrier that only the code before the loop makes necessary goes before the
// loop, where it runs once.
#include <map>
#include <set>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/pass/gpu.h"

namespace kiln::pass {

namespace {

using BufferSet = std::set<const Variable*>;

// Shared buffers touched since the last barrier: by anyone, and by thread
// nests (many threads; thread-0 regions are one thread, which needs no
// barrier to see its own writes).
struct Pending {
  BufferSet read, written, read_many, written_many;
  bool operator==(const Pending& o) const = default;
  void merge(const Pending& o) {
    read.insert(o.read.begin(), o.read.end());
    written.insert(o.written.begin(), o.written.end());
    read_many.insert(o.read_many.begin(), o.read_many.end());
    written_many.insert(o.written_many.begin(), o.written_many.end());
  }
};

bool intersects(const BufferSet& a, const BufferSet& b) {
  for (const Variable* v : a)
    if (b.count(v)) return true;
  return false;
}

class BarrierPlanner {
 public:
  explicit BarrierPlanner(BufferSet shared) : shared_(std::move(shared)) {}

  Stmt process(const Stmt& s, Pending* st) {
    if (is_sync_threads(s)) {
      *st = Pending();
      return s;
    }
    const For* loop = s.as<For>();
    bool thread_nest = loop && loop->kind == ForKind::ThreadBinding && thread_dim_index(loop->thread_tag) >= 0;
    if (thread_nest || !has_thread_loop(s)) return region(s, thread_nest, st);
    if (loop) return process_loop(loop, st);
    if (const Seq* seq = s.as<Seq>()) {
      std::vector<Stmt> out;
      for (const Stmt& c : seq->seq) out.push_back(process(c, st));
      return Seq::make(std::move(out));
    }
    if (const IfThenElse* op = s.as<IfThenElse>()) {
      Pending other = *st;
      Stmt t = process(op->then_case, st);
      Stmt e = op->else_case.defined() ? process(op->else_case, &other) : Stmt();
      st->merge(other);
      return IfThenElse::make(op->condition, t, e);
    }
    if (const LetStmt* op = s.as<LetStmt>()) return LetStmt::make(op->var, op->value, process(op->body, st));
    if (const AttrStmt* op = s.as<AttrStmt>()) return AttrStmt::make(op->key, op->value, process(op->body, st));
    if (const Allocate* op = s.as<Allocate>()) return Allocate::make(op->buffer, process(op->body, st));
    if (const AssertStmt* op = s.as<AssertStmt>()) return AssertStmt::make(op->condition, op->message, process(op->body, st));
    return s;
  }

 private:
  // A unit that touches memory: a barrier goes before it when it conflicts with what is pending.
  Stmt region(const Stmt& s, bool many, Pending* st) {
    Pending mine;
    post_order_visit(
        s,
        [&](const Expr& e) {
          if (const BufferLoad* l = e.as<BufferLoad>(); l && shared_.count(l->buffer->data.get())) mine.read.insert(l->buffer->data.get());
        },
        [&](const Stmt& x) {
          if (const BufferStore* w = x.as<BufferStore>(); w && shared_.count(w->buffer->data.get())) mine.written.insert(w->buffer->data.get());
        });
    const BufferSet& w = many ? st->written : st->written_many;
    const BufferSet& r = many ? st->read : st->read_many;
    bool waw = false;
    for (const Variable* x : mine.written) waw = waw || (w.count(x) && !exempt_from_waw(x));
    bool conflict = intersects(mine.read, w) || intersects(mine.written, r) || waw;
    Stmt out = s;
    if (conflict) {
      *st = Pending();
      out = Seq::make({make_sync_threads(), s});
    }
    if (many) mine.read_many = mine.read, mine.written_many = mine.written;
    st->merge(mine);
    return out;
  }

  Stmt process_loop(const For* op, Pending* st) {
    if (op->kind == ForKind::ThreadBinding) {
      // A block loop: each iteration is another block, with shared memory of its own.
      Pending fresh;
      return For::make(op->loop_var, op->min, op->extent, op->kind, process(op->body, &fresh), op->thread_tag);
    }
    // The barriers the loop needs on its own (its iterations among themselves)...
    Pending exit;
    Stmt body = loop_alone(op, &exit);
    // ...and one before it when its first iteration conflicts with what came
    // before: hoisted out of the loop, it runs once instead of every iteration.
    Pending probe = *st;
    bool conflicts = count_barriers(process(body, &probe)) > count_barriers(body);
    Stmt loop = For::make(op->loop_var, op->min, op->extent, op->kind, body, op->thread_tag);
    if (conflicts) *st = Pending();
    st->merge(exit);  // the loop may run zero times: keep what was pending
    return conflicts ? Seq::make({make_sync_threads(), loop}) : loop;
  }

  // The body with the barriers that iterations of the loop need among
  // themselves: walked from an empty state, then from the state at the end of
  // an iteration until that state stops growing (sets only grow, so this ends).
  Stmt loop_alone(const For* op, Pending* exit) {
    Stmt body;
    disjoint_.push_back(disjoint_across_iterations(op));
    for (int round = 0; round < 8; ++round) {
      Pending out = *exit;
      body = process(op->body, &out);
      if (round > 0 && out == *exit) break;
      exit->merge(out);
    }
    disjoint_.pop_back();
    return body;
  }

  // A write to x needs no barrier against the pending writes to x when those
  // can only come from earlier iterations of the innermost loop being walked
  // (loop_alone starts each loop from an empty state, so the writes pending
  // there are its own) and that loop writes x at different elements in
  // different iterations. The loops around it need not: a fetch loop inside
  // the reduction's loop fills its tile piece by piece in every iteration.
  bool exempt_from_waw(const Variable* x) const { return !disjoint_.empty() && disjoint_.back().count(x); }

  // Shared buffers that iterations of `op` write at different elements: one
  // store in the body, whose index grows by a constant c per iteration while
  // the rest of it (the inner loops' and threads' part) spans less than c.
  BufferSet disjoint_across_iterations(const For* op) {
    std::map<const Variable*, std::vector<const BufferStore*>> stores;
    arith::Analyzer ana;
    post_order_visit(op->body, [](const Expr&) {}, [&](const Stmt& x) {
      if (const For* f = x.as<For>()) ana.bind(f->loop_var, Range(f->min, f->extent));
      if (const BufferStore* w = x.as<BufferStore>(); w && shared_.count(w->buffer->data.get())) stores[w->buffer->data.get()].push_back(w);
    });
    BufferSet out;
    const Var& v = op->loop_var;
    for (const auto& [data, list] : stores) {
      if (list.size() != 1 || list[0]->indices.size() != 1) continue;
      const Expr& idx = list[0]->indices[0];
      Expr next = substitute(idx, [&](const Variable* x) { return x == v.get() ? v + 1 : Expr(); });
      const int64_t* step = as_const_int(ana.simplify(next - idx));
      if (!step || *step <= 0) continue;
      Expr rest = ana.simplify(idx - v * IntImm::make(v.dtype(), *step));
      if (uses_var(rest, [&](const Variable* x) { return x == v.get(); })) continue;
      arith::ConstIntBound b = ana.const_int_bound(rest);
      if (b.min != arith::ConstIntBound::kNegInf && b.max != arith::ConstIntBound::kPosInf && b.max - b.min < *step) out.insert(data);
    }
    return out;
  }

  static int count_barriers(const Stmt& s) {
    int n = 0;
    post_order_visit(s, [](const Expr&) {}, [&](const Stmt& x) { n += is_sync_threads(x); });
    return n;
  }

  BufferSet shared_;
  // For each loop being walked by loop_alone, innermost last: disjoint_across_iterations.
  std::vector<BufferSet> disjoint_;
};

}  // namespace

PrimFunc insert_barriers(const PrimFunc& f) {
  BufferSet shared;
  post_order_visit(f.body(), [](const Expr&) {}, [&](const Stmt& s) {
    if (const Allocate* a = s.as<Allocate>(); a && a->buffer.scope() == "shared") shared.insert(a->buffer->data.get());
  });
  if (shared.empty()) return f;
  Pending st;
  Stmt body = BarrierPlanner(shared).process(f.body(), &st);
  return f.with_body(body);
}

}  // namespace kiln::pass
