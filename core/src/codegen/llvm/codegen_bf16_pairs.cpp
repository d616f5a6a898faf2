// pack_bf16x2 and dot_bf16x2 (Intrinsic docs in kiln/ir/expr.h): the
// bfloat16 matmul's operands and its multiply-add. On a target with AVX-512
// BF16, `acc + dot_bf16x2(a, b)` is one vdpbf16ps per 16 lanes (32 products);
// elsewhere it is two float32 multiply-adds on the unpacked halves.
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>

#include "codegen_llvm.h"

namespace kiln::codegen {

namespace {

llvm::Type* like_lanes(llvm::Value* v, llvm::Type* elem) {
  if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType())) return llvm::FixedVectorType::get(elem, vt->getNumElements());
  return elem;
}

int lanes_of(llvm::Value* v) {
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType());
  return vt ? static_cast<int>(vt->getNumElements()) : 1;
}

// A dot product an accumulating add folds into (vdpbf16ps, vpdpbusd, sdot).
const Call* as_dot(const Expr& e) {
  const Call* c = e.as<Call>();
  return c && (c->op == Intrinsic::DotBF16x2 || c->op == Intrinsic::DotI8x4) ? c : nullptr;
}

}  // namespace

llvm::Value* CodeGenLLVM::emit_pack_bf16x2(llvm::Value* lo, llvm::Value* hi) {
  llvm::Type* i32 = like_lanes(lo, builder_->getInt32Ty());
  llvm::Value* l = builder_->CreateZExt(f32_to_bf16(lo), i32);
  llvm::Value* h = builder_->CreateShl(builder_->CreateZExt(f32_to_bf16(hi), i32), 16);
  return builder_->CreateOr(l, h);
}

// The vdpbf16ps width for `lanes` float32 lanes on this target, 0 for none.
int CodeGenLLVM::bf16_dot_width(int lanes) const {
  if (!target_.has_feature("avx512bf16")) return 0;
  if (lanes % 16 == 0) return 16;
  if (!target_.has_feature("avx512vl")) return 0;
  return lanes % 8 == 0 ? 8 : lanes % 4 == 0 ? 4 : 0;
}

llvm::Value* CodeGenLLVM::emit_dot_bf16x2(llvm::Value* acc, llvm::Value* a, llvm::Value* b) {
  int lanes = lanes_of(a);
  // A vector of an odd width (a tile of 11 columns): zero lanes pad it to
  // the instruction's width, and the result drops them again.
  if (acc && lanes > 1 && bf16_dot_width(lanes) == 0 && target_.has_feature("avx512bf16")) {
    bool vl = target_.has_feature("avx512vl");
    int padded = vl && lanes < 4 ? 4 : vl && lanes < 8 ? 8 : (lanes + 15) / 16 * 16;
    auto widen = [&](llvm::Value* v) {
      std::vector<int> idx;
      for (int k = 0; k < padded; ++k) idx.push_back(k < lanes ? k : lanes);  // lane `lanes` of the second operand: zero
      return builder_->CreateShuffleVector(v, llvm::Constant::getNullValue(v->getType()), idx);
    };
    std::vector<int> keep;
    for (int k = 0; k < lanes; ++k) keep.push_back(k);
    return builder_->CreateShuffleVector(emit_dot_bf16x2(widen(acc), widen(a), widen(b)), keep);
  }
  if (int w = acc ? bf16_dot_width(lanes) : 0) {
    llvm::Intrinsic::ID id = w == 16 ? llvm::Intrinsic::x86_avx512bf16_dpbf16ps_512
                             : w == 8 ? llvm::Intrinsic::x86_avx512bf16_dpbf16ps_256
                                      : llvm::Intrinsic::x86_avx512bf16_dpbf16ps_128;
    llvm::Function* fn = llvm::Intrinsic::getDeclaration(module_.get(), id);
    // LLVM has typed the pairs as <2w x bfloat> or <w x i32> over its
    // versions; a bitcast to whatever the declaration says fits both.
    llvm::Type* pair_ty = fn->getFunctionType()->getParamType(1);
    auto slice = [&](llvm::Value* v, int start) {
      if (w == lanes) return v;
      std::vector<int> idx;
      for (int k = 0; k < w; ++k) idx.push_back(start + k);
      return builder_->CreateShuffleVector(v, idx);
    };
    std::vector<llvm::Value*> parts;
    for (int s = 0; s < lanes; s += w) {
      llvm::Value* pa = builder_->CreateBitCast(slice(a, s), pair_ty);
      llvm::Value* pb = builder_->CreateBitCast(slice(b, s), pair_ty);
      parts.push_back(builder_->CreateCall(fn, {slice(acc, s), pa, pb}));
    }
    return concat_vectors(parts);  // their count need not be a power of two: 24 lanes are 3 x 8
  }
  // Unpacked: a bfloat16 is the high half of its float32.
  llvm::Type* f32 = like_lanes(a, builder_->getFloatTy());
  auto low = [&](llvm::Value* v) { return builder_->CreateBitCast(builder_->CreateShl(v, 16), f32); };
  auto high = [&](llvm::Value* v) {
    return builder_->CreateBitCast(builder_->CreateAnd(v, llvm::ConstantInt::get(v->getType(), 0xFFFF0000u)), f32);
  };
  llvm::Value* lo = builder_->CreateFMul(low(a), low(b));  // exact
  llvm::Value* dot = builder_->CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {high(a), high(b), lo});
  return acc ? builder_->CreateFAdd(acc, dot) : dot;
}

void CodeGenLLVM::visit(const Add* op) {
  const Call* dot = as_dot(op->b);
  const Expr* other = &op->a;
  if (!dot && (dot = as_dot(op->a))) other = &op->b;
  if (dot) {
    llvm::Value* acc = codegen(*other);
    if (dot->op == Intrinsic::DotI8x4)
      value = emit_dot_i8x4(acc, codegen(dot->args[0]), codegen(dot->args[1]), dot->args[0].dtype().is_int(), dot->args[1].dtype().is_int());
    else
      value = emit_dot_bf16x2(acc, codegen(dot->args[0]), codegen(dot->args[1]));
    return;
  }
  if ((value = try_emit_byte_quad(op))) return;
  llvm::Value* a = codegen(op->a);
  llvm::Value* b = codegen(op->b);
  value = emit_arith(IRNodeKind::Add, op->dtype, a, b);
}

}  // namespace kiln::codegen
