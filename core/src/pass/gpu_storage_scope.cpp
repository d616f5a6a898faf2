// gpu_storage_scope: buffers of stages computed inside a kernel get the
// scope their place implies ("local" in a thread nest, "shared" at block
// level) instead of "global", which a kernel cannot allocate.
#include <unordered_map>

#include "kiln/ir/functor.h"
#include "kiln/pass/gpu.h"

namespace kiln::pass {

namespace {

class ScopeAssigner : public IRMutator {
 protected:
  using IRMutator::visit;

  Stmt visit(const For* op) override {
    if (op->kind != ForKind::ThreadBinding) return IRMutator::visit(op);
    bool saved_block = in_block_, saved_thread = in_thread_;
    in_block_ = true;
    in_thread_ = in_thread_ || thread_dim_index(op->thread_tag) >= 0;
    Stmt s = IRMutator::visit(op);
    in_block_ = saved_block, in_thread_ = saved_thread;
    return s;
  }

  Stmt visit(const Allocate* op) override {
    if (in_block_ && op->buffer.scope() == "global") {
      const BufferNode* b = op->buffer.get();
      renamed_[b->data.get()] = Buffer(new BufferNode(b->name, b->dtype, b->shape, b->strides, b->data, in_thread_ ? "local" : "shared"));
    }
    Stmt body = mutate(op->body);
    Buffer buf = rescoped(op->buffer);
    if (body.same_as(op->body) && buf.same_as(op->buffer)) return op;
    return Allocate::make(buf, body);
  }

  Expr visit(const BufferLoad* op) override {
    Expr e = IRMutator::visit(op);
    const BufferLoad* l = e.as<BufferLoad>();
    Buffer b = rescoped(Buffer(l->buffer));
    return b.same_as(l->buffer) ? e : BufferLoad::make(b, l->indices);
  }

  Stmt visit(const BufferStore* op) override {
    Stmt s = IRMutator::visit(op);
    const BufferStore* w = s.as<BufferStore>();
    Buffer b = rescoped(w->buffer);
    return b.same_as(w->buffer) ? s : BufferStore::make(b, w->value, w->indices);
  }

 private:
  // The buffer with its new scope; the same node when its scope stays. Every
  // view of one storage (the flat and the logical buffer) shares `data`.
  Buffer rescoped(const Buffer& b) {
    auto it = renamed_.find(b->data.get());
    if (it == renamed_.end() || b.scope() == it->second.scope()) return b;
    const BufferNode* n = b.get();
    auto [c, fresh] = cache_.try_emplace(n);
    if (fresh) c->second = Buffer(new BufferNode(n->name, n->dtype, n->shape, n->strides, n->data, it->second.scope()));
    return c->second;
  }

  bool in_block_ = false, in_thread_ = false;
  std::unordered_map<const Variable*, Buffer> renamed_;
  std::unordered_map<const BufferNode*, Buffer> cache_;
};

}  // namespace

PrimFunc gpu_storage_scope(const PrimFunc& f) {
  Stmt body = ScopeAssigner().mutate(f.body());
  return body.same_as(f.body()) ? f : f.with_body(body);
}

}  // namespace kiln::pass
