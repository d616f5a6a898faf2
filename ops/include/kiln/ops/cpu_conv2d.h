/** \file
 * A hand-written CPU schedule for fp32 conv2d (NCHW input, OIHW weights).
 *
 * The general form is blocked-channel ("NCHWc"), in the style of TVM's x86
 * conv2d and oneDNN:
 *  - the input is packed, inside the conv kernel (so inside its timing), to
 *    [N, C/CB, H+2p, W+2p, CB] with the zero padding baked in, so the inner
 *    loops need no bounds tests;
 *  - the weights are packed by a separate kernel to
 *    [K/KB, C/CB, KH, KW, CB, KB]: in inference they are constants, so (as
 *    TVM's alter_op_layout does) their packing is left out of the conv kernel;
 *  - each register tile of OHB x OWB output pixels x KB output channels is
 *    accumulated in registers (cache_write "local" at the tile loop, fully
 *    unrolled): per input channel and kernel tap it loads KB/lanes weight
 *    vectors and broadcasts one input value per pixel; the tile is sized
 *    from the target's lanes and register file (register_tile.h);
 *  - the output is NCHW (a drop-in conv; the tile is transposed on the way
 *    out) or blocked [N, K/KB, OH, OW, KB].
 *
 * A 1x1, stride 1, unpadded conv with NCHW output instead takes the
 * "pointwise GEMM" form: Y[n] = W x X[n] with the pixels as GEMM columns,
 * vectorised over pixels, so NCHW is read and written directly with neither
 * an input packing nor a transpose.
 */
#ifndef KILN_OPS_CPU_CONV2D_H
#define KILN_OPS_CPU_CONV2D_H

#include "kiln/codegen/target.h"
#include "kiln/ops/register_tile.h"
#include "kiln/te/schedule.h"

namespace kiln::ops {

struct Conv2dShape {
  int N = 1, C = 64, H = 56, W = 56, K = 64, KH = 3, KW = 3, stride = 1, pad = 1;
  int OH() const { return (H + 2 * pad - KH) / stride + 1; }
  int OW() const { return (W + 2 * pad - KW) / stride + 1; }
  double flops() const { return 2.0 * N * K * OH() * OW() * C * KH * KW; }
};

/** Tile sizes; a 0 is filled in from the target and the shape (resolve_conv2d_tiling). */
struct Conv2dTiling {
  int CB = 0;    ///< input channels per packed block (the reduction's innermost run); 0: the vector lanes
  int KB = 0;    ///< output channels per register tile; 0: two vectors (or one, where that fills more registers)
  int OWB = 0;   ///< output columns per register tile; 0: the widest divisor of OW that fits the registers
  int OHB = 1;   ///< output rows per register tile
  int CU = 4;    ///< unroll of the input-channel loop (inside a block; over all of C for the GEMM form)
  bool parallel = true;
  bool nchw_out = true;  ///< NCHW output; false keeps the blocked [N, K/KB, OH, OW, KB]
  /** A 1x1, stride 1, unpadded conv with NCHW output runs as a GEMM over pixels. */
  bool pointwise_as_gemm = true;
  /** Unroll the kernel's column taps: -1 from the target (not with 16 registers or fewer, where LLVM
   * keeps each input broadcast for the next tap and spills them), 0 no, 1 yes. */
  int unroll_taps = -1;
  int MR = 0;  ///< output channels per register tile of the GEMM form; 0: from the target (resolve_gemm_tiling)
  int NR = 0;  ///< pixels per register tile of the GEMM form; 0: from the target
};

/** The two kernels of a packed conv2d and their tensors. */
struct CpuConv2d {
  Conv2dShape shape;
  Conv2dTiling tiling;  ///< as used: OWB resolved
  /** Weight packing kernel: args {W, packed_W_out}. Run once per set of weights. */
  te::Tensor W, packed_W_out;
  te::Schedule weight_schedule;
  /** Conv kernel: args {X, packed_W, Y}; it packs X itself (packed_X is its internal stage). */
  te::Tensor X, packed_W, packed_X, Y;
  te::Schedule schedule;
  /**
   * The pointwise GEMM form: X is [N, C, H*W] and Y [N, K, H*W] (the NCHW
   * buffers with the pixels flattened: the same bytes), packed_W is
   * [K/MR, C, MR], and packed_X is undefined.
   */
  bool pointwise = false;
};

/**
 * The tiling for `shape` on `target`: the fields of `t` that are 0 filled in.
 * CB = the lanes (or the largest divisor of C below them; CU then divides
 * it); KB = two vectors, or one where the OWB that fits then covers more
 * accumulators; OWB = the widest divisor of OW with OHB*OWB*KB/lanes +
 * KB/lanes + 1 < the vector registers (one spare); MR x NR of the GEMM form as for
 * cpu_matmul with K rows and H*W columns. AVX2 (16 registers) gets smaller
 * tiles than AVX-512 (32).
 */
Conv2dTiling resolve_conv2d_tiling(const Conv2dTiling& t, const Target& target, const Conv2dShape& shape);
/** resolve_conv2d_tiling of the default Conv2dTiling. */
Conv2dTiling default_conv2d_tiling(const Target& target, const Conv2dShape& shape);

/**
 * Builds both compute DAGs and their schedules, the tiles sized for `target`
 * (build the kernels for the same target). The blocked form needs C to be a
 * multiple of CB and K of KB; kiln::Error names the sizes otherwise.
 */
CpuConv2d cpu_conv2d(const Conv2dShape& shape, const Conv2dTiling& tiling = {}, const Target& target = host_target());
CpuConv2d cpu_conv2d(const Conv2dShape& shape, const Target& target);

/** Whether cpu_conv2d takes the pointwise GEMM form for this shape and a resolved tiling. */
bool conv_is_pointwise_gemm(const Conv2dShape& shape, const Conv2dTiling& tiling);

/**
 * The register tile width: the widest divisor of ow not above max_width (a
 * width with no divisor near it, such as a prime, gets a narrow and slow
 * tile: a tail tile would not be unrolled).
 */
int pick_conv_tile_width(int ow, int max_width = 14);

}  // namespace kiln::ops

#endif  // KILN_OPS_CPU_CONV2D_H
