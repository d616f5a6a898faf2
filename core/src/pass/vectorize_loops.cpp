// vectorize_loops: turns vectorized loops of constant extent into vector code.
//
// The loop variable becomes Ramp(min, 1, lanes). An expression that does not
// depend on it stays scalar and is broadcast only where it meets a vector,
// and affine index arithmetic is kept in Ramp form (ramp + scalar, ramp *
// scalar, ramp + ramp) with simplified base and stride, so that a contiguous
// access reads A[ramp(i*64 + j*8, 1, 8)]. Anything the rewrite cannot
// express lane by lane raises CannotVectorize, and the loop stays serial.
#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/pass/passes.h"
#include "kiln/support/error.h"

#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

namespace kiln::pass {

namespace {

// Wider vectors than this buy nothing on any target (64 lanes is already four
// AVX-512 registers of float32) and exceed what the interpreter evaluates;
// such loops stay serial.
constexpr int64_t kMaxLanes = 64;

// KILN_MASKED_TAILS=0 turns symbolic tails back into power-of-two chunks
// (to compare the two; the masked tail is the default).
static bool masked_tails_enabled() {
  const char* v = std::getenv("KILN_MASKED_TAILS");
  return !v || std::string(v) != "0";
}

// Raised inside Vectorizer, caught by the loop that asked; never leaves the pass.
struct CannotVectorize {};

static int lanes_of(const Expr& e) { return e.dtype().lanes(); }

static Expr widen(const Expr& e, int lanes) {
  if (lanes_of(e) == lanes) return e;
  KILN_CHECK(lanes_of(e) == 1) << "widening a vector of " << lanes_of(e) << " lanes to " << lanes;
  return Broadcast::make(e, lanes);
}

static Expr make_ramp(const Expr& base, const Expr& stride, int lanes) {
  Expr b = arith::simplify(base), s = arith::simplify(stride);
  if (is_zero(s)) return Broadcast::make(b, lanes);
  return Ramp::make(b, s, lanes);
}

// A scalar or Broadcast as (value, 0), a Ramp as (base, stride).
static bool as_affine(const Expr& e, Expr* base, Expr* stride) {
  if (const Ramp* r = e.as<Ramp>()) {
    *base = r->base;
    *stride = r->stride;
    return true;
  }
  Expr v = e;
  if (const Broadcast* b = e.as<Broadcast>()) v = b->value;
  if (lanes_of(v) != 1) return false;
  *base = v;
  *stride = make_zero(v.dtype());
  return true;
}

// The set of buffers (by data variable) read anywhere in s.
static std::unordered_set<const Variable*> loaded_buffers(const Stmt& s) {
  std::unordered_set<const Variable*> out;
  post_order_visit(s, [&](const Expr& e) {
    if (const BufferLoad* l = e.as<BufferLoad>()) out.insert(l->buffer->data.get());
  });
  return out;
}

// Whether every lane of a vector index lies inside a local allocation of
// constant size, so that a masked tail may read it whole and blend its store
// (keeping the accumulator in registers, where masked memory ops would not).
using LocalBounds = std::function<bool(const BufferNode* buffer, const Expr& index)>;

class Vectorizer : public IRMutator {
 public:
  // With a predicate (a bool vector of `lanes`), every vector access is
  // masked by it: the lanes off it touch no memory (a masked tail).
  Vectorizer(const For* loop, int lanes, const Stmt& body, Expr predicate = Expr(), LocalBounds local = nullptr)
      : var_(loop->loop_var.get()), lanes_(lanes), predicate_(std::move(predicate)), local_(std::move(local)), loaded_(loaded_buffers(body)) {
    DataType t = loop->loop_var.dtype();
    Expr min = loop->min.dtype() == t ? loop->min : Cast::make(t, loop->min);
    ramp_ = Ramp::make(min, IntImm::make(t, 1), lanes);
  }

  using IRMutator::mutate;
  // The body must be scalar: a nested vector would need lanes of lanes.
  Expr mutate(const Expr& e) override {
    if (e.defined() && lanes_of(e) != 1) throw CannotVectorize{};
    return IRMutator::mutate(e);
  }

 protected:
  using IRMutator::visit;

  Expr visit(const Variable* op) override {
    if (op == var_) return ramp_;
    auto it = let_map_.find(op);
    return it != let_map_.end() ? it->second : Expr(op);
  }

  Expr visit(const Add* op) override { return binary(op); }
  Expr visit(const Sub* op) override { return binary(op); }
  Expr visit(const Mul* op) override { return binary(op); }
  Expr visit(const Div* op) override { return division(op); }
  Expr visit(const Mod* op) override { return division(op); }
  Expr visit(const FloorDiv* op) override { return division(op); }
  Expr visit(const FloorMod* op) override { return division(op); }
  Expr visit(const Min* op) override { return binary(op); }
  Expr visit(const Max* op) override { return binary(op); }
  Expr visit(const EQ* op) override { return binary(op); }
  Expr visit(const NE* op) override { return binary(op); }
  Expr visit(const LT* op) override { return binary(op); }
  Expr visit(const LE* op) override { return binary(op); }
  Expr visit(const GT* op) override { return binary(op); }
  Expr visit(const GE* op) override { return binary(op); }
  Expr visit(const And* op) override { return binary(op); }
  Expr visit(const Or* op) override { return binary(op); }

  Expr visit(const Select* op) override {
    Expr c = mutate(op->condition), t = mutate(op->true_value), f = mutate(op->false_value);
    if (c.same_as(op->condition) && t.same_as(op->true_value) && f.same_as(op->false_value)) return op;
    int n = std::max({lanes_of(c), lanes_of(t), lanes_of(f)});
    // A scalar condition selects whole vectors and is cheaper kept scalar.
    return Select::make(c, widen(t, n), widen(f, n));
  }

  Expr visit(const Cast* op) override {
    Expr v = mutate(op->value);
    if (v.same_as(op->value)) return op;
    if (const Broadcast* b = v.as<Broadcast>()) return Broadcast::make(Cast::make(op->dtype, b->value), b->lanes);
    return Cast::make(op->dtype.with_lanes(lanes_of(v)), v);
  }

  Expr visit(const Call* op) override {
    std::vector<Expr> args;
    if (!mutate_exprs(op->args, &args)) return op;
    size_t first = 0;
    if (op->op == Intrinsic::IfThenElse) {
      // Only the branch taken may be evaluated, so lanes cannot disagree.
      if (lanes_of(args[0]) != 1) throw CannotVectorize{};
      first = 1;
    }
    int n = 1;
    for (size_t i = first; i < args.size(); ++i) n = std::max(n, lanes_of(args[i]));
    for (size_t i = first; i < args.size(); ++i) args[i] = widen(args[i], n);
    return Call::make(op->dtype.with_lanes(n), op->op, std::move(args));
  }

  Expr visit(const BufferLoad* op) override {
    std::vector<Expr> idx;
    if (!mutate_exprs(op->indices, &idx)) return op;
    idx = widen_all(std::move(idx));
    bool masked = lanes_of(idx[0]) > 1 && !whole_local(op->buffer.get(), idx);
    return BufferLoad::make(Buffer(op->buffer), std::move(idx), masked ? predicate_ : Expr());
  }

  Expr visit(const Let* op) override {
    Expr value = mutate(op->value);
    Var var = bind_let(op->var, value);
    Expr body = mutate(op->body);
    let_map_.erase(op->var.get());
    if (!var.defined()) return body;
    if (var.same_as(op->var) && value.same_as(op->value) && body.same_as(op->body)) return op;
    return Let::make(var, value, body);
  }

  Expr visit(const TensorLoad*) override { throw CannotVectorize{}; }
  Expr visit(const Reduce*) override { throw CannotVectorize{}; }

  Stmt visit(const For*) override { throw CannotVectorize{}; }
  Stmt visit(const Allocate*) override { throw CannotVectorize{}; }

  Stmt visit(const BufferStore* op) override {
    Expr value = mutate(op->value);
    std::vector<Expr> idx;
    bool changed = mutate_exprs(op->indices, &idx);
    // Every lane storing to one place is a reduction across lanes (or a
    // repeated store): only the serial loop gets it right.
    if (!changed) throw CannotVectorize{};
    // Lanes may share an address unless some index is a proper ramp; then a
    // read of the same buffer could see another lane's store too early.
    if (!has_distinct_lanes(idx) && loaded_.count(op->buffer->data.get())) throw CannotVectorize{};
    idx = widen_all(std::move(idx));
    value = widen(value, lanes_);
    if (predicate_.defined() && whole_local(op->buffer.get(), idx)) {
      // The lanes off the mask keep their value (a reduction's identity): a blend, no masked store.
      Expr old = BufferLoad::make(op->buffer, idx);
      return BufferStore::make(op->buffer, Select::make(predicate_, value, old), std::move(idx));
    }
    return BufferStore::make(op->buffer, value, std::move(idx), predicate_);
  }

  Stmt visit(const IfThenElse* op) override {
    if (lanes_of(mutate(op->condition)) != 1) throw CannotVectorize{};
    return IRMutator::visit(op);
  }

  Stmt visit(const LetStmt* op) override {
    Expr value = mutate(op->value);
    Var var = bind_let(op->var, value);
    Stmt body = mutate(op->body);
    let_map_.erase(op->var.get());
    if (!var.defined()) return body;
    if (var.same_as(op->var) && value.same_as(op->value) && body.same_as(op->body)) return op;
    return LetStmt::make(var, value, body);
  }

  Stmt visit(const AttrStmt* op) override {
    if (lanes_of(mutate(op->value)) != 1) throw CannotVectorize{};
    return IRMutator::visit(op);
  }

  Stmt visit(const AssertStmt* op) override {
    if (lanes_of(mutate(op->condition)) != 1) throw CannotVectorize{};
    return IRMutator::visit(op);
  }

 private:
  bool whole_local(const BufferNode* buffer, const std::vector<Expr>& idx) const {
    return predicate_.defined() && local_ && idx.size() == 1 && local_(buffer, idx[0]);
  }

  // Under a mask the lanes off it compute too, on the zeros their loads
  // read: an integer division by such a vector could trap.
  template <typename T>
  Expr division(const T* op) {
    Expr out = binary(op);
    if (predicate_.defined() && out.dtype().is_integer() && lanes_of(out) > 1) {
      Expr b = mutate(op->b);
      if (lanes_of(b) > 1 && !b.as<Broadcast>()) throw CannotVectorize{};
    }
    return out;
  }

  template <typename T>
  Expr binary(const T* op) {
    Expr a = mutate(op->a), b = mutate(op->b);
    if (a.same_as(op->a) && b.same_as(op->b)) return op;
    int n = std::max(lanes_of(a), lanes_of(b));
    if (n == 1) return T::make(a, b);
    Expr ba, sa, bb, sb;
    if (!as_affine(a, &ba, &sa) || !as_affine(b, &bb, &sb)) return T::make(widen(a, n), widen(b, n));
    bool ramp_a = a.as<Ramp>() != nullptr, ramp_b = b.as<Ramp>() != nullptr;
    if (!ramp_a && !ramp_b) return Broadcast::make(T::make(ba, bb), n);
    if constexpr (std::is_same_v<T, Add> || std::is_same_v<T, Sub>) {
      return make_ramp(T::make(ba, bb), T::make(sa, sb), n);
    }
    if constexpr (std::is_same_v<T, Mul>) {
      // ramp * c stays a ramp; ramp * ramp is not affine.
      if (!ramp_b) return make_ramp(Mul::make(ba, bb), Mul::make(sa, bb), n);
      if (!ramp_a) return make_ramp(Mul::make(ba, bb), Mul::make(ba, sb), n);
    }
    return T::make(widen(a, n), widen(b, n));
  }

  // Binds a let variable whose value became a vector: a Ramp or Broadcast
  // is substituted (so indices stay recognisable, and the let disappears:
  // undefined is returned); another vector gets a fresh vector variable.
  Var bind_let(const Var& var, const Expr& value) {
    if (lanes_of(value) == 1) return var;
    if (value.as<Ramp>() || value.as<Broadcast>()) {
      let_map_[var.get()] = value;
      return Var();
    }
    Var v(var.name(), value.dtype());
    let_map_[var.get()] = v;
    return v;
  }

  std::vector<Expr> widen_all(std::vector<Expr> idx) const {
    int n = 1;
    for (const Expr& i : idx) n = std::max(n, lanes_of(i));
    if (n > 1) {
      for (Expr& i : idx) i = widen(i, n);
    }
    return idx;
  }

  static bool has_distinct_lanes(const std::vector<Expr>& idx) {
    for (const Expr& i : idx) {
      const Ramp* r = i.as<Ramp>();
      if (r && as_const_int(r->stride) && !is_zero(r->stride)) return true;
    }
    return false;
  }

  const Variable* var_;
  int lanes_;
  Expr predicate_;
  LocalBounds local_;
  Expr ramp_;
  std::unordered_set<const Variable*> loaded_;
  // Let variables rebound in vector form.
  std::unordered_map<const Variable*, Expr> let_map_;
};

// A vectorized loop wider than kChunk lanes and not a multiple of them (the
// remainder panel of a tile, 50 columns as 32 + 18) runs as two vector
// loops, the multiple of kChunk lanes and the rest: LLVM widens an odd
// vector such as <18 x float> to the next power of two and splits its
// memory accesses lane by lane; a 20-wide register tile ran at 4 GFLOP/s
// where 16 + 4 lanes run at the speed of its neighbours (AVX-512).
constexpr int64_t kChunk = 8;

class LoopVectorizer : public IRMutator {
 protected:
  using IRMutator::visit;

  Stmt in_chunks(const For* op, int64_t extent, const Stmt& body) {
    int64_t head = extent / kChunk * kChunk;
    DataType t = op->min.dtype();
    // The copy of the body gets buffers of its own (as loop_partition's pieces).
    Stmt first = For::make(op->loop_var, op->min, IntImm::make(t, head), ForKind::Vectorized, body, op->thread_tag);
    Stmt rest = For::make(op->loop_var, arith::simplify(Add::make(op->min, IntImm::make(t, head))), IntImm::make(t, extent - head), ForKind::Vectorized,
                          fresh_allocations(body), op->thread_tag);
    return Seq::make({mutate(first), mutate(rest)});
  }

  // A vectorized loop of symbolic extent e bounded by a constant (the last,
  // partial tile of a dynamic shape's vector axis: min(n - jo*32, 32)) runs
  // as whole vectors of the powers of two in e, largest first: chunk c runs
  // when bit c of e is set, at the offset of e's higher bits. 27 elements are
  // 16 + 8 + 2 + 1 lanes instead of 27 scalar iterations (a softmax's exp
  // over a row of 7 ran 10x slower one element at a time).
  Stmt tail_in_chunks(const For* op, int64_t bound, const Stmt& body) {
    if (Stmt masked = masked_tail(op, bound, body); masked.defined()) return masked;
    DataType t = op->extent.dtype();
    Var e(op->loop_var->name + ".extent", t);
    int64_t top = 1;
    while (top * 2 <= bound) top *= 2;
    std::vector<Stmt> pieces;
    for (int64_t c = top; c >= 1; c /= 2) {
      Expr set = EQ::make(FloorMod::make(FloorDiv::make(e, IntImm::make(t, c)), IntImm::make(t, 2)), IntImm::make(t, 1));
      Expr offset = arith::simplify(Add::make(op->min, Mul::make(FloorDiv::make(e, IntImm::make(t, 2 * c)), IntImm::make(t, 2 * c))));
      Stmt chunk = For::make(op->loop_var, offset, IntImm::make(t, c), ForKind::Vectorized, fresh_allocations(body), op->thread_tag);
      const For* loop = chunk.as<For>();
      pieces.push_back(IfThenElse::make(set, visit_for(loop, loop->body)));
    }
    return LetStmt::make(e, op->extent, Seq::make(pieces));
  }

  // The same tail as ONE vector iteration of `bound` lanes, its accesses
  // masked by lane < e (llvm.masked.load/store): one piece instead of up to
  // six, and code that compiles in a sixth of the time. The lanes off the
  // mask touch no memory and compute on zeros; a store to an accumulator
  // leaves its masked-off lanes as they were (a reduction's identity).
  // Undefined when the body cannot be vectorized so (the chunks then).
  Stmt masked_tail(const For* op, int64_t bound, const Stmt& body) {
    if (!masked_tails_) return Stmt();
    DataType t = op->extent.dtype();
    Var e(op->loop_var->name + ".extent", t);
    int lanes = static_cast<int>(bound);
    Expr mask = LT::make(Ramp::make(IntImm::make(t, 0), IntImm::make(t, 1), lanes), Broadcast::make(e, lanes));
    try {
      Stmt v = Vectorizer(op, lanes, body, mask, [this](const BufferNode* b, const Expr& i) { return inside_local(b, i); }).mutate(body);
      // A tail of no lanes runs nothing, its scalar loads included.
      return LetStmt::make(e, op->extent, IfThenElse::make(GT::make(e, IntImm::make(t, 0)), v));
    } catch (const CannotVectorize&) {
      return Stmt();
    }
  }

  // Whether a masked tail may read and blend all lanes of index in a buffer
  // allocated here: its elements are constant in number and no parallel loop
  // lies between (other threads may own the lanes off the mask). Lane 0 is
  // in bounds (the loop ran it); the allocation grows by the other lanes'
  // reach, so the read is too. Records that growth.
  bool inside_local(const BufferNode* buffer, const Expr& index) {
    auto it = local_.find(buffer->data.get());
    if (it == local_.end() || it->second.parallel_depth != parallel_depth_) return false;
    Expr base, stride;
    if (!as_affine(index, &base, &stride)) return false;
    const int64_t* s = as_const_int(stride);
    if (!s || *s < 0) return false;
    it->second.pad = std::max(it->second.pad, *s * (lanes_of(index) - 1));
    return true;
  }

 public:
  explicit LoopVectorizer(bool masked_tails) : masked_tails_(masked_tails) {}

 protected:
  struct Local {
    int64_t size;
    int parallel_depth;
    int64_t pad = 0;
  };
  bool masked_tails_;
  int parallel_depth_ = 0;
  std::unordered_map<const Variable*, Local> local_;

  Stmt visit(const Allocate* op) override {
    // Accesses read it flattened (through its data variable): its elements, when all constant.
    int64_t size = 1;
    for (const Expr& e : op->buffer->shape) {
      const int64_t* c = as_const_int(e);
      size = c && size > 0 ? size * *c : -1;
    }
    const Variable* data = op->buffer->data.get();
    if (size <= 0 || !op->buffer->strides.empty() || !masked_tails_) return IRMutator::visit(op);
    local_[data] = Local{size, parallel_depth_};
    Stmt body = mutate(op->body);
    int64_t pad = local_[data].pad;
    local_.erase(data);
    Buffer b = op->buffer;
    if (pad > 0) {
      DataType t = op->buffer->shape[0].dtype();
      b = Buffer(new BufferNode(b->name, b->dtype, {IntImm::make(t, size + pad)}, {}, b->data, b->scope));
    }
    if (b.same_as(op->buffer) && body.same_as(op->body)) return op;
    return Allocate::make(b, body);
  }

  Stmt visit(const For* op) override {
    // Inner loops first: a vectorized inner loop makes the outer one serial.
    parallel_depth_ += op->kind == ForKind::Parallel;
    Stmt body = mutate(op->body);
    parallel_depth_ -= op->kind == ForKind::Parallel;
    const int64_t* extent = as_const_int(op->extent);
    if (op->kind == ForKind::Vectorized && !extent) {
      arith::Analyzer ana;
      int64_t bound = arith::max_through_clamps(op->extent, &ana);
      if (bound >= 2 && bound <= kMaxLanes) return tail_in_chunks(op, bound, body);
    }
    return visit_for(op, body);
  }

  // The loop with its (already vectorized) body, as a vector or a serial loop.
  Stmt visit_for(const For* op, const Stmt& body) {
    const int64_t* extent = as_const_int(op->extent);
    if (op->kind != ForKind::Vectorized) {
      return body.same_as(op->body) ? Stmt(op) : For::make(op->loop_var, op->min, op->extent, op->kind, body, op->thread_tag);
    }
    if (extent && *extent == 1) {
      const Variable* v = op->loop_var.get();
      return substitute(body, [&](const Variable* x) { return x == v ? op->min : Expr(); });
    }
    if (extent && *extent > kChunk && *extent % kChunk != 0 && *extent <= kMaxLanes) return in_chunks(op, *extent, body);
    if (extent && *extent > 1 && *extent <= kMaxLanes) {
      try {
        return Vectorizer(op, static_cast<int>(*extent), body).mutate(body);
      } catch (const CannotVectorize&) {
      }
    }
    return For::make(op->loop_var, op->min, op->extent, ForKind::Serial, body, op->thread_tag);
  }
};

}  // namespace

PrimFunc vectorize_loops(const PrimFunc& f) { return f.with_body(LoopVectorizer(masked_tails_enabled()).mutate(f.body())); }

}  // namespace kiln::pass
