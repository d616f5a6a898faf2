// fresh_allocations: renames the storage a copied statement allocates.
#include <unordered_map>

#include "kiln/ir/functor.h"

namespace kiln {

namespace {

class AllocationRenamer : public IRMutator {
 protected:
  using IRMutator::visit;

  Stmt visit(const Allocate* op) override {
    const Buffer& b = op->buffer;
    // An Allocate nested in one of the same variable shadows it only
    // within its body: the outer name comes back after it.
    auto [it, fresh] = vars_.try_emplace(b->data.get());
    Var outer = it->second;
    it->second = Var(b->data.name(), b->data.dtype());
    Buffer renamed_buffer = renamed(b);
    Stmt body = mutate(op->body);
    if (fresh) vars_.erase(b->data.get());
    else vars_[b->data.get()] = outer;
    return Allocate::make(renamed_buffer, body);
  }
  Expr visit(const Variable* op) override {
    auto it = vars_.find(op);
    return it == vars_.end() ? Expr(op) : Expr(it->second);
  }
  Expr visit(const BufferLoad* op) override {
    std::vector<Expr> idx;
    mutate_exprs(op->indices, &idx);
    return BufferLoad::make(renamed(op->buffer), std::move(idx), op->predicate.defined() ? mutate(op->predicate) : Expr());
  }
  Stmt visit(const BufferStore* op) override {
    std::vector<Expr> idx;
    mutate_exprs(op->indices, &idx);
    return BufferStore::make(renamed(op->buffer), mutate(op->value), std::move(idx), op->predicate.defined() ? mutate(op->predicate) : Expr());
  }

 private:
  // b over its renamed data variable: one Buffer per (buffer, variable), so
  // that accesses which shared a Buffer object still do.
  Buffer renamed(const Buffer& b) {
    auto v = vars_.find(b->data.get());
    if (v == vars_.end()) return b;
    Buffer& r = buffers_[{b.get(), v->second.get()}];
    if (!r.defined()) r = Buffer(new BufferNode(b->name, b->dtype, b->shape, b->strides, v->second, b->scope));
    return r;
  }

  struct PairHash {
    size_t operator()(const std::pair<const BufferNode*, const Variable*>& p) const { return std::hash<const void*>()(p.first) ^ (std::hash<const void*>()(p.second) << 1); }
  };
  std::unordered_map<const Variable*, Var> vars_;
  std::unordered_map<std::pair<const BufferNode*, const Variable*>, Buffer, PairHash> buffers_;
};

}  // namespace

Stmt fresh_allocations(const Stmt& s) { return AllocationRenamer().mutate(s); }

}  // namespace kiln
