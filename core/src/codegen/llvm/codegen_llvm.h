/** \file
 * CodeGenLLVM: lowered PrimFuncs to LLVM IR. Private to core/src/codegen/llvm.
 *
 * In the manner of Halide's CodeGen_LLVM, it is an IRVisitor that leaves the
 * value of each expression in `value`. The work is split over files:
 *   codegen_llvm.cpp         module and function scaffolding, types, casts
 *   codegen_expr.cpp         expressions: arithmetic, loads, vectors
 *   codegen_stmt.cpp         statements: loops, stores, allocation, control flow
 *   codegen_parallel.cpp     parallel loops outlined for kiln_parallel_launch
 *   codegen_vector_math.cpp  exp, log, tanh, erf, ... as inline polynomials
 *   codegen_bf16_pairs.cpp   bfloat16 pair packing and dot products (vdpbf16ps)
 *   codegen_amx.cpp          nests marked amx on AMX tiles (tdpbusd, tdpbf16ps)
 * and around it: llvm_build.cpp (target machine, O3, machine code, object
 * files), jit.cpp (ORC LLJIT, runtime Module), llvm_target_info.cpp (host).
 *
 * Each PrimFunc `f` becomes two functions:
 *   i32 @f(ptr %args)                      the C ABI of c_runtime_api.h: unpacks
 *                                          the argument array and calls
 *   i32 @f.compute(ptr noalias %A, ...)    the body, internal and alwaysinline.
 * The `noalias` on the buffer parameters survives inlining as scoped alias
 * metadata, which is what lets LLVM vectorise and reorder loads and stores
 * of different buffers. Kernels therefore assume that distinct buffer
 * parameters never overlap (as TVM and Halide do). Parallel bodies use the
 * same two-level shape for their captured buffers.
 *
 * Memory: buffers are accessed with the alignment of their element type
 * only: a buffer argument may start at any element (a DLTensor's byte
 * offset is applied by the caller), so no wider alignment is guaranteed.
 * Bool is i1 in registers and i8 in memory; bfloat16 is i16 in registers
 * and converted through float32 for arithmetic.
 */
#ifndef KILN_CODEGEN_LLVM_CODEGEN_LLVM_H
#define KILN_CODEGEN_LLVM_CODEGEN_LLVM_H

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/codegen/target.h"
#include "kiln/ir/function.h"
#include "kiln/ir/functor.h"

namespace llvm {
class TargetMachine;
}

namespace kiln::codegen {

/** The base b of a vector index that is a dense ramp, Ramp(b, 1, n) (or one plus a broadcast); undefined otherwise. */
Expr dense_ramp_base(const Expr& index);

class CodeGenLLVM : public IRVisitor {
 public:
  /** `tm` fixes the triple, data layout and target attributes of the functions. */
  CodeGenLLVM(llvm::LLVMContext* ctx, llvm::TargetMachine* tm, const Target& target, const std::string& module_name);
  ~CodeGenLLVM() override;

  /** Emits `f` as an external function of the C ABI. Throws kiln::Error on unsupported IR. */
  void add_function(const PrimFunc& f);
  /** Verifies and hands over the module; throws kiln::Error if LLVM's verifier objects. */
  std::unique_ptr<llvm::Module> finish();

  /** Allocations up to this many bytes (constant size) live on the stack; larger ones use kiln_alloc_workspace. */
  static constexpr int64_t kMaxStackAllocBytes = 64 * 1024;
  /** Total stack one function may take for Allocates before the rest goes to the heap. */
  static constexpr int64_t kMaxStackBytesPerFunction = 256 * 1024;

 protected:
  // ---- IRVisitor
#define KILN_X(T) void visit(const T* op) override;
  KILN_FOR_EACH_EXPR_NODE(KILN_X)
  KILN_FOR_EACH_STMT_NODE(KILN_X)
#undef KILN_X

  llvm::Value* codegen(const Expr& e);
  void codegen(const Stmt& s);

  // ---- types and conversions (codegen_llvm.cpp)
  /** The register type: bool is i1, bfloat16 is i16, handle is ptr. */
  llvm::Type* llvm_type(DataType t);
  /** The memory type: as llvm_type, except bool is i8. */
  llvm::Type* llvm_mem_type(DataType t);
  llvm::Value* to_memory(llvm::Value* v, DataType t);
  llvm::Value* from_memory(llvm::Value* v, DataType t);
  llvm::Value* cast_value(llvm::Value* v, DataType from, DataType to);
  llvm::Value* bf16_to_f32(llvm::Value* v);
  llvm::Value* f32_to_bf16(llvm::Value* v);
  llvm::Constant* int_const(DataType t, int64_t v);
  llvm::Constant* float_const(DataType t, double v);
  /** Splats a scalar to `lanes` (no-op when lanes == 1). */
  llvm::Value* splat(llvm::Value* v, int lanes);
  /** A runtime function of c_runtime_api.h, declared on first use. */
  llvm::FunctionCallee runtime_function(const std::string& name);

  // ---- expressions (codegen_expr.cpp)
  llvm::Value* emit_arith(IRNodeKind op, DataType t, llvm::Value* a, llvm::Value* b);
  llvm::Value* emit_float_min_max(bool is_max, llvm::Value* a, llvm::Value* b);
  llvm::Value* emit_floor_div_mod(bool is_div, DataType t, llvm::Value* a, llvm::Value* b, const Expr& divisor);
  llvm::Value* emit_compare(IRNodeKind op, DataType operand, llvm::Value* a, llvm::Value* b);
  /** The vectors (of equal lanes, any count) one after another in one vector. */
  llvm::Value* concat_vectors(const std::vector<llvm::Value*>& parts);
  /** Pointer to buffer[index] (scalar index) or a vector of pointers (vector index). */
  llvm::Value* element_pointer(const BufferNode* buffer, llvm::Value* index);
  llvm::Value* buffer_base(const BufferNode* buffer);
  /** Emits cond ? then() : else() evaluating only the branch taken. */
  llvm::Value* emit_branch_select(llvm::Value* cond, const Expr& then_value, const Expr& else_value);

  // ---- statements (codegen_stmt.cpp)
  /** for (var = begin; var < end; ++var) body, with optional loop metadata. */
  void emit_loop(const Var& var, llvm::Value* begin, llvm::Value* end, const Stmt& body, llvm::MDNode* loop_md);
  llvm::MDNode* loop_metadata(const char* key);
  /** Frees the live workspaces of this function and returns `code` (the current block ends). */
  void emit_error_return(llvm::Value* code);
  /** An alloca in the entry block of the current function (so loops do not grow the stack). */
  llvm::AllocaInst* entry_alloca(llvm::Type* t, llvm::Value* count, uint64_t align, const std::string& name);
  /** Branch weights saying the true edge is (almost) always taken. */
  llvm::MDNode* likely_weights();

  // ---- transposed tiles (codegen_transpose.cpp)
  /** A loop storing vectors read down a column, as loads of rows transposed in registers; false when the loop is not one. */
  bool emit_transposed_tile(const For* op);

  // ---- parallel loops (codegen_parallel.cpp)
  void emit_parallel_loop(const For* op);

  // ---- bfloat16 pairs (codegen_bf16_pairs.cpp)
  llvm::Value* emit_pack_bf16x2(llvm::Value* lo, llvm::Value* hi);
  /** acc + dot_bf16x2(a, b); acc may be null (the dot alone). */
  llvm::Value* emit_dot_bf16x2(llvm::Value* acc, llvm::Value* a, llvm::Value* b);
  int bf16_dot_width(int lanes) const;

  // ---- int8 dot products (codegen_i8_dot.cpp)
  /** acc + dot_i8x4(a, b) with the bytes of a and b signed as given; acc may be null (the dot alone). */
  llvm::Value* emit_dot_i8x4(llvm::Value* acc, llvm::Value* a, llvm::Value* b, bool a_signed, bool b_signed);
  llvm::Value* emit_dot_i8x4_instr(llvm::Value* acc, llvm::Value* a, llvm::Value* b, bool a_signed, bool b_signed, int w);
  std::vector<int> i8_dot_widths(bool a_signed, bool b_signed) const;

  // ---- byte quads (codegen_byte_quads.cpp)
  /** Four consecutive bytes packed into a uint32 (ops::pad_quads_nchwc) as one load; null when `op` is not that sum. */
  llvm::Value* try_emit_byte_quad(const Add* op);

  // ---- AMX tiles (codegen_amx.cpp)
  /** A nest marked "amx" (kiln/pass/amx.h) as tile code; throws kiln::Error for a target without AMX. */
  void emit_amx_block(const AttrStmt* op);

  // ---- math (codegen_vector_math.cpp)
  llvm::Value* emit_math(const Call* op);
  llvm::Value* emit_math_f32(Intrinsic fn, const std::vector<llvm::Value*>& args);
  llvm::Value* emit_math_f64(Intrinsic fn, const std::vector<llvm::Value*>& args);
  llvm::Value* emit_exp_f32(llvm::Value* x);
  llvm::Value* emit_exp_reduced(llvm::Value* r, llvm::Value* k);
  llvm::Value* emit_log_f32(llvm::Value* x);
  llvm::Value* emit_log_f64_positive(llvm::Value* x);
  llvm::Value* emit_tanh_f32(llvm::Value* x);
  llvm::Value* emit_sigmoid_f32(llvm::Value* x);
  llvm::Value* emit_exp_nonpositive_f32(llvm::Value* a);
  llvm::Value* emit_erf_f32(llvm::Value* x);
  llvm::Value* emit_sincos_f32(llvm::Value* x, bool cosine);
  llvm::Value* emit_pow_f32(llvm::Value* x, llvm::Value* y);
  llvm::Value* horner(llvm::Value* x, const std::vector<double>& coeffs_high_to_low);
  llvm::Value* call_intrinsic(llvm::Intrinsic::ID id, const std::vector<llvm::Value*>& args);
  /** Calls libm's `name` on each lane (double only). */
  llvm::Value* call_libm_per_lane(const char* name, const std::vector<llvm::Value*>& args);

  // ---- function scaffolding (codegen_llvm.cpp)
  /** A parameter of an internal compute function. */
  struct ComputeParam {
    const Variable* var;
    llvm::Type* type;
    bool noalias;
  };
  /** Everything that belongs to the function being emitted; saved around outlined bodies. */
  struct FunctionState {
    llvm::Function* function = nullptr;
    std::unordered_map<const Variable*, llvm::Value*> vars;
    std::vector<llvm::Value*> live_workspaces;
    int64_t stack_bytes = 0;
  };
  /** Creates an internal alwaysinline function over `params`, makes it current and binds the vars. */
  llvm::Function* begin_compute_function(const std::string& name, const std::vector<ComputeParam>& params);
  void set_function_attributes(llvm::Function* f);
  std::vector<ComputeParam> compute_params(const PrimFunc& f);
  std::string unique_name(const std::string& base);

  llvm::LLVMContext* ctx_;
  llvm::TargetMachine* tm_;
  Target target_;
  std::unique_ptr<llvm::Module> module_;
  std::unique_ptr<llvm::IRBuilder<>> builder_;
  FunctionState fn_;
  /** True while emitting the body of a parallel loop: inner parallel loops run serially. */
  bool in_parallel_ = false;
  std::string current_func_name_;
  std::unordered_map<std::string, int> name_counts_;

  /** The result of the last expression visited. */
  llvm::Value* value = nullptr;
};

}  // namespace kiln::codegen

#endif  // KILN_CODEGEN_LLVM_CODEGEN_LLVM_H
