// Byte quads: the int8 kernels pack four consecutive bytes of a buffer into
// one uint32 word (ops::pad_quads_nchwc, the operand of dot_i8x4),
//   uint32(x[i]) + uint32(x[i + 1]) * 256 + uint32(x[i + 2]) * 65536 + uint32(x[i + 3]) * 16777216,
// each byte either a uint8 load or an int8 load moved to uint8 by +128
// (uint8(int32(x[i + j]) + 128), the top bit flipped). On a little-endian
// target that word is the four bytes loaded as one: one unaligned uint32
// load (xor 0x80808080 for the flipped form). Left to LLVM, the four byte
// loads of a packing loop became per-byte inserts (vpinsrb) once vectorised,
// which made the packing of a 1x1 convolution's input cost several times its
// AMX product. The same bytes are read as before.
#include "codegen_llvm.h"
#include "kiln/arith/analyzer.h"
#include "kiln/ir/op.h"

namespace kiln::codegen {

namespace {

struct QuadByte {
  const BufferLoad* load = nullptr;
  bool flipped = false;  // int8 + 128
};

// The byte of a term: a scalar uint8 load, or uint8(int32(int8 load) + 128).
bool byte_of(const Expr& e, QuadByte* out) {
  if (const BufferLoad* l = e.as<BufferLoad>()) {
    if (l->dtype != DataType::UInt(8) || l->predicate.defined() || l->indices.size() != 1) return false;
    *out = {l, false};
    return true;
  }
  const Cast* u8 = e.as<Cast>();
  if (!u8 || u8->dtype != DataType::UInt(8)) return false;
  const Add* add = u8->value.as<Add>();
  if (!add || add->dtype != DataType::Int(32)) return false;
  const int64_t* c = as_const_int(add->b);
  const Cast* widen = add->a.as<Cast>();
  if (!c || *c != 128 || !widen) return false;
  const BufferLoad* l = widen->value.as<BufferLoad>();
  if (!l || l->dtype != DataType::Int(8) || l->predicate.defined() || l->indices.size() != 1) return false;
  *out = {l, true};
  return true;
}

// A term uint32(byte) * 256^j (j = 0: no multiply); its j, or -1.
int term_shift(const Expr& e, QuadByte* byte) {
  int64_t scale = 1;
  const Expr* widened = &e;
  if (const Mul* m = e.as<Mul>()) {
    const int64_t* c = as_const_int(m->b);
    if (!c) return -1;
    scale = *c;
    widened = &m->a;
  }
  const Cast* w = widened->as<Cast>();
  if (!w || w->dtype != DataType::UInt(32) || !byte_of(w->value, byte)) return -1;
  for (int j = 0; j < 4; ++j)
    if (scale == int64_t{1} << (8 * j)) return j;
  return -1;
}

void flatten_sum(const Expr& e, std::vector<Expr>* terms) {
  if (const Add* a = e.as<Add>(); a && terms->size() < 5) {
    flatten_sum(a->a, terms);
    flatten_sum(a->b, terms);
    return;
  }
  terms->push_back(e);
}

}  // namespace

llvm::Value* CodeGenLLVM::try_emit_byte_quad(const Add* op) {
  if (op->dtype != DataType::UInt(32) || !module_->getDataLayout().isLittleEndian()) return nullptr;
  std::vector<Expr> terms;
  flatten_sum(Expr(op), &terms);
  if (terms.size() != 4) return nullptr;
  QuadByte bytes[4];
  bool seen[4] = {false, false, false, false};
  for (const Expr& t : terms) {
    QuadByte b;
    int j = term_shift(t, &b);
    if (j < 0 || seen[j]) return nullptr;
    seen[j] = true;
    bytes[j] = b;
  }
  for (int j = 1; j < 4; ++j) {
    if (bytes[j].load->buffer.get() != bytes[0].load->buffer.get() || bytes[j].flipped != bytes[0].flipped) return nullptr;
    const int64_t* d = as_const_int(arith::simplify(bytes[j].load->indices[0] - bytes[0].load->indices[0]));
    if (!d || *d != j) return nullptr;
  }
  llvm::Value* ptr = element_pointer(bytes[0].load->buffer.get(), codegen(bytes[0].load->indices[0]));
  llvm::Value* word = builder_->CreateAlignedLoad(builder_->getInt32Ty(), ptr, llvm::Align(1));
  return bytes[0].flipped ? builder_->CreateXor(word, builder_->getInt32(0x80808080u)) : word;
}

}  // namespace kiln::codegen
