/** \file
 * Graph passes: each a free function (graph in, graph out) in its own file
 * of graph/src/passes/, and the pipeline that runs them in order. With the
 * environment variable KILN_DUMP_IR set, the pipeline prints the graph after
 * every pass to stderr (KILN_DUMP_IR=<pass name> prints only after that one),
 * through the IR logger the loop and GPU passes share (kiln/support/ir_log.h).
 *
 * Dead code needs no pass: a graph holds what its outputs reach, so a node
 * nobody reads is gone with the next rebuild.
 */
#ifndef KILN_GRAPH_PASSES_H
#define KILN_GRAPH_PASSES_H

#include <string>

#include "kiln/codegen/target.h"
#include "kiln/graph/graph.h"
#include "kiln/graph/layout_plan.h"

namespace kiln::graph {

/** Replaces the outputs of identity operators (Identity, inference Dropout: OpDef::is_identity) by their input. */
Graph remove_identity(const Graph& g);

/** A Transpose of a Transpose becomes one Transpose of the composed permutation, or its input when that is the identity. */
Graph fold_transposes(const Graph& g);

/**
 * Evaluates every operator whose inputs are all constants (or whose result
 * follows from its input types alone, as Shape's) and replaces it with a
 * constant: the Shape -> Gather -> Concat -> Reshape chains exporters write
 * become a constant shape. Results larger than max_bytes stay computed
 * (folding would trade a cheap kernel for resident memory). Values with a
 * zero dimension fold to empty constants whatever their inputs, and a Concat
 * leaves out its empty inputs: no kernel runs over an extent of 0.
 */
Graph fold_constants(const Graph& g, int64_t max_bytes = int64_t(64) << 20);

/** fold_constants for one node: its outputs as constants when it folds, else {} (importers fold as they build). */
std::vector<Value> fold_node(const Ref<OpNode>& node, int64_t max_bytes = int64_t(64) << 20);

/** Folds an inference BatchNormalization that follows a Conv into the Conv's weights and bias. */
Graph fold_batch_norm(const Graph& g);

/**
 * Convolutions in the blocked NCHWc layout (weights packed at compile time),
 * elementwise operators between them blocked too, and layout transforms
 * left only at the boundaries of the blocked region (and between
 * convolutions the plan blocks differently); constant MatMul/Gemm weights
 * packed into panels of two vectors' columns. CPU targets only.
 */
Graph alter_conv_layout(const Graph& g, const Target& target, const LayoutPlan& plan = {});

/** Merges operator nodes with the same op, attributes and inputs (and constants with the same bytes). */
Graph eliminate_common_subexpr(const Graph& g);

/**
 * Groups operators into fused kernels, in the manner of TVM: a group led by
 * a conv/matmul (output-fusable) or a reduction takes the elementwise and
 * broadcast operators after it, chains of injective operators become one
 * group, and an elementwise chain may end in the reduction that reads it.
 * A group extends from a node only to its immediate post-dominator, so no
 * value inside a group is read outside it. Each group becomes one node of
 * the op "kiln.fused" whose body is the subgraph it runs.
 */
Graph fuse_ops(const Graph& g, int max_group_size = 64);

/** The depthwise input or output from which fusing it with its 1x1 conv measured faster (fuse_depthwise_pointwise.cpp). */
inline constexpr int64_t kDepthwisePointwiseMinBytes = int64_t(1) << 20;

/**
 * After fuse_ops, on CPU targets: a blocked depthwise conv's group and the
 * group of the 1x1 stride-1 conv that is its only reader become one group
 * (the bodies joined), which kiln/ops/cpu_dwpw.h schedules tile by tile so the
 * depthwise output stays in the cache (fuse_depthwise_pointwise.cpp), where
 * its input or output holds min_bytes or more (smaller ones stay in the cache unfused);
 * its output alone where the target has several cores (target.num_cores > 1).
 */
Graph fuse_depthwise_pointwise(const Graph& g, const Target& target, int64_t min_bytes = kDepthwisePointwiseMinBytes);

/**
 * As above, where `decisions` (a LayoutPlan's dwpw_fuse: per depthwise conv
 * name, fuse or not) overrides the size rule for the pairs it names; a
 * negative min_bytes fuses no other pair.
 */
Graph fuse_depthwise_pointwise(const Graph& g, const Target& target, int64_t min_bytes, const std::map<std::string, bool>& decisions);

/** A depthwise conv group and the 1x1 conv group that alone reads its output: a pair fuse_depthwise_pointwise may merge. */
struct DepthwisePointwisePair {
  std::string depthwise;  ///< the depthwise conv's node name (the key of LayoutPlan::dwpw_fuse)
  std::string pointwise;  ///< the 1x1 conv's node name
  int64_t bytes = 0;      ///< what the size rule weighs (depthwise_bytes in the pass)
  bool by_rule = false;   ///< whether the size rule (under min_bytes) fuses it
};

/** The pairs of `g` (after fuse_ops, before fuse_depthwise_pointwise), in graph order. */
std::vector<DepthwisePointwisePair> depthwise_pointwise_pairs(const Graph& g, const Target& target, int64_t min_bytes = kDepthwisePointwiseMinBytes);

/** The smallest depthwise bytes the size rule fuses (-1: none) under PipelineOptions::depthwise_pointwise's mode and KILN_FUSE_DWPW. */
int64_t depthwise_pointwise_min_bytes(int mode);

/** One node per operator, each wrapped as a group of one (what fuse_ops gives with fusion off). */
Graph wrap_ops(const Graph& g);

/**
 * MatMul, Gemm, group-1 Conv (weights not constant) and Conv's gradients of
 * operands that hold bfloat16 values (autocast's float32 Casts of them)
 * become bfloat16 dot products over operands packed in pairs
 * (kiln.PackBF16Pairs and the kiln.*BF16Pairs ops; see use_bf16_dot.cpp).
 */
Graph use_bf16_dot(const Graph& g);

/** Whether `v` is an operand use_bf16_dot takes: float32 holding bfloat16 values (a float32 Cast
 *  of a bfloat16 value, or a Reshape/Transpose/Squeeze/Unsqueeze/Flatten of one). */
bool holds_bfloat16_values(const Value& v);

/** The value use_bf16_dot packs for an operand that holds bfloat16 values (undefined for any other):
 *  x of Cast(Cast(x, bfloat16), float32), seen through element moves and layout changes. */
Value bfloat16_source(const Value& v);

/**
 * On targets with AMX-BF16 (ops::target_has_amx), before use_bf16_dot: a
 * 2-D group-1 Conv of computed weights and Conv's gradients, of operands
 * that hold bfloat16 values, become an im2col (the windows as rows,
 * channels-last) and one kiln.MatMulBF16Pairs, which AMX tiles run
 * (use_amx_convs.cpp). Other targets, and shapes the tiles do not take,
 * are left to use_bf16_dot.
 */
Graph use_amx_convs(const Graph& g, const Target& target);

/**
 * On targets with AMX-BF16 (ops::target_has_amx): a kiln.MatMulBF16Pairs
 * with transA or transB reads that operand through a Transpose of its pair
 * words, flags cleared, so that AMX tiles take it (use_amx_operands.cpp).
 * Other targets keep the flags.
 */
Graph use_amx_operands(const Graph& g, const Target& target);

/**
 * Constant weights in bfloat16, in the layouts alter_conv_layout gives float32
 * ones (run after it): a blocked convolution (kiln.ConvNCHWc, group 1) whose
 * input holds bfloat16 values (autocast's) and whose packed weights are all
 * bfloat16 values becomes kiln.ConvNCHWcBF16Pairs (input and weights packed
 * in pairs along the block's channels), and a kiln.MatMulBF16Pairs with
 * constant weights reads them packed into panels (kiln.MatMulPackedBBF16Pairs),
 * as kiln.MatMulPackedB does in float32. The weights take half the bytes;
 * the products run on vdpbf16ps.
 */
Graph use_bf16_packed_weights(const Graph& g, const Target& target);

/**
 * MatMulInteger, QLinearMatMul and QuantizeLinear([Relu](MatMul(DequantizeLinear,
 * DequantizeLinear))) with constant scales and zero points (per tensor, or per
 * column of the 2-D weights) become one int8 kernel over byte quads along K,
 * on the target's dot instruction (kiln.QMatMulI8x4; see use_int8_dot.cpp).
 * Targets without one (AVX2, AArch64 without dotprod) keep the ops as they are.
 */
Graph use_int8_dot(const Graph& g, const Target& target);

/**
 * QuantizeLinear([Relu](Conv(DequantizeLinear, DequantizeLinear[, bias]))),
 * QLinearConv and ConvInteger (2-D, group 1, constant weights, scales and
 * zero points) become kiln.QConvNCHWcI8: vpdpbusd over byte quads of the
 * blocked layout with the bias, zero points, requantization and ReLU in its
 * epilogue (see use_int8_conv.cpp). Targets without VNNI keep the dense convs;
 * depthwise convs run int8 on every x86 target (kiln.QDepthwiseNCHWcI8).
 */
Graph use_int8_conv(const Graph& g, const Target& target);

struct PipelineOptions {
  bool fuse = true;
  /** Run alter_conv_layout (convolutions in NCHWc). */
  bool layout = true;
  /** Print the graph after each pass to stderr (also by KILN_DUMP_IR). */
  bool dump = false;
  /** The convolutions' channel blocking (alter_conv_layout). */
  LayoutPlan layout_plan = {};
  /** use_bf16_dot: -1 where the pair dot products pay (the default; ops::target_bf16_dot_pays: AVX-512 BF16, but not on Intel's
   *  slow vdpbf16ps without AMX), 0 never, 1 on every llvm target (emulated without the instructions). */
  int bf16_dot = -1;
  /** use_int8_dot and use_int8_conv: on llvm targets unless false. */
  bool int8_dot = true;
  /** fuse_depthwise_pointwise (with fuse): -1 where the depthwise input or output holds kDepthwisePointwiseMinBytes (the default; the
   *  environment's KILN_FUSE_DWPW=0 turns it off, =1 fuses every size), 0 never, 1 every size. */
  int depthwise_pointwise = -1;
};

/** The pipeline: remove_identity, fold_transposes, use_amx_convs and use_bf16_dot (see bf16_dot) and use_amx_operands, use_int8_dot, use_int8_conv, fold_constants, fold_batch_norm, eliminate_common_subexpr,
 *  alter_conv_layout, use_bf16_packed_weights (with use_bf16_dot), then fuse_ops (or wrap_ops) and fuse_depthwise_pointwise. */
Graph optimize(const Graph& g, const Target& target, const PipelineOptions& options = {});

}  // namespace kiln::graph

#endif  // KILN_GRAPH_PASSES_H
