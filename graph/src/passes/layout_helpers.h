// Small readers shared by the layout passes (alter_conv_layout.cpp,
// train_layout.cpp, layout_defaults.cpp). Internal to the graph passes.
#ifndef KILN_GRAPH_PASSES_LAYOUT_HELPERS_H
#define KILN_GRAPH_PASSES_LAYOUT_HELPERS_H

#include <cstdint>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::graph::layout_detail {

/** The block of a value made by LayoutTransform(b -> NCHW), else 0. */
inline int64_t block_behind(const Value& v) {
  if (!v.defined() || v.node->kind != NodeKind::Op) return 0;
  const auto& op = static_cast<const OpNode&>(*v.node);
  if (op.op->name != "kiln.LayoutTransform" || op.attrs.get_int("dst_block") != 0) return 0;
  return op.attrs.get_int("src_block");
}

/** The ints attribute `name`, or `fallback` where it is missing or empty (ONNX's defaults). */
inline std::vector<int64_t> ints_or(const Attrs& a, const char* name, std::vector<int64_t> fallback) {
  if (!a.has(name) || a.get_ints(name).empty()) return fallback;
  return a.get_ints(name);
}

}  // namespace kiln::graph::layout_detail

#endif  // KILN_GRAPH_PASSES_LAYOUT_HELPERS_H
