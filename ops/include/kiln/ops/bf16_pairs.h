/** \file
 * The bfloat16 matmul of the dot-product instructions (AVX-512 BF16's
 * vdpbf16ps, and its kin on other machines): each operand packed as pairs
 * of bfloat16 along the reduction (K) axis, two to a uint32, so that one
 * multiply-add takes 2 of K at a time, accumulating in float32.
 *
 *   pack_bf16_pairs(X, axis)   X float32 or bfloat16; the axis halves
 *                              (rounded up: an odd K pads one zero)
 *   matmul_bf16_pairs(A2, B2)  sum over k2 of dot_bf16x2(A2[.., k2], B2[k2, ..])
 *
 * With B packed along K and the vector over B's columns, each vector of B2
 * holds 16 columns x 2 rows of K: the instruction's operand layout.
 */
#ifndef KILN_OPS_BF16_PAIRS_H
#define KILN_OPS_BF16_PAIRS_H

#include <string>

#include "kiln/codegen/target.h"
#include "kiln/te/operation.h"

namespace kiln::ops {

using te::Tensor;

/** X with `axis` (negative counts from the end) halved: element k2 packs X[2 k2] (low half) and X[2 k2 + 1] (high; 0 past the end), rounded to bfloat16. */
Tensor pack_bf16_pairs(const Tensor& X, int axis, const std::string& name = "pack_bf16");
/**
 * The float32 product of pair-packed operands. Without transposes, numpy
 * matmul's shapes (A2 [..., M, K2], B2 [..., K2, N], batch dims broadcast);
 * trans_a (A2 is [K2, M]) and trans_b (B2 is [N, K2]) for 2-D operands.
 */
Tensor matmul_bf16_pairs(const Tensor& A2, const Tensor& B2, bool trans_a, bool trans_b, const std::string& name = "matmul_bf16");

/**
 * Whether bfloat16-rounded products should run as pair dot products on
 * `target` by default (the graph pipeline's use_bf16_dot): x86 with AVX-512
 * BF16, except the Intel cores whose vdpbf16ps issues at a quarter of the FMA
 * rate (Cooper Lake to Granite Rapids: half the float32 multiply-adds per
 * second, bench/bf16_dot_rate.c), unless AMX-BF16 takes the pairs there.
 * Elsewhere the rounded operands are multiplied in float32 FMAs (the same
 * products, exact in float32).
 */
bool target_bf16_dot_pays(const Target& target);

}  // namespace kiln::ops

#endif  // KILN_OPS_BF16_PAIRS_H
