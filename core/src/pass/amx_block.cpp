// read_amx_block (kiln/pass/amx.h): the parts of a nest marked "amx". The
// loops' roles follow from the indices (k the loop C's index leaves out, n
// the one stepping it by 1, m the other); strides come from substituting
// loop values into each index and simplifying the differences.
#include <sstream>
#include <vector>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/pass/amx.h"
#include "kiln/support/error.h"

namespace kiln::pass {

namespace {

// A nest of loops storing zero (an accumulator's initialisation): its store, and the product of its extents.
const BufferStore* zero_nest(const Stmt& s, int64_t* count) {
  Stmt t = s;
  int64_t n = 1;
  for (;;) {
    while (const AttrStmt* a = t.as<AttrStmt>()) t = a->body;
    const For* f = t.as<For>();
    if (!f) break;
    const int64_t* e = as_const_int(f->extent);
    if (!e) return nullptr;
    n *= *e;
    t = f->body;
  }
  const BufferStore* st = t.as<BufferStore>();
  const FloatImm* fz = st ? st->value.as<FloatImm>() : nullptr;
  if (!st || st->value.dtype().lanes() != 1 || !(is_zero(st->value) || (fz && fz->value == 0.0))) return nullptr;
  *count = n;
  return st;
}

class AmxReader {
 public:
  std::vector<const For*> loops_;

  [[noreturn]] void fail(const std::string& why) const {
    std::ostringstream os;
    os << "amx: the nest marked amx at loop '" << (loops_.empty() ? std::string("?") : loops_[0]->loop_var.name()) << "' " << why
       << "; an amx nest is loops of reduction outside three loops k (up to 16 or a multiple of 16), m and n (up to 32) around "
       << "C[c] = C[c] + dot_i8x4/dot_bf16x2(A[a], B[b])";
    KILN_USER_ERROR() << os.str();
    throw;  // unreachable
  }

  // The index with the loop vars at their mins, loop `which` moved by `by`.
  Expr at(const Expr& index, int which, int64_t by) const {
    return arith::simplify(substitute(index, [&](const Variable* v) -> Expr {
      for (int l = 0; l < static_cast<int>(loops_.size()); ++l)
        if (loops_[l]->loop_var.get() == v) return l == which ? loops_[l]->min + make_const(loops_[l]->min.dtype(), double(by)) : loops_[l]->min;
      return Expr();
    }));
  }

  // Offset of the index when loop `which` moves by `by` (a constant, else fail).
  int64_t step(const Expr& index, int which, int64_t by, const char* what) const {
    Expr d = arith::simplify(at(index, which, by) - at(index, which, 0));
    const int64_t* v = as_const_int(d);
    if (!v) fail(std::string("has an index of ") + what + " that is not affine in loop '" + loops_[which]->loop_var.name() + "'");
    return *v;
  }

  // The stride along loop `which`, checked to hold over `span` iterations.
  int64_t stride(const Expr& index, int which, int64_t span, const char* what) const {
    int64_t s = step(index, which, 1, what);
    if (span > 1 && step(index, which, span - 1, what) != s * (span - 1))
      fail(std::string("has an index of ") + what + " that is not affine in loop '" + loops_[which]->loop_var.name() + "'");
    return s;
  }

  // The accumulator's initialisation between the loops (when the nest holds one): its store, its count, the loops above it.
  const BufferStore* zero_store = nullptr;
  int64_t zeroed = 0;
  size_t zero_at = 0;

  // Collects the nest's loops (and an initialisation between them); returns the statement inside.
  Stmt collect(const AttrStmt* op) {
    Stmt s = op->body;
    for (;;) {
      while (const AttrStmt* a = s.as<AttrStmt>()) s = a->body;
      // Below loops over blocks: the accumulator's initialisation, then the reduction.
      if (const Seq* q = s.as<Seq>(); q && q->seq.size() == 2 && !zero_store && (zero_store = zero_nest(q->seq[0], &zeroed))) {
        zero_at = loops_.size();
        s = q->seq[1];
        continue;
      }
      const For* f = s.as<For>();
      if (!f) break;
      loops_.push_back(f);
      if (!as_const_int(f->extent) || f->kind == ForKind::Parallel || f->kind == ForKind::ThreadBinding) fail("has a loop of no constant extent or a parallel loop");
      s = f->body;
    }
    return s;
  }

  AmxBlock read(const AttrStmt* op) {
    Stmt s = collect(op);
    const int outer = static_cast<int>(loops_.size()) - 3;
    if (outer < 0) fail("has " + std::to_string(loops_.size()) + " loops");
    const BufferStore* st = s.as<BufferStore>();
    if (!st || st->indices.size() != 1 || st->predicate.defined() || st->value.dtype().lanes() != 1) fail("does not hold one scalar store of a flat buffer");
    const Add* add = st->value.as<Add>();
    const Call* dot = add ? add->b.as<Call>() : nullptr;
    const BufferLoad* acc = add ? add->a.as<BufferLoad>() : nullptr;
    if (add && !dot) dot = add->a.as<Call>(), acc = add->b.as<BufferLoad>();
    if (!dot || !acc || (dot->op != Intrinsic::DotI8x4 && dot->op != Intrinsic::DotBF16x2)) fail("stores no accumulation of dot_i8x4 or dot_bf16x2");
    const BufferLoad* A = dot->args[0].as<BufferLoad>();
    const BufferLoad* B = dot->args[1].as<BufferLoad>();
    if (acc->buffer.get() != st->buffer.get() || acc->indices.size() != 1 || !A || !B || A->indices.size() != 1 || B->indices.size() != 1)
      fail("does not read its accumulator and two flat operands");
    const Expr &ci = st->indices[0], &ai = A->indices[0], &bi = B->indices[0];
    std::vector<int64_t> ext;
    for (const For* f : loops_) ext.push_back(*as_const_int(f->extent));
    // Roles of the innermost three: k leaves C's index alone, n steps it by 1.
    int k = -1, n = -1, m = -1;
    for (int l = outer; l < outer + 3; ++l) {
      int64_t c = step(ci, l, 1, "C");
      if (c == 0 && k < 0) k = l;
      else if (c == 1 && n < 0) n = l;
      else m = l;
    }
    if (k < 0 || n < 0 || m < 0) fail("has no loop that C's index leaves out (k), steps by 1 (n) and steps by its rows (m)");
    const int64_t M = ext[m], N = ext[n], K = ext[k];
    if (M > 32 || N > 32 || (K > 16 && K % 16 != 0)) fail("has m=" + std::to_string(M) + ", n=" + std::to_string(N) + ", k=" + std::to_string(K));
    int64_t ldc = stride(ci, m, M, "C"), lda = stride(ai, m, M, "A"), ldb = stride(bi, k, K, "B");
    int64_t tile_n = std::min<int64_t>(N, 16);
    if (stride(ci, n, tile_n, "C") != 1 || stride(bi, n, tile_n, "B") != 1 || stride(ai, k, K, "A") != 1) fail("reads C, B along n or A along k with a stride other than 1");
    if (stride(ai, n, N, "A") != 0 || stride(bi, m, M, "B") != 0 || stride(ci, k, K, "C") != 0) fail("has A depend on n or B on m");
    int64_t c16 = 16, b16 = 16;
    if (N > 16) {
      c16 = step(ci, n, 16, "C"), b16 = step(bi, n, 16, "B");
      if (step(ci, n, N - 1, "C") != c16 + N - 17 || step(bi, n, N - 1, "B") != b16 + N - 17) fail("reads C or B's second 16 columns not contiguously");
    }
    auto base = [&](const BufferLoad* l) { return BufferLoad::make(Buffer(l->buffer), {at(l->indices[0], 0, 0)}); };
    AmxBlock blk;
    // The outer loops: blocks (C's index uses them), then more of the reduction (a convolution's taps and channel blocks).
    for (int l = 0; l < outer; ++l) {
      int64_t c = stride(ci, l, ext[l], "C");
      if (c != 0 && !blk.outer.empty()) fail("has loop '" + loops_[l]->loop_var.name() + "' of blocks (C's index uses it) inside a loop of the reduction");
      if (c != 0) blk.blocks.push_back({ext[l], c, stride(ai, l, ext[l], "A"), stride(bi, l, ext[l], "B")});
      else blk.outer.push_back({ext[l], stride(ai, l, ext[l], "A"), stride(bi, l, ext[l], "B")});
    }
    blk.c = base(acc), blk.a = base(A), blk.b = base(B);
    blk.ldc = ldc, blk.c_col16 = c16, blk.lda = lda, blk.ldb = ldb, blk.b_col16 = b16;
    blk.m = M, blk.n = N, blk.k = K;
    blk.bf16 = dot->op == Intrinsic::DotBF16x2;
    blk.a_signed = A->dtype.is_int(), blk.b_signed = B->dtype.is_int();
    if (zero_store) {
      if (zero_store->buffer.get() != acc->buffer.get() || zeroed != M * N || zero_at == 0 || zero_at != blk.blocks.size())
        fail("initialises something other than its block of accumulators between its loops");
      blk.zero_init = true;
    }
    DataType want = blk.bf16 ? DataType::Float(32) : DataType::Int(32);
    if (acc->dtype != want) fail("accumulates " + acc->dtype.str() + " where its dot gives " + want.str());
    return blk;
  }
};

}  // namespace

AmxBlock read_amx_block(const AttrStmt* marked) {
  KILN_CHECK(marked && marked->key == kAmxPragma) << "read_amx_block: not an amx nest";
  return AmxReader().read(marked);
}

}  // namespace kiln::pass
