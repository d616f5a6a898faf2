// Parallel loops: the body is outlined into a KilnParallelBody and run through
// kiln_parallel_launch. Task t of n runs the t-th contiguous chunk of
// ceil(extent / n) iterations, so any task count the runtime picks is right.
#include <algorithm>
#include <unordered_set>

#include "codegen_llvm.h"
#include "kiln/support/error.h"

namespace kiln::codegen {

namespace {

// Variables a statement reads but does not bind, in first-use order. Buffer
// accesses read their data variable.
class FreeVars : public IRVisitor {
 public:
  std::vector<const Variable*> order;

  void use(const Variable* v) {
    if (bound_.count(v) || !seen_.insert(v).second) return;
    order.push_back(v);
  }
  void bind(const Variable* v) { bound_.insert(v); }

 protected:
  void visit(const Variable* op) override { use(op); }
  void visit(const BufferLoad* op) override {
    use(op->buffer->data.get());
    IRVisitor::visit(op);
  }
  void visit(const BufferStore* op) override {
    use(op->buffer->data.get());
    IRVisitor::visit(op);
  }
  void visit(const Let* op) override {
    visit_expr(op->value);
    bind(op->var.get());
    visit_expr(op->body);
  }
  void visit(const LetStmt* op) override {
    visit_expr(op->value);
    bind(op->var.get());
    visit_stmt(op->body);
  }
  void visit(const For* op) override {
    visit_expr(op->min);
    visit_expr(op->extent);
    bind(op->loop_var.get());
    visit_stmt(op->body);
  }
  void visit(const Allocate* op) override {
    for (const Expr& e : op->buffer.shape()) visit_expr(e);
    bind(op->buffer->data.get());
    visit_stmt(op->body);
  }

 private:
  std::unordered_set<const Variable*> bound_, seen_;
};

}  // namespace

void CodeGenLLVM::emit_parallel_loop(const For* op) {
  FreeVars fv;
  fv.bind(op->loop_var.get());
  fv.visit_stmt(op->body);

  llvm::Value* begin = codegen(op->min);
  llvm::Value* extent = codegen(op->extent);
  llvm::Type* ity = begin->getType();
  llvm::Type* ptr_ty = llvm::PointerType::get(*ctx_, 0);

  // The closure: every captured value, then the loop's begin and extent.
  std::vector<llvm::Value*> captured;
  std::vector<ComputeParam> params;
  std::vector<llvm::Type*> fields;
  // Two variables may name one value (a parameter's var and its buffer's data
  // var): capture it once, so that no two noalias parameters are the same pointer.
  std::vector<std::pair<const Variable*, size_t>> aliases;
  for (const Variable* v : fv.order) {
    auto it = fn_.vars.find(v);
    KILN_USER_CHECK(it != fn_.vars.end()) << "function " << current_func_name_ << ": parallel loop '" << op->loop_var->name << "' uses variable '" << v->name
                                         << "' which is neither a parameter nor bound by a loop or let";
    auto dup = std::find(captured.begin(), captured.end(), it->second);
    if (dup != captured.end()) {
      aliases.emplace_back(v, dup - captured.begin());
      continue;
    }
    captured.push_back(it->second);
    fields.push_back(it->second->getType());
    // Pointers here are buffers (parameters or allocations): distinct ones never overlap.
    params.push_back({v, it->second->getType(), it->second->getType()->isPointerTy()});
  }
  fields.push_back(ity);
  fields.push_back(ity);
  llvm::StructType* closure_ty = llvm::StructType::get(*ctx_, fields);
  llvm::AllocaInst* closure = entry_alloca(closure_ty, nullptr, 8, "closure");
  for (size_t i = 0; i < captured.size(); ++i) builder_->CreateStore(captured[i], builder_->CreateStructGEP(closure_ty, closure, static_cast<unsigned>(i)));
  builder_->CreateStore(begin, builder_->CreateStructGEP(closure_ty, closure, static_cast<unsigned>(captured.size())));
  builder_->CreateStore(extent, builder_->CreateStructGEP(closure_ty, closure, static_cast<unsigned>(captured.size() + 1)));

  // Save this function's state; the outlined functions have their own.
  FunctionState saved = std::move(fn_);
  llvm::IRBuilderBase::InsertPoint ip = builder_->saveIP();
  bool saved_in_parallel = in_parallel_;
  in_parallel_ = true;
  std::string name = unique_name(current_func_name_ + ".parallel." + op->loop_var->name);

  // The compute part: (captured..., lo, hi) -> runs iterations [lo, hi).
  Var lo("lo", op->loop_var.dtype()), hi("hi", op->loop_var.dtype());
  std::vector<ComputeParam> compute_params = params;
  compute_params.push_back({lo.get(), ity, false});
  compute_params.push_back({hi.get(), ity, false});
  llvm::Function* compute = begin_compute_function(name + ".compute", compute_params);
  for (const auto& [var, index] : aliases) fn_.vars[var] = compute->getArg(static_cast<unsigned>(index));
  emit_loop(op->loop_var, compute->getArg(static_cast<unsigned>(params.size())), compute->getArg(static_cast<unsigned>(params.size() + 1)), op->body, nullptr);
  builder_->CreateRet(builder_->getInt32(0));

  // The KilnParallelBody: unpack the closure, compute this task's chunk.
  llvm::Type* i32 = builder_->getInt32Ty();
  auto* body_ty = llvm::FunctionType::get(i32, {i32, i32, ptr_ty}, false);
  llvm::Function* body = llvm::Function::Create(body_ty, llvm::Function::InternalLinkage, name, module_.get());
  set_function_attributes(body);
  fn_ = FunctionState();
  fn_.function = body;
  builder_->SetInsertPoint(llvm::BasicBlock::Create(*ctx_, "entry", body));
  llvm::Value* task = builder_->CreateSExtOrTrunc(body->getArg(0), ity);
  llvm::Value* ntasks = builder_->CreateSExtOrTrunc(body->getArg(1), ity);
  llvm::Value* env = body->getArg(2);
  std::vector<llvm::Value*> args;
  for (size_t i = 0; i < fields.size(); ++i) {
    args.push_back(builder_->CreateLoad(fields[i], builder_->CreateStructGEP(closure_ty, env, static_cast<unsigned>(i))));
  }
  llvm::Value* min = args[args.size() - 2];
  llvm::Value* n = args[args.size() - 1];
  args.resize(args.size() - 2);
  llvm::Value* one = llvm::ConstantInt::get(ity, 1);
  llvm::Value* chunk = builder_->CreateSDiv(builder_->CreateSub(builder_->CreateAdd(n, ntasks), one), ntasks, "chunk");
  llvm::Value* first = builder_->CreateAdd(min, builder_->CreateMul(task, chunk), "lo");
  llvm::Value* end = builder_->CreateAdd(min, n);
  llvm::Value* last = builder_->CreateBinaryIntrinsic(llvm::Intrinsic::smin, builder_->CreateAdd(first, chunk), end, nullptr, "hi");
  args.push_back(first);
  args.push_back(last);
  builder_->CreateRet(builder_->CreateCall(compute, args));

  fn_ = std::move(saved);
  builder_->restoreIP(ip);
  in_parallel_ = saved_in_parallel;

  // Launch; 0 tasks lets the runtime use one per pool thread. An extent of 1
  // (a squeeze-excitation conv's single block of channels, a pool over one
  // block) asks for one task, which the runtime runs on this thread: no
  // worker is woken or waited for, to find an empty chunk.
  llvm::Value* single = builder_->CreateICmpSLE(extent, llvm::ConstantInt::get(ity, 1));
  llvm::Value* tasks = builder_->CreateSelect(single, builder_->getInt32(1), builder_->getInt32(0), "tasks");
  llvm::Value* rc = builder_->CreateCall(runtime_function("kiln_parallel_launch"), {body, closure, tasks}, "rc");
  auto* ok = llvm::BasicBlock::Create(*ctx_, "parallel_ok", fn_.function);
  auto* fail = llvm::BasicBlock::Create(*ctx_, "parallel_fail", fn_.function);
  builder_->CreateCondBr(builder_->CreateICmpEQ(rc, builder_->getInt32(0)), ok, fail, likely_weights());
  builder_->SetInsertPoint(fail);
  emit_error_return(rc);
  builder_->SetInsertPoint(ok);
}

}  // namespace kiln::codegen
