// Expressions of CodeGenLLVM: arithmetic, comparisons, loads and vectors.
#include <llvm/IR/Intrinsics.h>

#include "codegen_llvm.h"
#include "kiln/support/error.h"

namespace kiln::codegen {

void CodeGenLLVM::visit(const IntImm* op) { value = int_const(op->dtype, op->value); }

void CodeGenLLVM::visit(const FloatImm* op) { value = float_const(op->dtype, op->value); }

void CodeGenLLVM::visit(const StringImm* op) { value = builder_->CreateGlobalStringPtr(op->value); }

void CodeGenLLVM::visit(const Variable* op) {
  auto it = fn_.vars.find(op);
  KILN_USER_CHECK(it != fn_.vars.end()) << "function " << current_func_name_ << " uses variable '" << op->name
                                       << "' which is neither a parameter nor bound by a loop or let; pass it as a scalar parameter";
  value = it->second;
}

// Signed integer arithmetic of 32 bits and more does not wrap (as in Halide
// and TVM): `nsw` lets LLVM widen i32 indices into i64 addresses.
static bool no_signed_wrap(DataType t) { return t.is_int() && t.bits() >= 32; }

llvm::Value* CodeGenLLVM::emit_arith(IRNodeKind op, DataType t, llvm::Value* a, llvm::Value* b) {
  if (t.is_bfloat()) {
    DataType f = DataType::Float(32, t.lanes());
    return f32_to_bf16(emit_arith(op, f, bf16_to_f32(a), bf16_to_f32(b)));
  }
  bool fp = t.is_float(), sgn = t.is_int(), nsw = no_signed_wrap(t);
  switch (op) {
    case IRNodeKind::Add: return fp ? builder_->CreateFAdd(a, b) : builder_->CreateAdd(a, b, "", false, nsw);
    case IRNodeKind::Sub: return fp ? builder_->CreateFSub(a, b) : builder_->CreateSub(a, b, "", false, nsw);
    case IRNodeKind::Mul: return fp ? builder_->CreateFMul(a, b) : builder_->CreateMul(a, b, "", false, nsw);
    case IRNodeKind::Div: return fp ? builder_->CreateFDiv(a, b) : sgn ? builder_->CreateSDiv(a, b) : builder_->CreateUDiv(a, b);
    case IRNodeKind::Mod: return fp ? builder_->CreateFRem(a, b) : sgn ? builder_->CreateSRem(a, b) : builder_->CreateURem(a, b);
    case IRNodeKind::Min:
      if (fp) return emit_float_min_max(false, a, b);
      return builder_->CreateBinaryIntrinsic(sgn ? llvm::Intrinsic::smin : llvm::Intrinsic::umin, a, b);
    case IRNodeKind::Max:
      if (fp) return emit_float_min_max(true, a, b);
      return builder_->CreateBinaryIntrinsic(sgn ? llvm::Intrinsic::smax : llvm::Intrinsic::umax, a, b);
    default: break;
  }
  KILN_UNREACHABLE() << "emit_arith of " << ir_node_kind_name(op);
  return nullptr;
}

// A constant (scalar or splat) that is not NaN.
static bool is_non_nan_constant(llvm::Value* v) {
  auto* c = llvm::dyn_cast<llvm::Constant>(v);
  if (c && c->getType()->isVectorTy()) c = c->getSplatValue();
  auto* f = llvm::dyn_cast_or_null<llvm::ConstantFP>(c);
  return f && !f->isNaN();
}

// Float min and max propagate NaN, as ONNX's and PyTorch's do (relu(NaN) is
// NaN, and a NaN inside a max-pool window or a row's max stays). Against a
// constant that is not NaN (relu's 0, a clip bound) one unordered compare
// does it, the cost of a plain max; otherwise NaN in `a` is tested apart.
llvm::Value* CodeGenLLVM::emit_float_min_max(bool is_max, llvm::Value* a, llvm::Value* b) {
  if (is_non_nan_constant(a)) std::swap(a, b);
  llvm::Value* pick_a = is_max ? builder_->CreateFCmpUGT(a, b) : builder_->CreateFCmpULT(a, b);
  if (!is_non_nan_constant(b)) {
    llvm::Value* ordered_pick = is_max ? builder_->CreateFCmpOGT(a, b) : builder_->CreateFCmpOLT(a, b);
    pick_a = builder_->CreateOr(ordered_pick, builder_->CreateFCmpUNO(a, a));
  }
  return builder_->CreateSelect(pick_a, a, b);
}

// Floor division and modulo (Python semantics). Positive constant divisors,
// the common case in index arithmetic, take the short paths: a shift or mask
// for powers of two, otherwise one truncating division (which LLVM turns into
// a multiply) and a fix-up for negative dividends.
llvm::Value* CodeGenLLVM::emit_floor_div_mod(bool is_div, DataType t, llvm::Value* a, llvm::Value* b, const Expr& divisor) {
  if (t.is_uint()) return is_div ? builder_->CreateUDiv(a, b) : builder_->CreateURem(a, b);
  const int64_t* c = as_const_int(divisor);
  if (c && *c > 0 && (*c & (*c - 1)) == 0) {
    int shift = 0;
    while ((int64_t(1) << shift) < *c) ++shift;
    if (is_div) return builder_->CreateAShr(a, int_const(t, shift));
    return builder_->CreateAnd(a, int_const(t, *c - 1));
  }
  llvm::Value* zero = llvm::Constant::getNullValue(a->getType());
  llvm::Value* q = builder_->CreateSDiv(a, b);
  llvm::Value* r = builder_->CreateSRem(a, b);
  // The truncated result is one too high when the remainder is non-zero and
  // its sign differs from the divisor's.
  llvm::Value* adjust;
  if (c && *c > 0) adjust = builder_->CreateICmpSLT(r, zero);
  else adjust = builder_->CreateAnd(builder_->CreateICmpNE(r, zero), builder_->CreateICmpNE(builder_->CreateICmpSLT(r, zero), builder_->CreateICmpSLT(b, zero)));
  if (is_div) return builder_->CreateSub(q, builder_->CreateZExt(adjust, q->getType()));
  return builder_->CreateSelect(adjust, builder_->CreateAdd(r, b), r);
}

llvm::Value* CodeGenLLVM::emit_compare(IRNodeKind op, DataType t, llvm::Value* a, llvm::Value* b) {
  if (t.is_bfloat()) {
    a = bf16_to_f32(a);
    b = bf16_to_f32(b);
    t = DataType::Float(32, t.lanes());
  }
  if (t.is_float()) {
    switch (op) {
      case IRNodeKind::EQ: return builder_->CreateFCmpOEQ(a, b);
      case IRNodeKind::NE: return builder_->CreateFCmpUNE(a, b);
      case IRNodeKind::LT: return builder_->CreateFCmpOLT(a, b);
      case IRNodeKind::LE: return builder_->CreateFCmpOLE(a, b);
      case IRNodeKind::GT: return builder_->CreateFCmpOGT(a, b);
      case IRNodeKind::GE: return builder_->CreateFCmpOGE(a, b);
      default: break;
    }
  }
  bool sgn = t.is_int();
  switch (op) {
    case IRNodeKind::EQ: return builder_->CreateICmpEQ(a, b);
    case IRNodeKind::NE: return builder_->CreateICmpNE(a, b);
    case IRNodeKind::LT: return sgn ? builder_->CreateICmpSLT(a, b) : builder_->CreateICmpULT(a, b);
    case IRNodeKind::LE: return sgn ? builder_->CreateICmpSLE(a, b) : builder_->CreateICmpULE(a, b);
    case IRNodeKind::GT: return sgn ? builder_->CreateICmpSGT(a, b) : builder_->CreateICmpUGT(a, b);
    case IRNodeKind::GE: return sgn ? builder_->CreateICmpSGE(a, b) : builder_->CreateICmpUGE(a, b);
    default: break;
  }
  KILN_UNREACHABLE() << "emit_compare of " << ir_node_kind_name(op);
  return nullptr;
}

#define KILN_ARITH_VISIT(T)                                                            \
  void CodeGenLLVM::visit(const T* op) {                                               \
    llvm::Value* a = codegen(op->a);                                                   \
    llvm::Value* b = codegen(op->b);                                                   \
    value = emit_arith(IRNodeKind::T, op->dtype, a, b);                                \
  }
KILN_ARITH_VISIT(Sub)
KILN_ARITH_VISIT(Mul)
KILN_ARITH_VISIT(Div)
KILN_ARITH_VISIT(Mod)
KILN_ARITH_VISIT(Min)
KILN_ARITH_VISIT(Max)
#undef KILN_ARITH_VISIT

void CodeGenLLVM::visit(const FloorDiv* op) {
  llvm::Value* a = codegen(op->a);
  llvm::Value* b = codegen(op->b);
  value = emit_floor_div_mod(true, op->dtype, a, b, op->b);
}

void CodeGenLLVM::visit(const FloorMod* op) {
  llvm::Value* a = codegen(op->a);
  llvm::Value* b = codegen(op->b);
  value = emit_floor_div_mod(false, op->dtype, a, b, op->b);
}

#define KILN_CMP_VISIT(T)                                                              \
  void CodeGenLLVM::visit(const T* op) {                                               \
    llvm::Value* a = codegen(op->a);                                                   \
    llvm::Value* b = codegen(op->b);                                                   \
    value = emit_compare(IRNodeKind::T, op->a.dtype(), a, b);                          \
  }
KILN_CMP_VISIT(EQ)
KILN_CMP_VISIT(NE)
KILN_CMP_VISIT(LT)
KILN_CMP_VISIT(LE)
KILN_CMP_VISIT(GT)
KILN_CMP_VISIT(GE)
#undef KILN_CMP_VISIT

void CodeGenLLVM::visit(const And* op) {
  llvm::Value* a = codegen(op->a);
  value = builder_->CreateAnd(a, codegen(op->b));
}

void CodeGenLLVM::visit(const Or* op) {
  llvm::Value* a = codegen(op->a);
  value = builder_->CreateOr(a, codegen(op->b));
}

void CodeGenLLVM::visit(const Not* op) { value = builder_->CreateNot(codegen(op->a)); }

void CodeGenLLVM::visit(const Select* op) {
  llvm::Value* c = codegen(op->condition);
  llvm::Value* t = codegen(op->true_value);
  llvm::Value* f = codegen(op->false_value);
  value = builder_->CreateSelect(c, t, f);
}

void CodeGenLLVM::visit(const Cast* op) { value = cast_value(codegen(op->value), op->value.dtype(), op->dtype); }

void CodeGenLLVM::visit(const Call* op) {
  switch (op->op) {
    case Intrinsic::IfThenElse: value = emit_branch_select(codegen(op->args[0]), op->args[1], op->args[2]); return;
    case Intrinsic::Likely: value = codegen(op->args[0]); return;
    case Intrinsic::PackBF16x2: value = emit_pack_bf16x2(codegen(op->args[0]), codegen(op->args[1])); return;
    case Intrinsic::DotBF16x2: value = emit_dot_bf16x2(nullptr, codegen(op->args[0]), codegen(op->args[1])); return;
    case Intrinsic::DotI8x4:
      value = emit_dot_i8x4(nullptr, codegen(op->args[0]), codegen(op->args[1]), op->args[0].dtype().is_int(), op->args[1].dtype().is_int());
      return;
    default: value = emit_math(op); return;
  }
}

llvm::Value* CodeGenLLVM::emit_branch_select(llvm::Value* cond, const Expr& then_value, const Expr& else_value) {
  llvm::Function* f = fn_.function;
  auto* then_bb = llvm::BasicBlock::Create(*ctx_, "if_then", f);
  auto* else_bb = llvm::BasicBlock::Create(*ctx_, "if_else", f);
  auto* merge_bb = llvm::BasicBlock::Create(*ctx_, "if_end", f);
  builder_->CreateCondBr(cond, then_bb, else_bb);
  builder_->SetInsertPoint(then_bb);
  llvm::Value* t = codegen(then_value);
  then_bb = builder_->GetInsertBlock();
  builder_->CreateBr(merge_bb);
  builder_->SetInsertPoint(else_bb);
  llvm::Value* e = codegen(else_value);
  else_bb = builder_->GetInsertBlock();
  builder_->CreateBr(merge_bb);
  builder_->SetInsertPoint(merge_bb);
  llvm::PHINode* phi = builder_->CreatePHI(t->getType(), 2);
  phi->addIncoming(t, then_bb);
  phi->addIncoming(e, else_bb);
  return phi;
}

// ------------------------------------------------------------ memory

llvm::Value* CodeGenLLVM::buffer_base(const BufferNode* buffer) {
  auto it = fn_.vars.find(buffer->data.get());
  KILN_USER_CHECK(it != fn_.vars.end()) << "function " << current_func_name_ << " accesses buffer '" << buffer->name
                                       << "' which is neither a parameter nor allocated; pass it as a buffer parameter or allocate it";
  return it->second;
}

llvm::Value* CodeGenLLVM::element_pointer(const BufferNode* buffer, llvm::Value* index) {
  return builder_->CreateInBoundsGEP(llvm_mem_type(buffer->dtype), buffer_base(buffer), index);
}

llvm::Value* CodeGenLLVM::concat_vectors(const std::vector<llvm::Value*>& parts) {
  KILN_CHECK(!parts.empty()) << "concat_vectors of no vectors";
  auto* part_ty = llvm::cast<llvm::FixedVectorType>(parts[0]->getType());
  int w = static_cast<int>(part_ty->getNumElements());
  llvm::Value* out = parts[0];
  for (size_t k = 1; k < parts.size(); ++k) {
    int have = static_cast<int>(llvm::cast<llvm::FixedVectorType>(out->getType())->getNumElements());
    std::vector<int> widen, join;
    for (int i = 0; i < have; ++i) widen.push_back(i < w ? i : -1);
    for (int i = 0; i < have + w; ++i) join.push_back(i);
    llvm::Value* part = have == w ? parts[k] : builder_->CreateShuffleVector(parts[k], widen);
    out = builder_->CreateShuffleVector(out, part, join);
  }
  return out;
}

// The base of an index that is a dense ramp (stride one): Ramp(b, 1, n), or
// such a ramp plus a broadcast, which the vectoriser may leave unfolded.
Expr dense_ramp_base(const Expr& index) {
  if (const Ramp* r = index.as<Ramp>()) return is_one(r->stride) ? r->base : Expr();
  if (const Add* add = index.as<Add>()) {
    if (const Broadcast* b = add->b.as<Broadcast>()) {
      Expr base = dense_ramp_base(add->a);
      return base.defined() ? Add::make(base, b->value) : Expr();
    }
    if (const Broadcast* b = add->a.as<Broadcast>()) {
      Expr base = dense_ramp_base(add->b);
      return base.defined() ? Add::make(b->value, base) : Expr();
    }
  }
  return Expr();
}

static void check_flat(const std::vector<Expr>& indices, const BufferNode* buffer, const char* what) {
  KILN_CHECK(indices.size() == 1) << what << " of buffer '" << buffer->name << "' with " << indices.size()
                                  << " indices: codegen needs flattened storage (run the flatten-storage pass first)";
}

void CodeGenLLVM::visit(const BufferLoad* op) {
  const BufferNode* buf = op->buffer.get();
  check_flat(op->indices, buf, "load");
  const Expr& index = op->indices[0];
  DataType t = op->dtype;
  llvm::Align align(std::max(1, buf->dtype.bytes()));
  int lanes = t.lanes();
  if (lanes == 1) {
    llvm::Value* ptr = element_pointer(buf, codegen(index));
    value = from_memory(builder_->CreateAlignedLoad(llvm_mem_type(t), ptr, align), t);
    return;
  }
  if (op->predicate.defined()) {
    // A masked tail: the lanes off the mask touch no memory and read 0.
    llvm::Value* mask = codegen(op->predicate);
    llvm::Type* mem = llvm_mem_type(t);
    llvm::Value* zero = llvm::Constant::getNullValue(mem);
    if (Expr base = dense_ramp_base(index); base.defined()) {
      value = from_memory(builder_->CreateMaskedLoad(mem, element_pointer(buf, codegen(base)), align, mask, zero), t);
    } else {
      value = from_memory(builder_->CreateMaskedGather(mem, element_pointer(buf, codegen(index)), align, mask, zero), t);
    }
    return;
  }
  if (Expr base = dense_ramp_base(index); base.defined()) {
    llvm::Value* ptr = element_pointer(buf, codegen(base));
    value = from_memory(builder_->CreateAlignedLoad(llvm_mem_type(t), ptr, align), t);
    return;
  }
  if (const Broadcast* b = index.as<Broadcast>()) {
    llvm::Value* ptr = element_pointer(buf, codegen(b->value));
    value = splat(from_memory(builder_->CreateAlignedLoad(llvm_mem_type(t.element_of()), ptr, align), t.element_of()), lanes);
    return;
  }
  // Any other vector index: a gather (LLVM picks vgather or per-lane loads).
  llvm::Value* ptrs = element_pointer(buf, codegen(index));
  value = from_memory(builder_->CreateMaskedGather(llvm_mem_type(t), ptrs, align), t);
}

void CodeGenLLVM::visit(const BufferStore* op) {
  const BufferNode* buf = op->buffer.get();
  check_flat(op->indices, buf, "store");
  const Expr& index = op->indices[0];
  int lanes = index.dtype().lanes();
  DataType t = op->value.dtype();
  KILN_CHECK(t.lanes() == lanes || t.lanes() == 1) << "store of " << t.str() << " into " << buf->name << " with an index of " << lanes << " lanes";
  llvm::Value* v = splat(codegen(op->value), t.lanes() == 1 ? lanes : 1);
  t = t.with_lanes(lanes);
  v = to_memory(v, t);
  llvm::Align align(std::max(1, buf->dtype.bytes()));
  if (lanes == 1) {
    builder_->CreateAlignedStore(v, element_pointer(buf, codegen(index)), align);
    return;
  }
  if (op->predicate.defined()) {
    llvm::Value* mask = codegen(op->predicate);
    if (Expr base = dense_ramp_base(index); base.defined()) {
      builder_->CreateMaskedStore(v, element_pointer(buf, codegen(base)), align, mask);
    } else {
      builder_->CreateMaskedScatter(v, element_pointer(buf, codegen(index)), align, mask);
    }
    return;
  }
  if (Expr base = dense_ramp_base(index); base.defined()) {
    builder_->CreateAlignedStore(v, element_pointer(buf, codegen(base)), align);
    return;
  }
  llvm::Value* ptrs = element_pointer(buf, codegen(index));
  builder_->CreateMaskedScatter(v, ptrs, align);
}

// ------------------------------------------------------------ vectors and lets

void CodeGenLLVM::visit(const Ramp* op) {
  llvm::Value* base = codegen(op->base);
  llvm::Value* stride = codegen(op->stride);
  DataType e = op->base.dtype();
  std::vector<llvm::Constant*> steps;
  for (int i = 0; i < op->lanes; ++i) steps.push_back(e.is_float() ? float_const(e, i) : int_const(e, i));
  llvm::Value* iota = llvm::ConstantVector::get(steps);
  llvm::Value* offsets = emit_arith(IRNodeKind::Mul, op->dtype, splat(stride, op->lanes), iota);
  value = emit_arith(IRNodeKind::Add, op->dtype, splat(base, op->lanes), offsets);
}

void CodeGenLLVM::visit(const Broadcast* op) { value = splat(codegen(op->value), op->lanes); }

void CodeGenLLVM::visit(const Let* op) {
  llvm::Value* v = codegen(op->value);
  if (!v->hasName() && llvm::isa<llvm::Instruction>(v)) v->setName(op->var->name);
  auto [it, fresh] = fn_.vars.emplace(op->var.get(), v);
  KILN_CHECK(fresh) << "variable " << op->var->name << " is bound twice";
  llvm::Value* body = codegen(op->body);
  fn_.vars.erase(op->var.get());
  value = body;
}

void CodeGenLLVM::visit(const TensorLoad* op) {
  KILN_USER_ERROR() << "codegen met a read of tensor '" << op->producer->producer_name() << "'; lower the schedule to loops first";
}

void CodeGenLLVM::visit(const Reduce*) { KILN_USER_ERROR() << "codegen met a Reduce expression; lower the schedule to loops first"; }

}  // namespace kiln::codegen
