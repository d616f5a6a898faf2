// A nest marked "amx" (kiln/pass/amx.h, read by pass::read_amx_block): a
// block of up to 32 x 32 accumulators on AMX tiles.
//   tmm0..3  C, 2 x 2 tiles of up to 16 rows x 16 32-bit columns
//   tmm4..5  A, a tile per 16 rows: 16 words of K (64 bytes) per row
//   tmm6..7  B, a tile per 16 columns: 16 rows of K words, each row the
//            16 columns' words (the pair/quad layout vpdpbusd reads too)
// Per call: the permission (kiln_amx_request, once per process), the tile
// configuration (ldtilecfg), then per block (the loops over blocks: more
// rows under one configuration) C loaded, the reduction loops outside k (a
// convolution's taps), K in steps of 16 words (or all of a smaller K), each step
// loading A and B and one tdpb*d / tdpbf16ps per C tile, C stored, the tiles
// released. Tile registers are named, not allocated: the llvm.x86 forms
// with immediate tile numbers, so LLVM's tile configuration passes stay out.
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>

#include <functional>

#include "codegen_llvm.h"
#include "kiln/pass/amx.h"
#include "kiln/support/error.h"

namespace kiln::codegen {

void CodeGenLLVM::emit_amx_block(const AttrStmt* op) {
  pass::AmxBlock blk = pass::read_amx_block(op);
  const BufferLoad *c = blk.c.as<BufferLoad>(), *a = blk.a.as<BufferLoad>(), *b = blk.b.as<BufferLoad>();
  const int64_t ldc = blk.ldc, c16 = blk.c_col16, lda = blk.lda, ldb = blk.ldb, b16 = blk.b_col16;
  const int64_t M = blk.m, N = blk.n, K = blk.k;
  const bool bf16 = blk.bf16;
  const char* unit = bf16 ? "amx-bf16" : "amx-int8";
  KILN_USER_CHECK(target_.has_feature("amx-tile") && target_.has_feature(unit))
      << "amx: target '" << target_.str() << "' has no " << unit << "; a nest marked amx needs an x86 target with AMX (-mcpu=sapphirerapids or -mattr=+amx-tile,+"
      << unit << ")";
  // k in steps of kt words: 16 (64 bytes, a tile's widest row), or all of a smaller k.
  const int64_t kt = std::min<int64_t>(K, 16);
  KILN_CHECK(M >= 1 && M <= 32 && N >= 1 && N <= 32 && K >= 1 && K % kt == 0) << "amx: block " << M << "x" << N << "x" << K;
  llvm::Type* i8 = builder_->getInt8Ty();
  llvm::Type* i64 = builder_->getInt64Ty();
  auto addr = [&](const BufferLoad* l) { return element_pointer(l->buffer.get(), codegen(l->indices[0])); };
  llvm::Value *pc = addr(c), *pa = addr(a), *pb = addr(b);

  // Permission first: a refusal returns the kernel's error, never SIGILL.
  llvm::Value* granted = builder_->CreateCall(runtime_function("kiln_amx_request"), {});
  auto* ok = llvm::BasicBlock::Create(*ctx_, "amx_ok", fn_.function);
  auto* refused = llvm::BasicBlock::Create(*ctx_, "amx_refused", fn_.function);
  builder_->CreateCondBr(builder_->CreateICmpEQ(granted, builder_->getInt32(0)), ok, refused, likely_weights());
  builder_->SetInsertPoint(refused);
  emit_error_return(granted);
  builder_->SetInsertPoint(ok);

  // The 64-byte configuration: palette 1, then colsb (u16) and rows (u8) per tile.
  const int rm = static_cast<int>((M + 15) / 16), rn = static_cast<int>((N + 15) / 16);
  auto rows_of = [&](int i) { return static_cast<int>(std::min<int64_t>(16, M - 16 * i)); };
  auto cols_of = [&](int j) { return static_cast<int>(std::min<int64_t>(16, N - 16 * j)); };
  auto tc = [&](int i, int j) { return static_cast<uint8_t>(2 * i + j); };
  auto ta = [](int i) { return static_cast<uint8_t>(4 + i); };
  auto tb = [](int j) { return static_cast<uint8_t>(6 + j); };
  uint8_t cfg[64] = {0};
  cfg[0] = 1;
  auto set_tile = [&](uint8_t t, int rows, int colsb) {
    cfg[16 + 2 * t] = static_cast<uint8_t>(colsb & 0xff);
    cfg[16 + 2 * t + 1] = static_cast<uint8_t>(colsb >> 8);
    cfg[48 + t] = static_cast<uint8_t>(rows);
  };
  for (int i = 0; i < rm; ++i) {
    set_tile(ta(i), rows_of(i), static_cast<int>(4 * kt));
    for (int j = 0; j < rn; ++j) set_tile(tc(i, j), rows_of(i), 4 * cols_of(j));
  }
  for (int j = 0; j < rn; ++j) set_tile(tb(j), static_cast<int>(kt), 4 * cols_of(j));
  llvm::AllocaInst* slot = entry_alloca(llvm::ArrayType::get(i8, 64), nullptr, 64, "amx_cfg");
  builder_->CreateStore(llvm::ConstantDataArray::get(*ctx_, llvm::ArrayRef<uint8_t>(cfg, 64)), slot);

  auto intrinsic = [&](llvm::Intrinsic::ID id) { return llvm::Intrinsic::getDeclaration(module_.get(), id); };
  auto tile = [&](uint8_t t) { return builder_->getInt8(t); };
  // Byte address of element `elems` past p (elems an i64 value).
  auto at = [&](llvm::Value* p, llvm::Value* elems) { return builder_->CreateGEP(i8, p, builder_->CreateMul(elems, llvm::ConstantInt::get(i64, 4))); };
  builder_->CreateCall(intrinsic(llvm::Intrinsic::x86_ldtilecfg), {slot});
  llvm::Function* load = intrinsic(llvm::Intrinsic::x86_tileloadd64);
  llvm::Function* store = intrinsic(llvm::Intrinsic::x86_tilestored64);

  llvm::Intrinsic::ID dp = llvm::Intrinsic::x86_tdpbf16ps;
  if (!bf16) {
    bool as = blk.a_signed, bs = blk.b_signed;
    dp = as ? (bs ? llvm::Intrinsic::x86_tdpbssd : llvm::Intrinsic::x86_tdpbsud) : (bs ? llvm::Intrinsic::x86_tdpbusd : llvm::Intrinsic::x86_tdpbuud);
  }
  llvm::Function* dot = intrinsic(dp);
  auto c64 = [&](int64_t v) { return llvm::ConstantInt::get(i64, v); };
  // for (i = 0; i < extent; i += step) body(i): a loop in LLVM blocks, its counter a phi.
  auto counted = [&](int64_t extent, int64_t step, const char* name, const std::function<void(llvm::Value*)>& body) {
    llvm::BasicBlock* pre = builder_->GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(*ctx_, name, fn_.function);
    auto* done = llvm::BasicBlock::Create(*ctx_, std::string(name) + "_done", fn_.function);
    builder_->CreateBr(head);
    builder_->SetInsertPoint(head);
    llvm::PHINode* i = builder_->CreatePHI(i64, 2, name);
    i->addIncoming(c64(0), pre);
    body(i);
    llvm::Value* next = builder_->CreateAdd(i, c64(step));
    i->addIncoming(next, builder_->GetInsertBlock());
    builder_->CreateCondBr(builder_->CreateICmpSLT(next, c64(extent)), head, done);
    builder_->SetInsertPoint(done);
  };
  // The reduction loops outside k (offsets of A and B accumulated), then k in steps of kt.
  std::function<void(size_t, llvm::Value*, llvm::Value*)> reduce = [&](size_t level, llvm::Value* a_off, llvm::Value* b_off) {
    if (level < blk.outer.size()) {
      const pass::AmxReduceLoop& r = blk.outer[level];
      if (r.extent == 1) return reduce(level + 1, a_off, b_off);
      counted(r.extent, 1, "amx_r", [&](llvm::Value* i) {
        reduce(level + 1, builder_->CreateAdd(a_off, builder_->CreateMul(i, c64(r.a_stride))), builder_->CreateAdd(b_off, builder_->CreateMul(i, c64(r.b_stride))));
      });
      return;
    }
    counted(K, kt, "amx_k", [&](llvm::Value* q) {
      llvm::Value* aq = builder_->CreateAdd(a_off, q);
      llvm::Value* bq = builder_->CreateAdd(b_off, builder_->CreateMul(q, c64(ldb)));
      for (int i = 0; i < rm; ++i) builder_->CreateCall(load, {tile(ta(i)), at(pa, builder_->CreateAdd(aq, c64(16 * i * lda))), c64(4 * lda)});
      for (int j = 0; j < rn; ++j) builder_->CreateCall(load, {tile(tb(j)), at(pb, builder_->CreateAdd(bq, c64(j * b16))), c64(4 * ldb)});
      for (int i = 0; i < rm; ++i)
        for (int j = 0; j < rn; ++j) builder_->CreateCall(dot, {tile(tc(i, j)), tile(ta(i)), tile(tb(j))});
    });
  };
  // The loops over blocks: each loads its accumulators, runs the reduction and stores them.
  auto add_mul = [&](llvm::Value* base, llvm::Value* i, int64_t stride) { return builder_->CreateAdd(base, builder_->CreateMul(i, c64(stride))); };
  std::function<void(size_t, llvm::Value*, llvm::Value*, llvm::Value*)> blocks = [&](size_t level, llvm::Value* c_off, llvm::Value* a_off, llvm::Value* b_off) {
    if (level < blk.blocks.size()) {
      const pass::AmxBlockLoop& l = blk.blocks[level];
      counted(l.extent, 1, "amx_block", [&](llvm::Value* i) {
        blocks(level + 1, add_mul(c_off, i, l.c_stride), add_mul(a_off, i, l.a_stride), add_mul(b_off, i, l.b_stride));
      });
      return;
    }
    auto c_tile = [&](int i, int j) { return at(pc, builder_->CreateAdd(c_off, c64(16 * i * ldc + j * c16))); };
    for (int i = 0; i < rm; ++i)
      for (int j = 0; j < rn; ++j)
        if (blk.zero_init) builder_->CreateCall(intrinsic(llvm::Intrinsic::x86_tilezero), {tile(tc(i, j))});
        else builder_->CreateCall(load, {tile(tc(i, j)), c_tile(i, j), c64(4 * ldc)});
    reduce(0, a_off, b_off);
    for (int i = 0; i < rm; ++i)
      for (int j = 0; j < rn; ++j) builder_->CreateCall(store, {tile(tc(i, j)), c_tile(i, j), c64(4 * ldc)});
  };
  blocks(0, c64(0), c64(0), c64(0));
  builder_->CreateCall(intrinsic(llvm::Intrinsic::x86_tilerelease), {});
}

}  // namespace kiln::codegen
