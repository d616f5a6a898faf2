/** \file
 * The steps every LLVM build shares (JIT, object file, IR and assembly text):
 * a TargetMachine for a Target, IR generation, the O3 pipeline and machine
 * code emission. Private to core/src/codegen/llvm.
 */
#ifndef KILN_CODEGEN_LLVM_LLVM_BUILD_H
#define KILN_CODEGEN_LLVM_LLVM_BUILD_H

#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <memory>
#include <vector>

#include "kiln/codegen/llvm.h"

namespace kiln::codegen::detail {

/** A TargetMachine for an llvm Target: PIC, small code model, -O3 code generation. */
std::unique_ptr<llvm::TargetMachine> create_target_machine(const Target& target);

/** Codegen of `funcs` into a fresh module of `ctx` (verified). */
std::unique_ptr<llvm::Module> generate_module(llvm::LLVMContext* ctx, llvm::TargetMachine* tm, const std::vector<PrimFunc>& funcs, const Target& target);

/** LLVM's O3 pipeline (new pass manager) tuned for `tm`. */
void optimize_module(llvm::Module* module, llvm::TargetMachine* tm);

/** Machine code of `module`: an object file, or assembly text. */
llvm::SmallVector<char, 0> emit_machine_code(llvm::Module* module, llvm::TargetMachine* tm, bool assembly);

/** Milliseconds since `start` (a steady_clock reading in ns). */
double elapsed_ms(long long start_ns);
long long now_ns();

}  // namespace kiln::codegen::detail

#endif  // KILN_CODEGEN_LLVM_LLVM_BUILD_H
