// storage_flatten: n-dimensional buffer accesses become one-dimensional ones.
#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/pass/passes.h"
#include "kiln/support/error.h"

#include <climits>
#include <sstream>
#include <unordered_map>

namespace kiln::pass {

namespace {

// Index arithmetic is int32 throughout lowering: a 64-bit shape or index is
// narrowed here so that later passes and codegen see one index type.
static Expr to_i32(const Expr& e) {
  if (e.dtype().element_of() == DataType::Int(32)) return e;
  return cast(DataType::Int(32, e.dtype().lanes()), e);
}

// The number of elements a buffer's storage must hold: the product of the
// shape for compact layout, else one past the largest reachable offset.
static Expr flat_size(const Buffer& b) {
  if (b.ndim() == 0) return Expr(1);
  if (b->strides.empty()) return arith::simplify(to_i32(b.num_elements()));
  std::vector<Expr> strides = b.effective_strides();
  Expr size = Expr(1);
  for (int i = 0; i < b.ndim(); ++i) size = size + (to_i32(b.shape()[i]) - 1) * to_i32(strides[i]);
  return arith::simplify(size);
}

// Index arithmetic is int32, so a buffer must fit in 2^31 - 1 elements: a
// larger one's offsets (and its size, folded in int32) would wrap, to a
// negative size or, worse, to a small positive one. Its size is computed here
// in 64 bits from the constant extents and strides; symbolic sizes are checked
// against the same limit when the arrays are bound at run time.
static void check_addressable(const Buffer& b) {
  std::vector<Expr> strides = b->strides.empty() ? std::vector<Expr>{} : b.effective_strides();
  int64_t elements = 1, last = 0;  // compact: product of extents; strided: one past the largest offset
  for (int i = 0; i < b.ndim(); ++i) {
    const int64_t* n = as_const_int(b.shape()[i]);
    const int64_t* s = strides.empty() ? nullptr : as_const_int(strides[i]);
    if (!n || (!strides.empty() && !s)) return;
    if (*n == 0) return;  // no elements
    bool overflow = strides.empty() ? __builtin_mul_overflow(elements, *n, &elements)
                                    : __builtin_add_overflow(last, (*n - 1) * *s, &last);
    if (overflow) elements = last = INT64_MAX;
  }
  int64_t size = strides.empty() ? elements : (last == INT64_MAX ? last : last + 1);
  if (size <= INT32_MAX) return;
  std::ostringstream shape;
  for (int i = 0; i < b.ndim(); ++i) shape << (i ? ", " : "[") << b.shape()[i];
  KILN_USER_ERROR() << "buffer '" << b.name() << "' of shape " << shape.str() << "] needs " << (size == INT64_MAX ? "more than 2^63" : std::to_string(size))
                                     << " elements, more than the 2147483647 (2^31 - 1) that kiln's 32-bit index arithmetic "
                                     << "can address; split the work into smaller pieces (e.g. a smaller batch per call)";
}

// True when the buffer is already compact and one-dimensional in int32.
static bool already_flat(const Buffer& b) {
  return b.ndim() == 1 && b->strides.empty() && b.shape()[0].dtype() == DataType::Int(32);
}

class Flattener : public IRMutator {
 public:
  // The flat counterpart of b, made once per buffer so that every access to
  // one buffer ends up on one node. It keeps b's data variable: storage is
  // keyed by it in the interpreter and in codegen.
  Buffer flat(const Buffer& b) {
    auto it = flat_.find(b.get());
    if (it != flat_.end()) return it->second;
    check_addressable(b);
    Buffer r = already_flat(b) ? b : Buffer(new BufferNode(b.name(), b.dtype(), {flat_size(b)}, {}, b->data, b.scope()));
    flat_.emplace(b.get(), r);
    return r;
  }

  using IRMutator::mutate;

 protected:
  using IRMutator::visit;

  Expr visit(const BufferLoad* op) override {
    Buffer b(op->buffer);
    std::vector<Expr> idx;
    mutate_exprs(op->indices, &idx);
    Buffer fb = flat(b);
    Expr i = flat_index(b, idx);
    if (fb.same_as(b) && i.same_as(op->indices[0])) return op;
    return BufferLoad::make(fb, {i}, op->predicate);
  }

  Stmt visit(const BufferStore* op) override {
    Expr v = mutate(op->value);
    std::vector<Expr> idx;
    mutate_exprs(op->indices, &idx);
    Buffer fb = flat(op->buffer);
    Expr i = flat_index(op->buffer, idx);
    if (fb.same_as(op->buffer) && i.same_as(op->indices[0]) && v.same_as(op->value)) return op;
    return BufferStore::make(fb, v, {i}, op->predicate);
  }

  Stmt visit(const Allocate* op) override {
    Stmt body = mutate(op->body);
    Buffer fb = flat(op->buffer);
    if (fb.same_as(op->buffer) && body.same_as(op->body)) return op;
    return Allocate::make(fb, body);
  }

 private:
  // sum(index[i] * stride[i]), leaving out unit strides and zero terms so
  // that the common case reads i*64 + j without a simplifier pass.
  static Expr flat_index(const Buffer& b, const std::vector<Expr>& idx) {
    if (already_flat(b)) return to_i32(idx[0]);
    std::vector<Expr> strides = b.effective_strides();
    Expr sum;
    for (size_t i = 0; i < idx.size(); ++i) {
      Expr x = to_i32(idx[i]);
      if (is_zero(x)) continue;
      Expr s = to_i32(strides[i]);
      Expr term = is_one(s) ? x : x * s;
      sum = sum.defined() ? sum + term : term;
    }
    return sum.defined() ? sum : Expr(0);
  }

  std::unordered_map<const BufferNode*, Buffer> flat_;
};

}  // namespace

PrimFunc storage_flatten(const PrimFunc& f) {
  // Parameters keep their logical, multi-dimensional buffers: they are the
  // function's signature (what callers pass and Module::call checks). The
  // body reads and writes their flat views, which share the same `data`.
  Flattener fl;
  for (const Param& p : f.params())
    if (p.is_buffer()) fl.flat(p.buffer);
  return f.with_body(fl.mutate(f.body()));
}

}  // namespace kiln::pass
