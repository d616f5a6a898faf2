/** \file
 * The runtime metadata of a lowered kernel (KernelInfo): its parameters'
 * names, kinds and dtypes, and each buffer's dimensions as ShapeExprs of the
 * scalar parameters, from which every call binds and checks shape variables
 * (kiln/runtime/arg_binder.h). Every backend attaches it to its kernels, and
 * the interpreter's Arg overload checks calls with it.
 */
#ifndef KILN_CODEGEN_KERNEL_METADATA_H
#define KILN_CODEGEN_KERNEL_METADATA_H

#include <functional>
#include <string>

#include "kiln/ir/function.h"
#include "kiln/runtime/module.h"

namespace kiln::codegen {

/**
 * The metadata of `func`. Buffer dimensions and strides may be constants,
 * scalar parameters, or +, -, *, /, %, floordiv, floormod, min, max of them
 * (integer casts are looked through); anything else, or a variable that is
 * not a parameter, throws kiln::Error: the call boundary could not check it.
 */
KernelInfo kernel_info(const PrimFunc& func);

/**
 * An integer expression as the runtime's ShapeExpr: constants, variables
 * (`param_of` gives a variable's parameter index, or throws its own error),
 * and +, -, *, /, %, floordiv, floormod, min, max of them, integer casts
 * looked through. Anything else throws kiln::Error starting with `what`.
 */
ShapeExpr to_shape_expr(const Expr& e, const std::function<int64_t(const Variable*)>& param_of, const std::string& what);

}  // namespace kiln::codegen

#endif  // KILN_CODEGEN_KERNEL_METADATA_H
