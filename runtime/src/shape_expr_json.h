// ShapeExpr <-> JSON, as kernel metadata (module.h) and dynamic model plans
// (model.h) write it: an integer, {"param": i}, or {"op": ..., "a": ..., "b": ...}.
// Internal to kiln_runtime (kernel_info.cpp defines them).
#ifndef KILN_RUNTIME_SRC_SHAPE_EXPR_JSON_H
#define KILN_RUNTIME_SRC_SHAPE_EXPR_JSON_H

#include <nlohmann/json.hpp>
#include <string>

#include "kiln/runtime/shape_expr.h"

namespace kiln::detail {

nlohmann::json shape_expr_to_json(const ShapeExpr& e);
/** Throws kiln::Error naming `where` when `j` is no ShapeExpr. */
ShapeExpr shape_expr_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace kiln::detail

#endif  // KILN_RUNTIME_SRC_SHAPE_EXPR_JSON_H
