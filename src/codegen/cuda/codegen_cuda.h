/** \file
 * Private to src/codegen/cuda: the CUDA C emitter. Statements are printed
 * line by line into body_; expressions are returned as strings (fully
 * parenthesised, so no precedence rules to get wrong).
 */
#ifndef KILN_SRC_CODEGEN_CUDA_CODEGEN_CUDA_H
#define KILN_SRC_CODEGEN_CUDA_CODEGEN_CUDA_H

#include <set>
#include <sstream>
#include <string>
#include <unordered_map>

#include "kiln/codegen/cuda.h"

namespace kiln::codegen::cuda_detail {

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
  void emit_store(const BufferStore* op);
  void emit_allocate(const Allocate* op);
  bool emit_vector_copy(const For* op);
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
  // Scope of each buffer's storage, by data variable.
  std::unordered_map<const Variable*, std::string> scope_;
};

}  // namespace kiln::codegen::cuda_detail

#endif  // KILN_SRC_CODEGEN_CUDA_CODEGEN_CUDA_H
