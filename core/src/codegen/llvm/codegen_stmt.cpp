// Statements of CodeGenLLVM: loops, allocation, control flow, asserts.
#include <llvm/IR/MDBuilder.h>

#include "codegen_llvm.h"
#include "kiln/pass/amx.h"
#include "kiln/support/error.h"

namespace kiln::codegen {

// Loops with a constant trip count up to this are unrolled here; longer ones
// get llvm.loop.unroll.full and LLVM decides.
static constexpr int64_t kMaxManualUnroll = 128;

llvm::MDNode* CodeGenLLVM::likely_weights() { return llvm::MDBuilder(*ctx_).createBranchWeights(1 << 20, 1); }

llvm::MDNode* CodeGenLLVM::loop_metadata(const char* key) {
  // A loop ID is a distinct node whose first operand is itself. Enable-style
  // hints carry a true flag; llvm.loop.unroll.full is the name alone.
  std::vector<llvm::Metadata*> hint = {llvm::MDString::get(*ctx_, key)};
  if (std::string(key) != "llvm.loop.unroll.full") hint.push_back(llvm::ConstantAsMetadata::get(builder_->getTrue()));
  llvm::Metadata* ops[] = {nullptr, llvm::MDNode::get(*ctx_, hint)};
  llvm::MDNode* id = llvm::MDNode::getDistinct(*ctx_, ops);
  id->replaceOperandWith(0, id);
  return id;
}

void CodeGenLLVM::emit_loop(const Var& var, llvm::Value* begin, llvm::Value* end, const Stmt& body, llvm::MDNode* loop_md) {
  llvm::Function* f = fn_.function;
  llvm::BasicBlock* pre = builder_->GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(*ctx_, "for_" + var->name, f);
  auto* body_bb = llvm::BasicBlock::Create(*ctx_, "for_body_" + var->name, f);
  auto* exit_bb = llvm::BasicBlock::Create(*ctx_, "for_end_" + var->name, f);
  builder_->CreateBr(header);
  builder_->SetInsertPoint(header);
  llvm::PHINode* iv = builder_->CreatePHI(begin->getType(), 2, var->name);
  iv->addIncoming(begin, pre);
  builder_->CreateCondBr(builder_->CreateICmpSLT(iv, end), body_bb, exit_bb);

  builder_->SetInsertPoint(body_bb);
  auto [it, fresh] = fn_.vars.emplace(var.get(), iv);
  KILN_CHECK(fresh) << "loop variable " << var->name << " is bound twice";
  codegen(body);
  fn_.vars.erase(var.get());
  // i < end before the increment, so i + 1 cannot overflow.
  llvm::Value* next = builder_->CreateAdd(iv, llvm::ConstantInt::get(iv->getType(), 1), var->name + ".next", false, true);
  llvm::Instruction* back = builder_->CreateBr(header);
  if (loop_md) back->setMetadata(llvm::LLVMContext::MD_loop, loop_md);
  iv->addIncoming(next, builder_->GetInsertBlock());
  builder_->SetInsertPoint(exit_bb);
}

void CodeGenLLVM::visit(const For* op) {
  if ((op->kind == ForKind::Serial || op->kind == ForKind::Unrolled) && emit_transposed_tile(op)) return;
  switch (op->kind) {
    case ForKind::Parallel:
      if (!in_parallel_) return emit_parallel_loop(op);
      break;  // A parallel loop inside a parallel body runs serially.
    case ForKind::ThreadBinding:
      KILN_USER_ERROR() << "loop '" << op->loop_var->name << "' is bound to " << op->thread_tag
                        << ", which only a GPU target can run; build for cuda or remove the binding";
      return;
    case ForKind::Unrolled: {
      const int64_t* n = as_const_int(op->extent);
      if (!n || *n > kMaxManualUnroll) break;
      llvm::Value* begin = codegen(op->min);
      for (int64_t i = 0; i < *n; ++i) {
        llvm::Value* iv = builder_->CreateAdd(begin, llvm::ConstantInt::get(begin->getType(), i), op->loop_var->name, false, true);
        fn_.vars[op->loop_var.get()] = iv;
        codegen(op->body);
      }
      fn_.vars.erase(op->loop_var.get());
      return;
    }
    case ForKind::Serial:
    case ForKind::Vectorized: break;
  }
  llvm::Value* begin = codegen(op->min);
  llvm::Value* extent = codegen(op->extent);
  llvm::Value* end = builder_->CreateAdd(begin, extent, op->loop_var->name + ".end", false, true);
  llvm::MDNode* md = nullptr;
  if (op->kind == ForKind::Vectorized) md = loop_metadata("llvm.loop.vectorize.enable");
  if (op->kind == ForKind::Unrolled) md = loop_metadata("llvm.loop.unroll.full");
  emit_loop(op->loop_var, begin, end, op->body, md);
}

llvm::AllocaInst* CodeGenLLVM::entry_alloca(llvm::Type* t, llvm::Value* count, uint64_t align, const std::string& name) {
  llvm::BasicBlock& entry = fn_.function->getEntryBlock();
  llvm::IRBuilder<> b(&entry, entry.getFirstInsertionPt());
  llvm::AllocaInst* a = b.CreateAlloca(t, count, name);
  a->setAlignment(llvm::Align(align));
  return a;
}

void CodeGenLLVM::visit(const Allocate* op) {
  const Buffer& buf = op->buffer;
  KILN_CHECK(buf.ndim() == 1) << "allocation of '" << buf.name() << "' with " << buf.ndim() << " dimensions: codegen needs flattened storage";
  llvm::Type* elem = llvm_mem_type(buf.dtype());
  int64_t elem_bytes = std::max(1, buf.dtype().bytes());
  const int64_t* n = as_const_int(buf.shape()[0]);
  llvm::Value* ptr = nullptr;
  bool on_heap = true;
  if (n) {
    KILN_USER_CHECK(*n >= 0) << "buffer '" << buf.name() << "' is allocated with a negative size " << *n;
    int64_t bytes = *n * elem_bytes;
    on_heap = bytes > kMaxStackAllocBytes || fn_.stack_bytes + bytes > kMaxStackBytesPerFunction;
    if (!on_heap) {
      fn_.stack_bytes += bytes;
      ptr = entry_alloca(elem, builder_->getInt64(std::max<int64_t>(*n, 1)), 64, buf.name());
    }
  }
  if (on_heap) {
    llvm::Value* count = builder_->CreateSExt(codegen(buf.shape()[0]), builder_->getInt64Ty());
    llvm::Value* bytes = builder_->CreateMul(count, builder_->getInt64(elem_bytes), "", false, true);
    ptr = builder_->CreateCall(runtime_function("kiln_alloc_workspace"), {bytes}, buf.name());
    // A failed allocation is an error return, not a crash.
    auto* ok = llvm::BasicBlock::Create(*ctx_, "alloc_ok", fn_.function);
    auto* fail = llvm::BasicBlock::Create(*ctx_, "alloc_fail", fn_.function);
    builder_->CreateCondBr(builder_->CreateIsNotNull(ptr), ok, fail, likely_weights());
    builder_->SetInsertPoint(fail);
    std::string msg = "kiln: cannot allocate the workspace of buffer '" + buf.name() + "' in " + current_func_name_ + " (out of memory, or a negative size)";
    builder_->CreateCall(runtime_function("kiln_set_last_error"), {builder_->CreateGlobalStringPtr(msg)});
    emit_error_return(builder_->getInt32(-1));
    builder_->SetInsertPoint(ok);
    fn_.live_workspaces.push_back(ptr);
  }
  auto [it, fresh] = fn_.vars.emplace(buf->data.get(), ptr);
  KILN_CHECK(fresh) << "buffer " << buf.name() << " is allocated twice";
  codegen(op->body);
  fn_.vars.erase(buf->data.get());
  if (on_heap) {
    fn_.live_workspaces.pop_back();
    builder_->CreateCall(runtime_function("kiln_free_workspace"), {ptr});
  }
}

void CodeGenLLVM::emit_error_return(llvm::Value* code) {
  for (auto it = fn_.live_workspaces.rbegin(); it != fn_.live_workspaces.rend(); ++it) {
    builder_->CreateCall(runtime_function("kiln_free_workspace"), {*it});
  }
  builder_->CreateRet(code);
}

void CodeGenLLVM::visit(const Seq* op) {
  for (const Stmt& s : op->seq) codegen(s);
}

void CodeGenLLVM::visit(const IfThenElse* op) {
  llvm::Value* cond = codegen(op->condition);
  const Call* hint = op->condition.as<Call>();
  bool likely = hint && hint->op == Intrinsic::Likely;
  llvm::Function* f = fn_.function;
  auto* then_bb = llvm::BasicBlock::Create(*ctx_, "then", f);
  auto* end_bb = llvm::BasicBlock::Create(*ctx_, "endif", f);
  auto* else_bb = op->else_case.defined() ? llvm::BasicBlock::Create(*ctx_, "else", f) : end_bb;
  builder_->CreateCondBr(cond, then_bb, else_bb, likely ? likely_weights() : nullptr);
  builder_->SetInsertPoint(then_bb);
  codegen(op->then_case);
  builder_->CreateBr(end_bb);
  if (op->else_case.defined()) {
    builder_->SetInsertPoint(else_bb);
    codegen(op->else_case);
    builder_->CreateBr(end_bb);
  }
  builder_->SetInsertPoint(end_bb);
}

void CodeGenLLVM::visit(const LetStmt* op) {
  llvm::Value* v = codegen(op->value);
  if (!v->hasName() && llvm::isa<llvm::Instruction>(v)) v->setName(op->var->name);
  auto [it, fresh] = fn_.vars.emplace(op->var.get(), v);
  KILN_CHECK(fresh) << "variable " << op->var->name << " is bound twice";
  codegen(op->body);
  fn_.vars.erase(op->var.get());
}

void CodeGenLLVM::visit(const Evaluate* op) {
  if (as_const_int(op->value)) return;
  codegen(op->value);
}

void CodeGenLLVM::visit(const AttrStmt* op) {
  if (op->key == pass::kAmxPragma) return emit_amx_block(op);
  codegen(op->body);
}

void CodeGenLLVM::visit(const AssertStmt* op) {
  llvm::Value* cond = codegen(op->condition);
  if (op->condition.dtype().is_vector()) cond = builder_->CreateAndReduce(cond);
  auto* ok = llvm::BasicBlock::Create(*ctx_, "assert_ok", fn_.function);
  auto* fail = llvm::BasicBlock::Create(*ctx_, "assert_fail", fn_.function);
  builder_->CreateCondBr(cond, ok, fail, likely_weights());
  builder_->SetInsertPoint(fail);
  builder_->CreateCall(runtime_function("kiln_set_last_error"), {builder_->CreateGlobalStringPtr(op->message)});
  emit_error_return(builder_->getInt32(-1));
  builder_->SetInsertPoint(ok);
  codegen(op->body);
}

}  // namespace kiln::codegen
