/** \file
 * Private to core/src/codegen/cuda: the CUDA C emitter. Statements are printed
 * line by line into body_; expressions are returned as strings (fully
 * parenthesised, so no precedence rules to get wrong).
 */
#ifndef KILN_SRC_CODEGEN_CUDA_CODEGEN_CUDA_H
#define KILN_SRC_CODEGEN_CUDA_CODEGEN_CUDA_H

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "kiln/codegen/cuda.h"

namespace kiln::codegen::cuda_detail {

using VarSet = std::unordered_set<const Variable*>;

/** How a block-level local buffer shrinks to one thread's part on the GPU. */
struct LocalPlan {
  /** Elements per thread. */
  int64_t size = 0;
  /** Coefficient of a loop variable in the rest -> its dense coefficient (empty: keep the rest). */
  std::map<int64_t, int64_t> dense;
  /** The per-thread index from the thread-free rest of an original index. */
  Expr rewrite(const Expr& rest) const;
};

/**
 * Block-level local buffers that shrink to one thread's part on the GPU
 * (local_compaction.cpp), by data variable. Fills *thread_vars with the
 * threadIdx loop variables of f.
 */
std::unordered_map<const Variable*, LocalPlan> plan_local_compaction(const PrimFunc& f, VarSet* thread_vars);

class CodeGenCUDA {
 public:
  CodeGenCUDA(const Target& target, const pass::LaunchConfig& launch) : target_(target), launch_(launch) {}
  std::string run(const PrimFunc& f);

 private:
  // Statements (codegen_cuda.cpp).
  void stmt(const Stmt& s);
  void nested(const Stmt& s);
  void line(const std::string& s);
  void emit_for(const For* op);
  void emit_bound_loop(const For* op);
  void emit_thread0_region(const Stmt& s);
  std::string emit_allreduce(const Call* op);
  std::string combine(ReduceKind kind, DataType t, const std::string& a, const std::string& b);
  void emit_store(const BufferStore* op);
  void emit_allocate(const Allocate* op);
  bool emit_vector_store(const For* op);
  bool emit_vector_copy(const For* op);
  bool in_memory(const Variable* data) const;
  // Tensor cores (codegen_cuda_mma.cpp).
  void scan_mma(const PrimFunc& f);
  void emit_mma(const pass::MmaCall& m);
  bool emit_fragment_allocation(const Allocate* op);
  std::string unbound_guard() const;
  std::string prelude();
  std::string ident(const std::string& hint, const Variable* v);
  std::string var_name(const Variable* v);

  // Expressions (codegen_cuda_expr.cpp).
  std::string expr(const Expr& e);
  std::string ctype(DataType t);
  std::string literal(const Expr& e);
  std::string binary(const char* op, const Expr& a, const Expr& b);
  std::string min_max(bool is_min, const Expr& a, const Expr& b);
  std::string call(const Call* op);
  std::string access(const BufferNode* b, const Expr& index);

  Target target_;
  pass::LaunchConfig launch_;
  std::string name_;
  std::ostringstream body_;
  int indent_ = 0;
  // Inside a thread nest (or a thread-0 region), and the thread dims bound there.
  bool in_thread_ = false;
  int bound_dims_ = 0;
  bool uses_fp16_ = false, uses_bf16_ = false;
  std::unordered_map<const Variable*, std::string> names_;
  std::set<std::string> used_;
  // Local buffers shrunk to one thread's part (plan_local_compaction), and the thread variables.
  std::unordered_map<const Variable*, LocalPlan> compact_;
  VarSet thread_vars_;
  // The variable holding each thread_allreduce's result (in thread 0), once emitted.
  std::unordered_map<const Call*, std::string> allreduce_values_;
  // Tensor-core accumulators (data variable -> fragments per warp), the
  // buffers warp loads read (aligned to 32 bytes), and whether any is used.
  std::unordered_map<const Variable*, int64_t> fragments_;
  std::unordered_set<const Variable*> mma_operands_;
  // Loops whose variables number fragments: unrolled, so the numbers are constants (registers, not local memory).
  VarSet fragment_loop_vars_;
  bool uses_mma_ = false;
  // Scope of each buffer's storage, by data variable.
  std::unordered_map<const Variable*, std::string> scope_;
};

}  // namespace kiln::codegen::cuda_detail

#endif  // KILN_SRC_CODEGEN_CUDA_CODEGEN_CUDA_H
