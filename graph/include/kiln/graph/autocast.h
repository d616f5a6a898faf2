/** \file
 * Mixed precision as a graph pass, in the manner of torch.autocast: the
 * operators of an allow list (MatMul, Gemm, Conv) take their float32 inputs
 * rounded to a 16-bit float (bfloat16 or float16) and give their result
 * rounded to it, accumulating in float32 between; every other operator
 * (softmax, norms, losses, reductions, elementwise) stays in float32. The
 * parameters stay float32 (master weights): only the copy an operator reads
 * is rounded. Gradients through the rounding are rounded the same way (the
 * gradient of Cast casts back), so float16's narrow range shows up in the
 * backward pass as it would on hardware: what dynamic loss scaling is for.
 *
 * The rounding is explicit Cast pairs (float32 -> 16-bit -> float32); the
 * products of two 16-bit floats are exact in float32, so a float32 matmul of
 * rounded inputs is the 16-bit matmul with float32 accumulation. This gives
 * the numerics of the 16-bit path on any CPU. On a target with AVX-512
 * BF16, the pipeline's use_bf16_dot pass (passes.h) then turns each bfloat16
 * MatMul/Gemm, group-1 Conv with computed weights and their gradients into
 * dot products over operands packed as bfloat16 pairs (vdpbf16ps: half the
 * operand bytes, twice the products per instruction). Other convolutions
 * keep the Cast pairs.
 */
#ifndef KILN_GRAPH_AUTOCAST_H
#define KILN_GRAPH_AUTOCAST_H

#include <string>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::graph {

struct AutocastOptions {
  DataType low = DataType::BFloat16();  ///< bfloat16 or float16
  std::vector<std::string> ops = {"MatMul", "Gemm", "Conv"};
  bool round_outputs = true;            ///< the allowed ops' results rounded too (autocast's output dtype)
};

/** Throws kiln::Error when `low` is not a 16-bit float. */
Graph autocast(const Graph& g, const AutocastOptions& options = {});

/** x rounded to `low` and back to float32: the Cast pair autocast puts on an operand. */
Value round_through(const Value& x, DataType low);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_AUTOCAST_H
