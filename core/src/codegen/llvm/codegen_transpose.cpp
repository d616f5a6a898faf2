// Transposed tiles: a loop of n iterations whose body is one vector store
// reading its lanes down a column,
//   for (i = b; i < b + n; ++i) out[f(i) + ramp(0, 1, V)] = in[g(i) + ramp(0, S, V)],
// with g(i + 1) = g(i) + 1 (a transpose's tile: i walks along the input's
// rows, the V lanes down its columns), would gather V elements a lane at a
// time. Instead the V rows of n contiguous elements the loop reads are
// loaded whole and transposed in registers, n x n at a time (log2 n rounds
// of two-source shuffles, which LLVM turns into unpack/permute
// instructions); each column is then stored where iteration i stores.
// The same elements are read as before: none outside what the loop reads.
#include "codegen_llvm.h"
#include "kiln/arith/analyzer.h"
#include "kiln/ir/op.h"

namespace kiln::codegen {

namespace {

// The stride of a column-reading load the loop can transpose: `load`'s index
// is Ramp(g, S, V) with S free of the loop variable and g one step per
// iteration; undefined otherwise.
Expr column_stride(const BufferLoad& load, const Var& loop_var) {
  const Ramp* r = load.indices.size() == 1 ? load.indices[0].as<Ramp>() : nullptr;
  if (!r || is_one(r->stride)) return Expr();
  auto is_loop_var = [&](const Variable* v) { return v == loop_var.get(); };
  if (uses_var(r->stride, is_loop_var)) return Expr();
  Expr next = substitute(r->base, [&](const Variable* v) -> Expr {
    return v == loop_var.get() ? Expr(loop_var) + make_const(loop_var.dtype(), 1) : Expr();
  });
  const int64_t* step = as_const_int(arith::simplify(next - r->base));
  return step && *step == 1 ? r->stride : Expr();
}

// Rows r0..r0+n-1 of `rows` (n contiguous elements each) transposed in
// place: rows[r0 + k] becomes column k. Round t swaps bit t of the row with
// bit t of the column.
void transpose_square(llvm::IRBuilder<>& b, std::vector<llvm::Value*>& rows, int r0, int n) {
  for (int h = 1; h < n; h *= 2) {
    std::vector<int> lo_mask(n), hi_mask(n);
    for (int c = 0; c < n; ++c) {
      lo_mask[c] = (c & h) ? n + c - h : c;
      hi_mask[c] = (c & h) ? n + c : c + h;
    }
    for (int r = 0; r < n; ++r) {
      if (r & h) continue;
      llvm::Value* a = rows[r0 + r];
      llvm::Value* c = rows[r0 + r + h];
      rows[r0 + r] = b.CreateShuffleVector(a, c, lo_mask);
      rows[r0 + r + h] = b.CreateShuffleVector(a, c, hi_mask);
    }
  }
}

}  // namespace

bool CodeGenLLVM::emit_transposed_tile(const For* op) {
  const int64_t* extent = as_const_int(op->extent);
  const BufferStore* store = op->body.as<BufferStore>();
  if (!extent || !store || store->indices.size() != 1 || store->predicate.defined()) return false;
  const int n = static_cast<int>(*extent);
  const BufferLoad* load = store->value.as<BufferLoad>();
  if (n < 4 || n > 16 || (n & (n - 1)) != 0 || !load || load->predicate.defined() || load->buffer.get() == store->buffer.get()) return false;
  const int lanes = load->dtype.lanes();
  if (lanes % n != 0 || lanes > 64 || store->indices[0].dtype().lanes() != lanes || load->dtype.is_bool()) return false;
  Expr stride = column_stride(*load, op->loop_var);
  Expr store_base = dense_ramp_base(store->indices[0]);
  if (!stride.defined() || !store_base.defined()) return false;

  // The rows: lane r of iteration i reads in[g(b) + r * S + (i - b)].
  const BufferNode* in = load->buffer.get();
  DataType row_type = load->dtype.with_lanes(n);
  llvm::Align align(std::max(1, in->dtype.bytes()));
  llvm::Value* begin = codegen(op->min);
  fn_.vars[op->loop_var.get()] = begin;
  llvm::Value* g0 = codegen(load->indices[0].as<Ramp>()->base);
  llvm::Value* s = codegen(stride);
  std::vector<llvm::Value*> rows(lanes);
  for (int r = 0; r < lanes; ++r) {
    llvm::Value* at = builder_->CreateAdd(g0, builder_->CreateMul(s, llvm::ConstantInt::get(s->getType(), r)));
    rows[r] = from_memory(builder_->CreateAlignedLoad(llvm_mem_type(row_type), element_pointer(in, at), align), row_type);
  }
  for (int r0 = 0; r0 < lanes; r0 += n) transpose_square(*builder_, rows, r0, n);
  // Iteration k stores column k of every block of n rows, the blocks side by side.
  const BufferNode* out = store->buffer.get();
  DataType out_type = load->dtype;
  for (int k = 0; k < n; ++k) {
    fn_.vars[op->loop_var.get()] = builder_->CreateAdd(begin, llvm::ConstantInt::get(begin->getType(), k), op->loop_var->name, false, true);
    std::vector<llvm::Value*> parts;
    for (int r0 = 0; r0 < lanes; r0 += n) parts.push_back(rows[r0 + k]);
    llvm::Value* column = concat_vectors(parts);
    builder_->CreateAlignedStore(to_memory(column, out_type), element_pointer(out, codegen(store_base)), llvm::Align(std::max(1, out->dtype.bytes())));
  }
  fn_.vars.erase(op->loop_var.get());
  return true;
}

}  // namespace kiln::codegen
