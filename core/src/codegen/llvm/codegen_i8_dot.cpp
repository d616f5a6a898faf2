// dot_i8x4 (Intrinsic doc in kiln/ir/expr.h): the int8 matmul's multiply-add,
// four byte products of a 32-bit lane summed into an int32. `acc + dot` is
// one instruction per vector where the machine has one:
//   x86 AVX-512 VNNI / AVX-VNNI  vpdpbusd   (unsigned a bytes, signed b bytes)
//   AArch64 dotprod              sdot / udot (both signed / both unsigned),
//                                usdot with i8mm (unsigned a, signed b)
// and widening integer code elsewhere (AVX2 and older: LLVM 19 does not form
// vpdpbusd from the zext/sext products itself, nor should it there).
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsAArch64.h>
#include <llvm/IR/IntrinsicsX86.h>

#include "codegen_llvm.h"

namespace kiln::codegen {

namespace {

int lanes_in(llvm::Value* v) {
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType());
  return vt ? static_cast<int>(vt->getNumElements()) : 1;
}

// A scalar as a one-lane vector, so that every path below shuffles vectors.
llvm::Value* as_vector(llvm::IRBuilder<>* b, llvm::Value* v) {
  if (v->getType()->isVectorTy()) return v;
  return b->CreateInsertElement(llvm::PoisonValue::get(llvm::FixedVectorType::get(v->getType(), 1)), v, uint64_t{0});
}

llvm::Value* lanes_from(llvm::IRBuilder<>* b, llvm::Value* v, int start, int count) {
  int n = lanes_in(v);
  if (start == 0 && count == n) return v;
  std::vector<int> idx;
  // Lanes past the end read lane n of the second operand: a zero.
  for (int k = 0; k < count; ++k) idx.push_back(start + k < n ? start + k : n);
  return b->CreateShuffleVector(v, llvm::Constant::getNullValue(v->getType()), idx);
}

}  // namespace

// The instruction's int32 lanes per call on this target for these
// signednesses (largest first), empty where it has none.
std::vector<int> CodeGenLLVM::i8_dot_widths(bool a_signed, bool b_signed) const {
  bool arm = target_.triple.rfind("aarch64", 0) == 0 || target_.triple.rfind("arm64", 0) == 0;
  if (arm) {
    bool same = a_signed == b_signed && target_.has_feature("dotprod");
    bool mixed = !a_signed && b_signed && target_.has_feature("i8mm");
    return same || mixed ? std::vector<int>{4, 2} : std::vector<int>{};
  }
  if (a_signed || !b_signed) return {};
  if (target_.has_feature("avx512vnni")) return target_.has_feature("avx512vl") ? std::vector<int>{16, 8, 4} : std::vector<int>{16};
  if (target_.has_feature("avxvnni")) return {8, 4};
  return {};
}

llvm::Value* CodeGenLLVM::emit_dot_i8x4_instr(llvm::Value* acc, llvm::Value* a, llvm::Value* b, bool a_signed, bool b_signed, int w) {
  bool arm = target_.triple.rfind("aarch64", 0) == 0 || target_.triple.rfind("arm64", 0) == 0;
  llvm::Function* fn = nullptr;
  if (arm) {
    llvm::Intrinsic::ID id = a_signed != b_signed ? llvm::Intrinsic::aarch64_neon_usdot
                             : a_signed           ? llvm::Intrinsic::aarch64_neon_sdot
                                                  : llvm::Intrinsic::aarch64_neon_udot;
    auto* acc_ty = llvm::FixedVectorType::get(builder_->getInt32Ty(), w);
    auto* byte_ty = llvm::FixedVectorType::get(builder_->getInt8Ty(), 4 * w);
    fn = llvm::Intrinsic::getDeclaration(module_.get(), id, {acc_ty, byte_ty});
  } else {
    llvm::Intrinsic::ID id = w == 16 ? llvm::Intrinsic::x86_avx512_vpdpbusd_512
                             : w == 8 ? llvm::Intrinsic::x86_avx512_vpdpbusd_256
                                      : llvm::Intrinsic::x86_avx512_vpdpbusd_128;
    fn = llvm::Intrinsic::getDeclaration(module_.get(), id);
  }
  // The operands' types as this LLVM declares them (<w x i32> or <4w x i8>).
  llvm::FunctionType* ft = fn->getFunctionType();
  return builder_->CreateCall(fn, {builder_->CreateBitCast(acc, ft->getParamType(0)), builder_->CreateBitCast(a, ft->getParamType(1)),
                                   builder_->CreateBitCast(b, ft->getParamType(2))});
}

llvm::Value* CodeGenLLVM::emit_dot_i8x4(llvm::Value* acc, llvm::Value* a, llvm::Value* b, bool a_signed, bool b_signed) {
  int lanes = lanes_in(a);
  std::vector<int> widths = i8_dot_widths(a_signed, b_signed);
  if (!widths.empty()) {
    // Pad to a multiple of the narrowest width (zero bytes add nothing),
    // then one call per slice of the widest width that divides it.
    int narrow = widths.back(), padded = (lanes + narrow - 1) / narrow * narrow;
    int w = narrow;
    for (int c : widths)
      if (padded % c == 0) {
        w = c;
        break;
      }
    llvm::Value* va = as_vector(builder_.get(), a);
    llvm::Value* vb = as_vector(builder_.get(), b);
    llvm::Value* vc = acc ? as_vector(builder_.get(), acc) : llvm::Constant::getNullValue(va->getType());
    std::vector<llvm::Value*> parts;
    for (int s = 0; s < padded; s += w)
      parts.push_back(emit_dot_i8x4_instr(lanes_from(builder_.get(), vc, s, w), lanes_from(builder_.get(), va, s, w), lanes_from(builder_.get(), vb, s, w),
                                          a_signed, b_signed, w));
    llvm::Value* all = concat_vectors(parts);
    if (padded != lanes || lanes_in(all) != lanes) all = lanes_from(builder_.get(), all, 0, lanes);
    return a->getType()->isVectorTy() ? all : builder_->CreateExtractElement(all, uint64_t{0});
  }
  // Widening code: the bytes as int32, multiplied, each lane's four summed.
  llvm::Type* i32 = builder_->getInt32Ty();
  auto* bytes = llvm::FixedVectorType::get(builder_->getInt8Ty(), 4 * lanes);
  auto* wide = llvm::FixedVectorType::get(i32, 4 * lanes);
  auto widen = [&](llvm::Value* v, bool is_signed) {
    llvm::Value* x = builder_->CreateBitCast(v, bytes);
    return is_signed ? builder_->CreateSExt(x, wide) : builder_->CreateZExt(x, wide);
  };
  llvm::Value* prod = builder_->CreateMul(widen(a, a_signed), widen(b, b_signed));
  llvm::Value* sum = nullptr;
  for (int j = 0; j < 4; ++j) {
    std::vector<int> idx;
    for (int l = 0; l < lanes; ++l) idx.push_back(4 * l + j);
    llvm::Value* part = builder_->CreateShuffleVector(prod, idx);
    sum = sum ? builder_->CreateAdd(sum, part) : part;
  }
  if (!a->getType()->isVectorTy()) sum = builder_->CreateExtractElement(sum, uint64_t{0});
  return acc ? builder_->CreateAdd(acc, sum) : sum;
}

}  // namespace kiln::codegen
