#include "kiln/ir/structural.h"

#include <cmath>
#include <cstring>
#include <unordered_map>

#include "kiln/support/error.h"

namespace kiln {

namespace {

// Equality and hashing walk the two trees (or the one tree) in the same
// order and introduce variables, buffers and tensors at the same points:
// at their binding site for bound ones, at their first occurrence for free
// ones. That shared order is what makes the hash consistent with equality:
// the hash names each variable by the index of its introduction, which is
// the same in any two trees that equality pairs up.

bool float_bits_equal(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof(double)) == 0;
}

// ---------------------------------------------------------------- equality

class EqualChecker {
 public:
  explicit EqualChecker(bool map_free_vars) : map_free_(map_free_vars) {}

  bool eq(const Expr& a, const Expr& b);
  bool eq(const Stmt& a, const Stmt& b);
  bool eq(const PrimFunc& a, const PrimFunc& b);

 private:
  // A pairing a <-> b kept in both directions, so that the match is one-to-one.
  struct Undo {
    const Object *a, *b, *old_fwd, *old_rev;
  };

  bool eq(const std::vector<Expr>& a, const std::vector<Expr>& b);
  bool eq_expr_node(const BaseExprNode* a, const BaseExprNode* b);
  bool eq_stmt_node(const BaseStmtNode* a, const BaseStmtNode* b);
  bool eq_reduce(const Reduce* a, const Reduce* b);
  template <typename T>
  bool eq_binary(const BaseExprNode* a, const BaseExprNode* b) {
    const T *x = static_cast<const T*>(a), *y = static_cast<const T*>(b);
    return eq(x->a, y->a) && eq(x->b, y->b);
  }

  // Uses of a variable, buffer or tensor: bound or already paired ones must
  // match their partner; an unseen pair is free.
  bool eq_use(const Object* a, const Object* b, bool* unseen);
  bool eq_var(const Var& a, const Var& b);
  bool eq_buffer(const Buffer& a, const Buffer& b);
  bool eq_producer(const Ref<ProducerNode>& a, const Ref<ProducerNode>& b);
  // Dtype, scope, shape and strides, under the current pairing.
  bool eq_buffer_layout(const Buffer& a, const Buffer& b);

  // Pairs a with b: permanently for free objects, until unbind(mark) for bound ones.
  void pair(const Object* a, const Object* b, bool scoped);
  bool bind_var(const Var& a, const Var& b);
  bool bind_buffer(const Buffer& a, const Buffer& b);
  size_t mark() const { return undo_.size(); }
  void unbind(size_t mark);

  bool map_free_;
  std::unordered_map<const Object*, const Object*> fwd_, rev_;
  std::vector<Undo> undo_;
};

const Object* lookup(const std::unordered_map<const Object*, const Object*>& m, const Object* k) {
  auto it = m.find(k);
  return it == m.end() ? nullptr : it->second;
}

void EqualChecker::pair(const Object* a, const Object* b, bool scoped) {
  if (scoped) undo_.push_back({a, b, lookup(fwd_, a), lookup(rev_, b)});
  fwd_[a] = b;
  rev_[b] = a;
}

void EqualChecker::unbind(size_t mark) {
  while (undo_.size() > mark) {
    Undo u = undo_.back();
    undo_.pop_back();
    if (u.old_fwd) fwd_[u.a] = u.old_fwd;
    else fwd_.erase(u.a);
    if (u.old_rev) rev_[u.b] = u.old_rev;
    else rev_.erase(u.b);
  }
}

bool EqualChecker::eq_use(const Object* a, const Object* b, bool* unseen) {
  *unseen = false;
  if (const Object* partner = lookup(fwd_, a)) return partner == b;
  if (lookup(rev_, b)) return false;
  if (!map_free_) return a == b;
  *unseen = true;
  return true;
}

bool EqualChecker::eq_var(const Var& a, const Var& b) {
  if (a->dtype != b->dtype) return false;
  bool unseen = false;
  if (!eq_use(a.get(), b.get(), &unseen)) return false;
  if (unseen) pair(a.get(), b.get(), false);
  return true;
}

bool EqualChecker::eq_buffer_layout(const Buffer& a, const Buffer& b) {
  return a.dtype() == b.dtype() && a.scope() == b.scope() && eq(a.shape(), b.shape()) && eq(a->strides, b->strides);
}

bool EqualChecker::eq_buffer(const Buffer& a, const Buffer& b) {
  bool unseen = false;
  if (!eq_use(a.get(), b.get(), &unseen)) return false;
  if (!unseen) return true;
  // A free buffer seen for the first time: its layout must match, and its
  // data variable joins the pairing like any other free variable.
  if (!eq_buffer_layout(a, b) || !eq_var(a->data, b->data)) return false;
  pair(a.get(), b.get(), false);
  return true;
}

bool EqualChecker::eq_producer(const Ref<ProducerNode>& a, const Ref<ProducerNode>& b) {
  bool unseen = false;
  if (!eq_use(a.get(), b.get(), &unseen)) return false;
  if (!unseen) return true;
  if (a->producer_dtype() != b->producer_dtype() || !eq(a->producer_shape(), b->producer_shape())) return false;
  pair(a.get(), b.get(), false);
  return true;
}

bool EqualChecker::bind_var(const Var& a, const Var& b) {
  if (a->dtype != b->dtype) return false;
  pair(a.get(), b.get(), true);
  return true;
}

bool EqualChecker::bind_buffer(const Buffer& a, const Buffer& b) {
  if (!eq_buffer_layout(a, b) || !bind_var(a->data, b->data)) return false;
  pair(a.get(), b.get(), true);
  return true;
}

bool EqualChecker::eq(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!eq(a[i], b[i])) return false;
  }
  return true;
}

bool EqualChecker::eq(const Expr& a, const Expr& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a->kind != b->kind || a->dtype != b->dtype) return false;
  return eq_expr_node(a.get(), b.get());
}

bool EqualChecker::eq_reduce(const Reduce* a, const Reduce* b) {
  if (a->reduce_kind != b->reduce_kind || a->axis.size() != b->axis.size()) return false;
  size_t m = mark();
  bool ok = true;
  for (size_t i = 0; ok && i < a->axis.size(); ++i) {
    const IterVarNode *x = a->axis[i].get(), *y = b->axis[i].get();
    // The domain is outside the axis' own scope but may use earlier axes.
    ok = x->kind == y->kind && x->thread_tag == y->thread_tag && eq(x->dom.min, y->dom.min) && eq(x->dom.extent, y->dom.extent) && bind_var(x->var, y->var);
  }
  ok = ok && eq(a->source, b->source) && eq(a->condition, b->condition);
  unbind(m);
  return ok;
}

bool EqualChecker::eq_expr_node(const BaseExprNode* a, const BaseExprNode* b) {
  switch (a->kind) {
    case IRNodeKind::IntImm: return static_cast<const IntImm*>(a)->value == static_cast<const IntImm*>(b)->value;
    case IRNodeKind::FloatImm: return float_bits_equal(static_cast<const FloatImm*>(a)->value, static_cast<const FloatImm*>(b)->value);
    case IRNodeKind::StringImm: return static_cast<const StringImm*>(a)->value == static_cast<const StringImm*>(b)->value;
    case IRNodeKind::Variable: return eq_var(Var(static_cast<const Variable*>(a)), Var(static_cast<const Variable*>(b)));
#define KILN_X(T) \
  case IRNodeKind::T: return eq_binary<T>(a, b);
    KILN_X(Add) KILN_X(Sub) KILN_X(Mul) KILN_X(Div) KILN_X(Mod) KILN_X(FloorDiv) KILN_X(FloorMod) KILN_X(Min) KILN_X(Max)
    KILN_X(EQ) KILN_X(NE) KILN_X(LT) KILN_X(LE) KILN_X(GT) KILN_X(GE) KILN_X(And) KILN_X(Or)
#undef KILN_X
    case IRNodeKind::Not: return eq(static_cast<const Not*>(a)->a, static_cast<const Not*>(b)->a);
    case IRNodeKind::Select: {
      const Select *x = static_cast<const Select*>(a), *y = static_cast<const Select*>(b);
      return eq(x->condition, y->condition) && eq(x->true_value, y->true_value) && eq(x->false_value, y->false_value);
    }
    case IRNodeKind::Cast: return eq(static_cast<const Cast*>(a)->value, static_cast<const Cast*>(b)->value);
    case IRNodeKind::Call: {
      const Call *x = static_cast<const Call*>(a), *y = static_cast<const Call*>(b);
      return x->op == y->op && eq(x->args, y->args);
    }
    case IRNodeKind::BufferLoad: {
      const BufferLoad *x = static_cast<const BufferLoad*>(a), *y = static_cast<const BufferLoad*>(b);
      return eq_buffer(Buffer(x->buffer), Buffer(y->buffer)) && eq(x->indices, y->indices) && eq(x->predicate, y->predicate);
    }
    case IRNodeKind::TensorLoad: {
      const TensorLoad *x = static_cast<const TensorLoad*>(a), *y = static_cast<const TensorLoad*>(b);
      return eq_producer(x->producer, y->producer) && eq(x->indices, y->indices);
    }
    case IRNodeKind::Ramp: {
      const Ramp *x = static_cast<const Ramp*>(a), *y = static_cast<const Ramp*>(b);
      return x->lanes == y->lanes && eq(x->base, y->base) && eq(x->stride, y->stride);
    }
    case IRNodeKind::Broadcast: {
      const Broadcast *x = static_cast<const Broadcast*>(a), *y = static_cast<const Broadcast*>(b);
      return x->lanes == y->lanes && eq(x->value, y->value);
    }
    case IRNodeKind::Let: {
      const Let *x = static_cast<const Let*>(a), *y = static_cast<const Let*>(b);
      if (!eq(x->value, y->value)) return false;
      size_t m = mark();
      bool ok = bind_var(x->var, y->var) && eq(x->body, y->body);
      unbind(m);
      return ok;
    }
    case IRNodeKind::Reduce: return eq_reduce(static_cast<const Reduce*>(a), static_cast<const Reduce*>(b));
    case IRNodeKind::For:
    case IRNodeKind::BufferStore:
    case IRNodeKind::Allocate:
    case IRNodeKind::Seq:
    case IRNodeKind::IfThenElse:
    case IRNodeKind::LetStmt:
    case IRNodeKind::Evaluate:
    case IRNodeKind::AttrStmt:
    case IRNodeKind::AssertStmt: break;
  }
  KILN_UNREACHABLE() << "statement node " << ir_node_kind_name(a->kind) << " inside an expression";
  return false;
}

bool EqualChecker::eq(const Stmt& a, const Stmt& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a->kind != b->kind) return false;
  return eq_stmt_node(a.get(), b.get());
}

bool EqualChecker::eq_stmt_node(const BaseStmtNode* a, const BaseStmtNode* b) {
  switch (a->kind) {
    case IRNodeKind::For: {
      const For *x = static_cast<const For*>(a), *y = static_cast<const For*>(b);
      if (x->kind != y->kind || x->thread_tag != y->thread_tag || !eq(x->min, y->min) || !eq(x->extent, y->extent)) return false;
      size_t m = mark();
      bool ok = bind_var(x->loop_var, y->loop_var) && eq(x->body, y->body);
      unbind(m);
      return ok;
    }
    case IRNodeKind::BufferStore: {
      const BufferStore *x = static_cast<const BufferStore*>(a), *y = static_cast<const BufferStore*>(b);
      return eq_buffer(x->buffer, y->buffer) && eq(x->value, y->value) && eq(x->indices, y->indices) && eq(x->predicate, y->predicate);
    }
    case IRNodeKind::Allocate: {
      const Allocate *x = static_cast<const Allocate*>(a), *y = static_cast<const Allocate*>(b);
      size_t m = mark();
      bool ok = bind_buffer(x->buffer, y->buffer) && eq(x->body, y->body);
      unbind(m);
      return ok;
    }
    case IRNodeKind::Seq: {
      const Seq *x = static_cast<const Seq*>(a), *y = static_cast<const Seq*>(b);
      if (x->seq.size() != y->seq.size()) return false;
      for (size_t i = 0; i < x->seq.size(); ++i) {
        if (!eq(x->seq[i], y->seq[i])) return false;
      }
      return true;
    }
    case IRNodeKind::IfThenElse: {
      const IfThenElse *x = static_cast<const IfThenElse*>(a), *y = static_cast<const IfThenElse*>(b);
      return eq(x->condition, y->condition) && eq(x->then_case, y->then_case) && eq(x->else_case, y->else_case);
    }
    case IRNodeKind::LetStmt: {
      const LetStmt *x = static_cast<const LetStmt*>(a), *y = static_cast<const LetStmt*>(b);
      if (!eq(x->value, y->value)) return false;
      size_t m = mark();
      bool ok = bind_var(x->var, y->var) && eq(x->body, y->body);
      unbind(m);
      return ok;
    }
    case IRNodeKind::Evaluate: return eq(static_cast<const Evaluate*>(a)->value, static_cast<const Evaluate*>(b)->value);
    case IRNodeKind::AttrStmt: {
      const AttrStmt *x = static_cast<const AttrStmt*>(a), *y = static_cast<const AttrStmt*>(b);
      return x->key == y->key && eq(x->value, y->value) && eq(x->body, y->body);
    }
    case IRNodeKind::AssertStmt: {
      const AssertStmt *x = static_cast<const AssertStmt*>(a), *y = static_cast<const AssertStmt*>(b);
      return x->message == y->message && eq(x->condition, y->condition) && eq(x->body, y->body);
    }
#define KILN_X(T) case IRNodeKind::T:
    KILN_FOR_EACH_EXPR_NODE(KILN_X)
#undef KILN_X
    break;
  }
  KILN_UNREACHABLE() << "expression node " << ir_node_kind_name(a->kind) << " inside a statement";
  return false;
}

bool EqualChecker::eq(const PrimFunc& a, const PrimFunc& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  const std::vector<Param>& pa = a.params();
  const std::vector<Param>& pb = b.params();
  if (pa.size() != pb.size()) return false;
  // Scalars first, so that a buffer shaped by a later scalar parameter
  // compares its shape against that parameter and not against a free variable.
  for (size_t i = 0; i < pa.size(); ++i) {
    if (pa[i].is_buffer() != pb[i].is_buffer()) return false;
    if (!pa[i].is_buffer() && !bind_var(pa[i].var, pb[i].var)) return false;
  }
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!pa[i].is_buffer()) continue;
    if (!bind_buffer(pa[i].buffer, pb[i].buffer)) return false;
    if (pa[i].var.defined() != pb[i].var.defined()) return false;
    if (pa[i].var.defined() && !bind_var(pa[i].var, pb[i].var)) return false;
  }
  return eq(a.body(), b.body());
}

// ---------------------------------------------------------------- hashing

uint64_t mix(uint64_t x) {
  // splitmix64's finalizer: a bijection with full avalanche.
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t hash_string(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

uint64_t hash_dtype(DataType t) { return (uint64_t(t.code()) << 32) | (uint64_t(t.bits()) << 16) | uint64_t(t.lanes()); }

class Hasher {
 public:
  uint64_t result() const { return h_; }
  void hash(const Expr& e);
  void hash(const Stmt& s);
  void hash(const PrimFunc& f);

 private:
  // Order-dependent accumulation: each step mixes the running state.
  void add(uint64_t v) { h_ = mix(h_ ^ (v + 0x9e3779b97f4a7c15ULL)); }
  void hash(const std::vector<Expr>& v);
  void hash_expr_node(const BaseExprNode* e);
  void hash_stmt_node(const BaseStmtNode* s);
  void hash_reduce(const Reduce* op);

  // Mirrors EqualChecker: an object is named by the order of its introduction.
  bool use(const Object* o);
  void hash_var(const Var& v);
  void hash_buffer(const Buffer& b);
  void hash_producer(const Ref<ProducerNode>& p);
  void hash_buffer_layout(const Buffer& b);
  void define(const Object* o, bool scoped);
  void bind_var(const Var& v);
  void bind_buffer(const Buffer& b);
  size_t mark() const { return undo_.size(); }
  void unbind(size_t mark);

  struct Undo {
    const Object* o;
    bool had;
    uint64_t old;
  };
  uint64_t h_ = 0;
  uint64_t next_index_ = 0;
  std::unordered_map<const Object*, uint64_t> index_;
  std::vector<Undo> undo_;
};

void Hasher::define(const Object* o, bool scoped) {
  if (scoped) {
    auto it = index_.find(o);
    undo_.push_back({o, it != index_.end(), it != index_.end() ? it->second : 0});
  }
  index_[o] = next_index_++;
}

void Hasher::unbind(size_t mark) {
  while (undo_.size() > mark) {
    Undo u = undo_.back();
    undo_.pop_back();
    if (u.had) index_[u.o] = u.old;
    else index_.erase(u.o);
  }
}

bool Hasher::use(const Object* o) {
  auto it = index_.find(o);
  if (it == index_.end()) return false;
  add(it->second);
  return true;
}

void Hasher::hash_var(const Var& v) {
  add(hash_dtype(v->dtype));
  if (use(v.get())) return;
  define(v.get(), false);
  add(0xf4eeULL);
}

void Hasher::hash_buffer_layout(const Buffer& b) {
  add(hash_dtype(b.dtype()));
  add(hash_string(b.scope()));
  add(b.shape().size());
  hash(b.shape());
  add(b->strides.size());
  hash(b->strides);
}

void Hasher::hash_buffer(const Buffer& b) {
  if (use(b.get())) return;
  hash_buffer_layout(b);
  hash_var(b->data);
  define(b.get(), false);
  add(0xf4ee0bULL);
}

void Hasher::hash_producer(const Ref<ProducerNode>& p) {
  if (use(p.get())) return;
  add(hash_dtype(p->producer_dtype()));
  add(p->producer_shape().size());
  hash(p->producer_shape());
  define(p.get(), false);
  add(0xf4ee0cULL);
}

void Hasher::bind_var(const Var& v) {
  add(hash_dtype(v->dtype));
  define(v.get(), true);
}

void Hasher::bind_buffer(const Buffer& b) {
  hash_buffer_layout(b);
  bind_var(b->data);
  define(b.get(), true);
}

void Hasher::hash(const std::vector<Expr>& v) {
  add(v.size());
  for (const Expr& e : v) hash(e);
}

void Hasher::hash(const Expr& e) {
  if (!e.defined()) {
    add(0xdeadULL);
    return;
  }
  add(static_cast<uint64_t>(e->kind) + 1);
  add(hash_dtype(e->dtype));
  hash_expr_node(e.get());
}

void Hasher::hash_reduce(const Reduce* op) {
  add(static_cast<uint64_t>(op->reduce_kind));
  add(op->axis.size());
  size_t m = mark();
  for (const IterVar& iv : op->axis) {
    add(static_cast<uint64_t>(iv.kind()));
    add(hash_string(iv->thread_tag));
    hash(iv.dom().min);
    hash(iv.dom().extent);
    bind_var(iv.var());
  }
  hash(op->source);
  hash(op->condition);
  unbind(m);
}

void Hasher::hash_expr_node(const BaseExprNode* e) {
  switch (e->kind) {
    case IRNodeKind::IntImm: return add(static_cast<uint64_t>(static_cast<const IntImm*>(e)->value));
    case IRNodeKind::FloatImm: {
      double v = static_cast<const FloatImm*>(e)->value;
      uint64_t bits = 0x7ff8000000000000ULL;  // every NaN hashes alike, as they compare alike
      if (!std::isnan(v)) std::memcpy(&bits, &v, sizeof(bits));
      return add(bits);
    }
    case IRNodeKind::StringImm: return add(hash_string(static_cast<const StringImm*>(e)->value));
    case IRNodeKind::Variable: return hash_var(Var(static_cast<const Variable*>(e)));
#define KILN_X(T)                                 \
  case IRNodeKind::T:                             \
    hash(static_cast<const T*>(e)->a);            \
    return hash(static_cast<const T*>(e)->b);
    KILN_X(Add) KILN_X(Sub) KILN_X(Mul) KILN_X(Div) KILN_X(Mod) KILN_X(FloorDiv) KILN_X(FloorMod) KILN_X(Min) KILN_X(Max)
    KILN_X(EQ) KILN_X(NE) KILN_X(LT) KILN_X(LE) KILN_X(GT) KILN_X(GE) KILN_X(And) KILN_X(Or)
#undef KILN_X
    case IRNodeKind::Not: return hash(static_cast<const Not*>(e)->a);
    case IRNodeKind::Select: {
      const Select* op = static_cast<const Select*>(e);
      hash(op->condition);
      hash(op->true_value);
      return hash(op->false_value);
    }
    case IRNodeKind::Cast: return hash(static_cast<const Cast*>(e)->value);
    case IRNodeKind::Call: {
      const Call* op = static_cast<const Call*>(e);
      add(static_cast<uint64_t>(op->op));
      return hash(op->args);
    }
    case IRNodeKind::BufferLoad: {
      const BufferLoad* op = static_cast<const BufferLoad*>(e);
      hash_buffer(Buffer(op->buffer));
      if (op->predicate.defined()) hash(op->predicate);
      return hash(op->indices);
    }
    case IRNodeKind::TensorLoad: {
      const TensorLoad* op = static_cast<const TensorLoad*>(e);
      hash_producer(op->producer);
      return hash(op->indices);
    }
    case IRNodeKind::Ramp: {
      const Ramp* op = static_cast<const Ramp*>(e);
      add(op->lanes);
      hash(op->base);
      return hash(op->stride);
    }
    case IRNodeKind::Broadcast: {
      const Broadcast* op = static_cast<const Broadcast*>(e);
      add(op->lanes);
      return hash(op->value);
    }
    case IRNodeKind::Let: {
      const Let* op = static_cast<const Let*>(e);
      hash(op->value);
      size_t m = mark();
      bind_var(op->var);
      hash(op->body);
      return unbind(m);
    }
    case IRNodeKind::Reduce: return hash_reduce(static_cast<const Reduce*>(e));
    case IRNodeKind::For:
    case IRNodeKind::BufferStore:
    case IRNodeKind::Allocate:
    case IRNodeKind::Seq:
    case IRNodeKind::IfThenElse:
    case IRNodeKind::LetStmt:
    case IRNodeKind::Evaluate:
    case IRNodeKind::AttrStmt:
    case IRNodeKind::AssertStmt: break;
  }
  KILN_UNREACHABLE() << "statement node " << ir_node_kind_name(e->kind) << " inside an expression";
}

void Hasher::hash(const Stmt& s) {
  if (!s.defined()) {
    add(0xdeadULL);
    return;
  }
  add(static_cast<uint64_t>(s->kind) + 1);
  hash_stmt_node(s.get());
}

void Hasher::hash_stmt_node(const BaseStmtNode* s) {
  switch (s->kind) {
    case IRNodeKind::For: {
      const For* op = static_cast<const For*>(s);
      add(static_cast<uint64_t>(op->kind));
      add(hash_string(op->thread_tag));
      hash(op->min);
      hash(op->extent);
      size_t m = mark();
      bind_var(op->loop_var);
      hash(op->body);
      return unbind(m);
    }
    case IRNodeKind::BufferStore: {
      const BufferStore* op = static_cast<const BufferStore*>(s);
      hash_buffer(op->buffer);
      hash(op->value);
      if (op->predicate.defined()) hash(op->predicate);
      return hash(op->indices);
    }
    case IRNodeKind::Allocate: {
      const Allocate* op = static_cast<const Allocate*>(s);
      size_t m = mark();
      bind_buffer(op->buffer);
      hash(op->body);
      return unbind(m);
    }
    case IRNodeKind::Seq: {
      const Seq* op = static_cast<const Seq*>(s);
      add(op->seq.size());
      for (const Stmt& x : op->seq) hash(x);
      return;
    }
    case IRNodeKind::IfThenElse: {
      const IfThenElse* op = static_cast<const IfThenElse*>(s);
      hash(op->condition);
      hash(op->then_case);
      return hash(op->else_case);
    }
    case IRNodeKind::LetStmt: {
      const LetStmt* op = static_cast<const LetStmt*>(s);
      hash(op->value);
      size_t m = mark();
      bind_var(op->var);
      hash(op->body);
      return unbind(m);
    }
    case IRNodeKind::Evaluate: return hash(static_cast<const Evaluate*>(s)->value);
    case IRNodeKind::AttrStmt: {
      const AttrStmt* op = static_cast<const AttrStmt*>(s);
      add(hash_string(op->key));
      hash(op->value);
      return hash(op->body);
    }
    case IRNodeKind::AssertStmt: {
      const AssertStmt* op = static_cast<const AssertStmt*>(s);
      add(hash_string(op->message));
      hash(op->condition);
      return hash(op->body);
    }
#define KILN_X(T) case IRNodeKind::T:
    KILN_FOR_EACH_EXPR_NODE(KILN_X)
#undef KILN_X
    break;
  }
  KILN_UNREACHABLE() << "expression node " << ir_node_kind_name(s->kind) << " inside a statement";
}

void Hasher::hash(const PrimFunc& f) {
  if (!f.defined()) {
    add(0xdeadULL);
    return;
  }
  add(f.params().size());
  for (const Param& p : f.params()) {
    add(p.is_buffer());
    if (!p.is_buffer()) bind_var(p.var);
  }
  for (const Param& p : f.params()) {
    if (!p.is_buffer()) continue;
    bind_buffer(p.buffer);
    add(p.var.defined());
    if (p.var.defined()) bind_var(p.var);
  }
  hash(f.body());
}

}  // namespace

bool structural_equal(const Expr& a, const Expr& b, bool map_free_vars) {
  // Only at the root is identity proof of equality: below it, a shared
  // subtree may sit under different bindings on the two sides.
  if (a.same_as(b)) return true;
  return EqualChecker(map_free_vars).eq(a, b);
}

bool structural_equal(const Stmt& a, const Stmt& b, bool map_free_vars) {
  if (a.same_as(b)) return true;
  return EqualChecker(map_free_vars).eq(a, b);
}

bool structural_equal(const PrimFunc& a, const PrimFunc& b) {
  if (a.same_as(b)) return true;
  // Names are ignored, so anything the parameters do not bind (a shape
  // variable, say) is matched by first occurrence too, as the hash does.
  return EqualChecker(true).eq(a, b);
}

uint64_t structural_hash(const Expr& e) {
  Hasher h;
  h.hash(e);
  return h.result();
}

uint64_t structural_hash(const Stmt& s) {
  Hasher h;
  h.hash(s);
  return h.result();
}

uint64_t structural_hash(const PrimFunc& f) {
  Hasher h;
  h.hash(f);
  return h.result();
}

}  // namespace kiln
