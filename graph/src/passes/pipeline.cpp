// optimize: the graph pass pipeline, a plain list of calls (passes.h).
#include <cstdlib>
#include <string>
#include <utility>

#include "kiln/graph/passes.h"
#include "kiln/ops/bf16_pairs.h"
#include "kiln/support/ir_log.h"

namespace kiln::graph {

// The smallest depthwise output to fuse (-1: none), from the mode or, where
// it is left to the default, the environment's KILN_FUSE_DWPW (0 off, 1 every size; for A/B runs).
int64_t depthwise_pointwise_min_bytes(int mode) {
  const char* env = std::getenv("KILN_FUSE_DWPW");
  if (mode < 0 && env && (std::string(env) == "0" || std::string(env) == "1")) mode = env[0] - '0';
  return mode == 0 ? -1 : mode == 1 ? 0 : kDepthwisePointwiseMinBytes;
}

Graph optimize(const Graph& g, const Target& target, const PipelineOptions& options) {
  IrLog log(options.dump);
  Graph out = g;
  // A graph pass is printed whole even when it changed nothing: the graph is short.
  auto after = [&](const char* pass, auto&& run_pass) {
    out = log.run(pass, [&] { return run_pass(out); }, [](const Graph& o) { return o.str(); });
  };
  log.heading("input graph", [&] { return g.str(); });
  after("remove_identity", remove_identity);
  after("fold_transposes", fold_transposes);
  // By default only where the pair dot products beat float32 FMAs on the rounded operands.
  bool bf16_dot = target.kind == Target::Kind::LLVM && (options.bf16_dot == 1 || (options.bf16_dot < 0 && ops::target_bf16_dot_pays(target)));
  if (bf16_dot) after("use_amx_convs", [&](const Graph& in) { return use_amx_convs(in, target); });
  if (bf16_dot) after("use_bf16_dot", use_bf16_dot);
  if (bf16_dot) after("use_amx_operands", [&](const Graph& in) { return use_amx_operands(in, target); });
  // Before fold_constants, which would fold the weights' DequantizeLinear to float32.
  if (target.kind == Target::Kind::LLVM && options.int8_dot) after("use_int8_dot", [&](const Graph& in) { return use_int8_dot(in, target); });
  if (target.kind == Target::Kind::LLVM && options.int8_dot) after("use_int8_conv", [&](const Graph& in) { return use_int8_conv(in, target); });
  after("fold_constants", [](const Graph& in) { return fold_constants(in); });
  after("fold_batch_norm", fold_batch_norm);
  after("eliminate_common_subexpr", eliminate_common_subexpr);
  if (options.layout) after("alter_conv_layout", [&](const Graph& in) { return alter_conv_layout(in, target, options.layout_plan); });
  if (options.layout && bf16_dot) after("use_bf16_packed_weights", [&](const Graph& in) { return use_bf16_packed_weights(in, target); });
  if (options.fuse) after("fuse_ops", [](const Graph& in) { return fuse_ops(in); });
  else after("wrap_ops", wrap_ops);
  // The plan's per-pair decisions, then the size rule for the other pairs.
  if (int64_t dwpw = depthwise_pointwise_min_bytes(options.depthwise_pointwise); options.fuse && (dwpw >= 0 || !options.layout_plan.dwpw_fuse.empty()))
    after("fuse_depthwise_pointwise", [&](const Graph& in) { return fuse_depthwise_pointwise(in, target, dwpw, options.layout_plan.dwpw_fuse); });
  return out;
}

}  // namespace kiln::graph
