// optimize: the graph pass pipeline, a plain list of calls (passes.h).
#include <cstdlib>
#include <functional>
#include <iostream>
#include <utility>

#include "kiln/graph/passes.h"

namespace kiln::graph {

Graph optimize(const Graph& g, const Target& target, const PipelineOptions& options) {
  const char* env = std::getenv("KILN_DUMP_IR");
  std::string only = env && *env && std::string(env) != "1" ? env : "";
  bool dump = options.dump || (env && *env);
  auto after = [&](const char* pass, const Graph& out) {
    if (dump && (only.empty() || only == pass)) std::cerr << "// after " << pass << "\n" << out.str() << "\n";
    return out;
  };
  Graph out = g;
  if (dump && only.empty()) std::cerr << "// input graph\n" << g.str() << "\n";
  out = after("remove_identity", remove_identity(out));
  out = after("remove_empty_values", remove_empty_values(out));
  out = after("fold_transposes", fold_transposes(out));
  bool bf16_dot = target.kind == Target::Kind::LLVM && (options.bf16_dot == 1 || (options.bf16_dot < 0 && target.has_feature("avx512bf16")));
  if (bf16_dot) out = after("use_bf16_dot", use_bf16_dot(out));
  out = after("fold_constants", fold_constants(out));
  out = after("fold_batch_norm", fold_batch_norm(out));
  out = after("eliminate_common_subexpr", eliminate_common_subexpr(out));
  if (options.layout) out = after("alter_conv_layout", alter_conv_layout(out, target, options.layout_plan));
  out = options.fuse ? after("fuse_ops", fuse_ops(out)) : after("wrap_ops", wrap_ops(out));
  return out;
}

}  // namespace kiln::graph
