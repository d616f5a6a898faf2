/** \file
 * The int8 matmul of the dot-product instructions (AVX-512 VNNI / AVX-VNNI
 * vpdpbusd, AArch64 sdot/udot): each operand packed as quads of bytes along
 * the reduction (K) axis, four to a 32-bit word, so that one multiply-add
 * takes 4 of K at a time, accumulating in int32.
 *
 *   pack_i8x4(X, axis, shift)  X int8/uint8; int32(X) + shift (which must fit
 *                              the packed bytes: uint8 with shift 0 or int8
 *                              with +128 give unsigned bytes in a uint32,
 *                              int8 with 0 or uint8 with -128 signed bytes in
 *                              an int32); the axis quarters, zeros padding it
 *   sum_i8(X, axis, shift)     int32 sums of int32(X) + shift along axis (removed)
 *   matmul_i8x4(A4, B4)        int32 sums over k4 of dot_i8x4(A4[.., k4], B4[k4, ..])
 *
 * With B packed along K and the vector over B's columns, each vector of B4
 * holds 16 columns x 4 rows of K: vpdpbusd's operand layout.
 */
#ifndef KILN_OPS_I8_DOT_H
#define KILN_OPS_I8_DOT_H

#include <string>

#include "kiln/te/operation.h"

namespace kiln::ops {

using te::Tensor;

/** Whether pack_i8x4 of `x` (int8 or uint8) with `shift` gives unsigned bytes; throws naming the pair when the shifted values fit neither. */
bool i8x4_unsigned(DataType x, int shift);
/** X with `axis` (negative counts from the end) quartered: word k4 packs int32(X[4 k4 + j]) + shift as byte j (0 past the end). */
Tensor pack_i8x4(const Tensor& X, int axis, int shift, const std::string& name = "pack_i8x4");
/** int32 sums of int32(X) + shift along `axis`, which the result drops. */
Tensor sum_i8(const Tensor& X, int axis, int shift, const std::string& name = "sum_i8");
/** The int32 product of quad-packed operands, numpy matmul's shapes over K/4 (A4 [..., M, K4], B4 [..., K4, N]). */
Tensor matmul_i8x4(const Tensor& A4, const Tensor& B4, const std::string& name = "matmul_i8x4");

}  // namespace kiln::ops

#endif  // KILN_OPS_I8_DOT_H
