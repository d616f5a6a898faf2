// storage_reuse: narrows allocations to the statements that use them and
// lets buffers with disjoint lifetimes share storage.
//
// A "level" is a run of statements executed one after another: a Seq, with
// the Allocates that wrap it and the Allocates wrapping its elements spliced
// in. Within a level, a buffer is live from the first statement that names
// it to the last one. Buffers are assigned to storage slots in order of
// first use; a buffer may take over the slot of an earlier one (same scope
// and dtype, compact one-dimensional constant shape) whose last use comes
// strictly before its own first use, so no two live buffers ever share.
// Each slot's Allocate then wraps the smallest run of statements that
// covers its members (widened where runs overlap, so that they nest).
#include "kiln/ir/functor.h"
#include "kiln/pass/passes.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace kiln::pass {

namespace {

using VarSet = std::unordered_set<const Variable*>;

// Data variables of the buffers s reads, writes or names, leaving out those
// that s itself allocates again (unrolling and partitioning copy Allocates):
// inside such an Allocate the name refers to the inner storage.
class UseCollector : public IRVisitor {
 public:
  VarSet used;

 protected:
  using IRVisitor::visit;
  void visit(const Variable* op) override { note(op); }
  void visit(const BufferLoad* op) override {
    note(op->buffer->data.get());
    IRVisitor::visit(op);
  }
  void visit(const BufferStore* op) override {
    note(op->buffer->data.get());
    IRVisitor::visit(op);
  }
  void visit(const Allocate* op) override {
    for (const Expr& e : op->buffer->shape) visit_expr(e);
    bool fresh = inner_.insert(op->buffer->data.get()).second;
    visit_stmt(op->body);
    if (fresh) inner_.erase(op->buffer->data.get());
  }

 private:
  void note(const Variable* v) {
    if (!inner_.count(v)) used.insert(v);
  }
  VarSet inner_;
};

static VarSet buffers_used(const Stmt& s) {
  UseCollector c;
  c.visit_stmt(s);
  return std::move(c.used);
}

struct Slot {
  Buffer buffer;
  int first = 0, last = 0;
  // Element count when the slot can be shared, -1 otherwise.
  int64_t size = -1;
  std::vector<Buffer> members;
};

static int64_t shareable_size(const Buffer& b) {
  if (b.ndim() != 1 || !b->strides.empty()) return -1;
  const int64_t* n = as_const_int(b.shape()[0]);
  return n ? *n : -1;
}

// Points the accesses of merged buffers at their slot's buffer.
class Remapper : public IRMutator {
 public:
  explicit Remapper(const std::unordered_map<const Variable*, Buffer>& map) : map_(map) {}

 protected:
  using IRMutator::visit;
  Expr visit(const Variable* op) override {
    auto it = map_.find(op);
    return it == map_.end() ? Expr(op) : Expr(it->second->data);
  }
  Expr visit(const BufferLoad* op) override {
    auto it = map_.find(op->buffer->data.get());
    if (it == map_.end()) return IRMutator::visit(op);
    std::vector<Expr> idx;
    mutate_exprs(op->indices, &idx);
    return BufferLoad::make(it->second, std::move(idx), op->predicate.defined() ? mutate(op->predicate) : Expr());
  }
  Stmt visit(const BufferStore* op) override {
    auto it = map_.find(op->buffer->data.get());
    if (it == map_.end()) return IRMutator::visit(op);
    std::vector<Expr> idx;
    mutate_exprs(op->indices, &idx);
    return BufferStore::make(it->second, mutate(op->value), std::move(idx), op->predicate.defined() ? mutate(op->predicate) : Expr());
  }

 private:
  const std::unordered_map<const Variable*, Buffer>& map_;
};

class StorageReuser : public IRMutator {
 protected:
  using IRMutator::visit;
  Stmt visit(const Seq* op) override { return level(op); }
  Stmt visit(const Allocate* op) override { return level(op); }

 private:
  // Splices Allocates and Seqs of one level; false if one data variable is
  // allocated with two different buffers (then the level is left alone).
  static bool splice(const Stmt& s, std::vector<Stmt>* stmts, std::vector<Buffer>* allocs) {
    if (const Allocate* a = s.as<Allocate>()) {
      auto same_var = [&](const Buffer& b) { return b->data.same_as(a->buffer->data); };
      auto it = std::find_if(allocs->begin(), allocs->end(), same_var);
      if (it == allocs->end()) allocs->push_back(a->buffer);
      else if (!it->same_as(a->buffer)) return false;
      return splice(a->body, stmts, allocs);
    }
    if (const Seq* q = s.as<Seq>()) {
      for (const Stmt& c : q->seq) {
        if (!splice(c, stmts, allocs)) return false;
      }
      return true;
    }
    stmts->push_back(s);
    return true;
  }

  Stmt level(const BaseStmtNode* node) {
    Stmt s(node);
    std::vector<Stmt> stmts;
    std::vector<Buffer> allocs;
    // Nothing to plan at this level (or unsafe to): just go deeper.
    if (!splice(s, &stmts, &allocs) || allocs.empty()) return s.as<Seq>() ? IRMutator::visit(s.as<Seq>()) : IRMutator::visit(s.as<Allocate>());
    std::vector<VarSet> uses;
    for (const Stmt& st : stmts) uses.push_back(buffers_used(st));
    std::vector<Slot> slots = assign_slots(allocs, uses);
    std::unordered_map<const Variable*, Buffer> remap;
    for (Slot& slot : slots) {
      for (const Buffer& m : slot.members) {
        if (!m.same_as(slot.buffer)) remap.emplace(m->data.get(), slot.buffer);
      }
    }
    for (Stmt& st : stmts) {
      st = mutate(st);
      if (!remap.empty()) st = Remapper(remap).mutate(st);
    }
    std::vector<const Slot*> order;
    for (const Slot& slot : slots) order.push_back(&slot);
    std::stable_sort(order.begin(), order.end(), [](const Slot* a, const Slot* b) { return a->first != b->first ? a->first < b->first : a->last > b->last; });
    return build(stmts, 0, static_cast<int>(stmts.size()) - 1, order);
  }

  // Unused buffers get no slot at all: their Allocates disappear.
  static std::vector<Slot> assign_slots(const std::vector<Buffer>& allocs, const std::vector<VarSet>& uses) {
    struct Live {
      Buffer buffer;
      int first, last;
    };
    std::vector<Live> live;
    for (const Buffer& b : allocs) {
      int first = -1, last = -1;
      for (int i = 0; i < static_cast<int>(uses.size()); ++i) {
        if (!uses[i].count(b->data.get())) continue;
        if (first < 0) first = i;
        last = i;
      }
      if (first >= 0) live.push_back({b, first, last});
    }
    std::stable_sort(live.begin(), live.end(), [](const Live& a, const Live& b) { return a.first < b.first; });
    std::vector<Slot> slots;
    for (const Live& l : live) {
      int64_t size = shareable_size(l.buffer);
      Slot* reuse = size < 0 ? nullptr : find_dead_slot(&slots, l.buffer, l.first, size);
      if (!reuse) {
        slots.push_back({l.buffer, l.first, l.last, size, {l.buffer}});
        continue;
      }
      reuse->members.push_back(l.buffer);
      reuse->last = std::max(reuse->last, l.last);
      if (size > reuse->size) {
        // The shared buffer takes the larger size; it keeps the data
        // variable of its first member.
        const Buffer& b = reuse->buffer;
        reuse->size = size;
        reuse->buffer = Buffer(new BufferNode(b.name(), b.dtype(), {IntImm::make(b.shape()[0].dtype(), size)}, {}, b->data, b.scope()));
      }
    }
    return slots;
  }

  // A shareable slot of b's kind that is dead before `first`; the smallest
  // one big enough, else the largest.
  static Slot* find_dead_slot(std::vector<Slot>* slots, const Buffer& b, int first, int64_t size) {
    Slot* best = nullptr;
    for (Slot& s : *slots) {
      if (s.size < 0 || s.last >= first || s.buffer.dtype() != b.dtype() || s.buffer.scope() != b.scope()) continue;
      if (s.buffer.shape()[0].dtype() != b.shape()[0].dtype()) continue;
      bool fits = s.size >= size, best_fits = best && best->size >= size;
      if (!best || (fits && (!best_fits || s.size < best->size)) || (!fits && !best_fits && s.size > best->size)) best = &s;
    }
    return best;
  }

  // stmts[lo..hi] with the slots in `order` (sorted by first use, longest
  // first), each Allocate wrapping the run from its first use to the end of
  // everything that overlaps it.
  static Stmt build(const std::vector<Stmt>& stmts, int lo, int hi, const std::vector<const Slot*>& order) {
    std::vector<Stmt> out;
    size_t k = 0;
    for (int i = lo; i <= hi;) {
      if (k == order.size() || order[k]->first != i) {
        out.push_back(stmts[i++]);
        continue;
      }
      int end = order[k]->last;
      size_t j = k + 1;
      for (; j < order.size() && order[j]->first <= end; ++j) end = std::max(end, order[j]->last);
      std::vector<const Slot*> inner(order.begin() + k + 1, order.begin() + j);
      out.push_back(Allocate::make(order[k]->buffer, build(stmts, i, end, inner)));
      i = end + 1;
      k = j;
    }
    return Seq::make(std::move(out));
  }
};

}  // namespace

PrimFunc storage_reuse(const PrimFunc& f) { return f.with_body(StorageReuser().mutate(f.body())); }

}  // namespace kiln::pass
