// Module and function scaffolding, types, constants and casts of CodeGenLLVM.
#include "codegen_llvm.h"

#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <cstring>

#include "kiln/support/error.h"

namespace kiln::codegen {

CodeGenLLVM::CodeGenLLVM(llvm::LLVMContext* ctx, llvm::TargetMachine* tm, const Target& target, const std::string& module_name)
    : ctx_(ctx), tm_(tm), target_(target) {
  module_ = std::make_unique<llvm::Module>(module_name, *ctx_);
  module_->setTargetTriple(tm_->getTargetTriple().str());
  module_->setDataLayout(tm_->createDataLayout());
  builder_ = std::make_unique<llvm::IRBuilder<>>(*ctx_);
  // FMA contraction is always allowed (it is more accurate, not less); the
  // rest of fast-math only when the target asks for it.
  llvm::FastMathFlags fmf;
  if (target_.fast_math) fmf.setFast();
  else fmf.setAllowContract(true);
  builder_->setFastMathFlags(fmf);
}

CodeGenLLVM::~CodeGenLLVM() = default;

std::string CodeGenLLVM::unique_name(const std::string& base) {
  int n = name_counts_[base]++;
  return n == 0 ? base : base + "_" + std::to_string(n);
}

void CodeGenLLVM::set_function_attributes(llvm::Function* f) {
  f->addFnAttr(llvm::Attribute::NoUnwind);
  f->addFnAttr("target-cpu", tm_->getTargetCPU());
  f->addFnAttr("target-features", tm_->getTargetFeatureString());
  if (target_.fast_math) {
    f->addFnAttr("unsafe-fp-math", "true");
    f->addFnAttr("no-nans-fp-math", "true");
    f->addFnAttr("no-infs-fp-math", "true");
    f->addFnAttr("no-signed-zeros-fp-math", "true");
  }
}

std::vector<CodeGenLLVM::ComputeParam> CodeGenLLVM::compute_params(const PrimFunc& f) {
  std::vector<ComputeParam> params;
  for (const Param& p : f.params()) {
    if (p.is_buffer()) {
      params.push_back({p.buffer->data.get(), llvm::PointerType::get(*ctx_, 0), true});
    } else {
      KILN_USER_CHECK(p.var.defined() && !p.var.dtype().is_void()) << "function " << f.name() << ": a scalar parameter needs a variable of a value type";
      params.push_back({p.var.get(), llvm_type(p.var.dtype()), false});
    }
  }
  return params;
}

llvm::Function* CodeGenLLVM::begin_compute_function(const std::string& name, const std::vector<ComputeParam>& params) {
  std::vector<llvm::Type*> types;
  for (const ComputeParam& p : params) types.push_back(p.type);
  auto* fty = llvm::FunctionType::get(builder_->getInt32Ty(), types, false);
  llvm::Function* f = llvm::Function::Create(fty, llvm::Function::InternalLinkage, name, module_.get());
  set_function_attributes(f);
  f->addFnAttr(llvm::Attribute::AlwaysInline);
  fn_ = FunctionState();
  fn_.function = f;
  for (size_t i = 0; i < params.size(); ++i) {
    llvm::Argument* arg = f->getArg(static_cast<unsigned>(i));
    arg->setName(params[i].var->name);
    if (params[i].noalias) {
      arg->addAttr(llvm::Attribute::NoAlias);
      arg->addAttr(llvm::Attribute::NoCapture);
    }
    fn_.vars[params[i].var] = arg;
  }
  builder_->SetInsertPoint(llvm::BasicBlock::Create(*ctx_, "entry", f));
  return f;
}

void CodeGenLLVM::add_function(const PrimFunc& f) {
  KILN_USER_CHECK(f.defined()) << "codegen of an undefined PrimFunc";
  KILN_USER_CHECK(!module_->getFunction(f.name())) << "two functions named '" << f.name() << "' in one module; give each kernel a unique name";
  current_func_name_ = f.name();
  std::vector<ComputeParam> params = compute_params(f);

  // The compute function: the body over typed, noalias parameters.
  llvm::Function* compute = begin_compute_function(f.name() + ".compute", params);
  for (const Param& p : f.params()) {
    // Param.var of a buffer parameter names the same pointer as buffer->data.
    if (p.is_buffer() && p.var.defined() && p.var.get() != p.buffer->data.get()) fn_.vars[p.var.get()] = fn_.vars[p.buffer->data.get()];
  }
  codegen(f.body());
  builder_->CreateRet(builder_->getInt32(0));

  // The C ABI entry: unpack args[i] (a data pointer, or a pointer to a scalar).
  auto* ptr_ty = llvm::PointerType::get(*ctx_, 0);
  auto* fty = llvm::FunctionType::get(builder_->getInt32Ty(), {ptr_ty}, false);
  llvm::Function* entry = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, f.name(), module_.get());
  set_function_attributes(entry);
  llvm::Argument* args = entry->getArg(0);
  args->setName("args");
  builder_->SetInsertPoint(llvm::BasicBlock::Create(*ctx_, "entry", entry));
  std::vector<llvm::Value*> call_args;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = f.params()[i];
    llvm::Value* slot = builder_->CreateConstInBoundsGEP1_64(ptr_ty, args, i);
    llvm::Value* ptr = builder_->CreateAlignedLoad(ptr_ty, slot, llvm::Align(8), p.var.defined() ? p.var->name : "arg");
    if (p.is_buffer()) {
      call_args.push_back(ptr);
      continue;
    }
    DataType t = p.var.dtype();
    llvm::Value* v = builder_->CreateAlignedLoad(llvm_mem_type(t), ptr, llvm::Align(std::max(1, t.bytes())));
    call_args.push_back(from_memory(v, t));
  }
  builder_->CreateRet(builder_->CreateCall(compute, call_args));
  fn_ = FunctionState();
}

std::unique_ptr<llvm::Module> CodeGenLLVM::finish() {
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(*module_, &os)) {
    os.flush();
    KILN_CHECK(false) << "LLVM rejected the generated module: " << err.substr(0, 2000);
  }
  return std::move(module_);
}

// ------------------------------------------------------------------ types

llvm::Type* CodeGenLLVM::llvm_type(DataType t) {
  llvm::Type* e = nullptr;
  switch (t.code()) {
    case DataType::Code::Int:
    case DataType::Code::UInt: e = builder_->getIntNTy(t.bits()); break;
    case DataType::Code::Bool: e = builder_->getInt1Ty(); break;
    case DataType::Code::BFloat: e = builder_->getInt16Ty(); break;
    case DataType::Code::Float:
      KILN_USER_CHECK(t.bits() == 16 || t.bits() == 32 || t.bits() == 64) << "the llvm target has no " << t.str() << "; use float16, float32 or float64";
      e = t.bits() == 16 ? builder_->getHalfTy() : t.bits() == 32 ? builder_->getFloatTy() : builder_->getDoubleTy();
      break;
    case DataType::Code::Handle:
      if (t.is_void()) return builder_->getVoidTy();
      e = llvm::PointerType::get(*ctx_, 0);
      break;
  }
  return t.lanes() > 1 ? llvm::FixedVectorType::get(e, t.lanes()) : e;
}

llvm::Type* CodeGenLLVM::llvm_mem_type(DataType t) {
  if (!t.is_bool()) return llvm_type(t);
  return t.lanes() > 1 ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(builder_->getInt8Ty(), t.lanes())) : builder_->getInt8Ty();
}

llvm::Value* CodeGenLLVM::to_memory(llvm::Value* v, DataType t) { return t.is_bool() ? builder_->CreateZExt(v, llvm_mem_type(t)) : v; }

llvm::Value* CodeGenLLVM::from_memory(llvm::Value* v, DataType t) {
  return t.is_bool() ? builder_->CreateICmpNE(v, llvm::Constant::getNullValue(v->getType())) : v;
}

llvm::Constant* CodeGenLLVM::int_const(DataType t, int64_t v) { return llvm::ConstantInt::get(llvm_type(t), static_cast<uint64_t>(v), t.is_int()); }

llvm::Constant* CodeGenLLVM::float_const(DataType t, double v) {
  if (!t.is_bfloat()) return llvm::ConstantFP::get(llvm_type(t), v);
  // bfloat16 is kept as its bit pattern: round the float32 value to nearest even.
  float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t h = f != f ? static_cast<uint16_t>((bits >> 16) | 0x40) : static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
  return llvm::ConstantInt::get(llvm_type(t), h);
}

llvm::Value* CodeGenLLVM::splat(llvm::Value* v, int lanes) { return lanes == 1 ? v : builder_->CreateVectorSplat(lanes, v); }

llvm::FunctionCallee CodeGenLLVM::runtime_function(const std::string& name) {
  llvm::Type* i32 = builder_->getInt32Ty();
  llvm::Type* i64 = builder_->getInt64Ty();
  llvm::Type* ptr = llvm::PointerType::get(*ctx_, 0);
  llvm::FunctionType* fty = nullptr;
  if (name == "kiln_parallel_launch") fty = llvm::FunctionType::get(i32, {ptr, ptr, i32}, false);
  else if (name == "kiln_num_threads") fty = llvm::FunctionType::get(i32, {}, false);
  else if (name == "kiln_alloc_workspace") fty = llvm::FunctionType::get(ptr, {i64}, false);
  else if (name == "kiln_free_workspace") fty = llvm::FunctionType::get(builder_->getVoidTy(), {ptr}, false);
  else if (name == "kiln_amx_request") fty = llvm::FunctionType::get(i32, {}, false);
  else if (name == "kiln_set_last_error") fty = llvm::FunctionType::get(builder_->getVoidTy(), {ptr}, false);
  KILN_CHECK(fty) << "unknown runtime function " << name;
  llvm::FunctionCallee callee = module_->getOrInsertFunction(name, fty);
  if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) f->addFnAttr(llvm::Attribute::NoUnwind);
  return callee;
}

// ------------------------------------------------------------------ casts

llvm::Value* CodeGenLLVM::bf16_to_f32(llvm::Value* v) {
  llvm::Type* i32 = builder_->getInt32Ty();
  llvm::Type* f32 = builder_->getFloatTy();
  if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType())) {
    i32 = llvm::FixedVectorType::get(i32, vt->getNumElements());
    f32 = llvm::FixedVectorType::get(f32, vt->getNumElements());
  }
  llvm::Value* wide = builder_->CreateShl(builder_->CreateZExt(v, i32), 16);
  return builder_->CreateBitCast(wide, f32);
}

llvm::Value* CodeGenLLVM::f32_to_bf16(llvm::Value* v) {
  llvm::Type* i32 = builder_->getInt32Ty();
  llvm::Type* i16 = builder_->getInt16Ty();
  if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType())) {
    i32 = llvm::FixedVectorType::get(i32, vt->getNumElements());
    i16 = llvm::FixedVectorType::get(i16, vt->getNumElements());
  }
  // Round to nearest even on the bit pattern; NaN stays a (quiet) NaN.
  llvm::Value* bits = builder_->CreateBitCast(v, i32);
  llvm::Value* lsb = builder_->CreateAnd(builder_->CreateLShr(bits, 16), 1);
  llvm::Value* rounded = builder_->CreateLShr(builder_->CreateAdd(builder_->CreateAdd(bits, llvm::ConstantInt::get(i32, 0x7fff)), lsb), 16);
  llvm::Value* nan = builder_->CreateOr(builder_->CreateLShr(bits, 16), 0x40);
  llvm::Value* is_nan = builder_->CreateFCmpUNO(v, v);
  return builder_->CreateTrunc(builder_->CreateSelect(is_nan, nan, rounded), i16);
}

llvm::Value* CodeGenLLVM::cast_value(llvm::Value* v, DataType from, DataType to) {
  if (from == to) return v;
  KILN_CHECK(from.lanes() == to.lanes()) << "cast from " << from.str() << " to " << to.str() << " changes lanes";
  if (from.is_bfloat()) return cast_value(bf16_to_f32(v), DataType::Float(32, from.lanes()), to);
  if (to.is_bfloat()) return f32_to_bf16(cast_value(v, from, DataType::Float(32, to.lanes())));
  llvm::Type* ty = llvm_type(to);
  KILN_USER_CHECK(!from.is_handle() && !to.is_handle()) << "cannot cast " << from.str() << " to " << to.str() << " in generated code";
  if (to.is_bool()) {
    if (from.is_float()) return builder_->CreateFCmpUNE(v, llvm::Constant::getNullValue(v->getType()));
    return builder_->CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
  }
  if (from.is_bool()) return to.is_float() ? builder_->CreateUIToFP(v, ty) : builder_->CreateZExt(v, ty);
  if (from.is_float() && to.is_float()) return to.bits() > from.bits() ? builder_->CreateFPExt(v, ty) : builder_->CreateFPTrunc(v, ty);
  if (from.is_float()) return to.is_int() ? builder_->CreateFPToSI(v, ty) : builder_->CreateFPToUI(v, ty);
  if (to.is_float()) return from.is_int() ? builder_->CreateSIToFP(v, ty) : builder_->CreateUIToFP(v, ty);
  // Integer to integer: widen by the source's signedness, narrow by truncation.
  if (to.bits() == from.bits()) return v;
  if (to.bits() < from.bits()) return builder_->CreateTrunc(v, ty);
  return from.is_int() ? builder_->CreateSExt(v, ty) : builder_->CreateZExt(v, ty);
}

llvm::Value* CodeGenLLVM::codegen(const Expr& e) {
  KILN_CHECK(e.defined()) << "codegen of an undefined expression";
  value = nullptr;
  visit_expr(e);
  KILN_CHECK(value) << "no value for " << ir_node_kind_name(e->kind);
  return value;
}

void CodeGenLLVM::codegen(const Stmt& s) { visit_stmt(s); }

}  // namespace kiln::codegen
