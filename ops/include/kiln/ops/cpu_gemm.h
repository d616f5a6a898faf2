/** \file
 * A hand-written CPU schedule for fp32 GEMM on the plain matmul DAG, its
 * form chosen by shape:
 *  - packed (M of two register tiles or more, NR dividing N): B is packed
 *    (Schedule::pack) into panels of NR columns ([N/NR, K, NR], contiguous
 *    per k); each MR x NR tile of C is accumulated in registers (a "local"
 *    stage, fully unrolled, in vectors of the target's width), k unrolled
 *    by KU. Loops: row blocks (MC), column panels, register tiles; the row
 *    blocks and panels are fused into the parallel loop, so threads split
 *    rows when there is a row block per core and columns (panels) when
 *    there is one (M = 128). Where a K x NR panel outgrows L2, K is cut
 *    into blocks of KC (rfactor over the block): the tile then sums one
 *    block and is added into C once per block, the K-block loop between
 *    the panels and the tiles, so the KC x NR slice stays in cache while
 *    the tiles of the row block pass over it.
 *  - GEMV (M = 1): no packing; blocks of columns in parallel, each row of
 *    B read contiguously, K unrolled (see cpu_gemv.cpp).
 *  - streaming (a few rows, or N no multiple of any NR): each row of B read
 *    once, contiguously.
 * Tiles, vector width and blocks come from the target (register file,
 * lanes), never from the host. It shows what the code generator reaches
 * before any tuning; the benchmarks and the main job use it.
 */
#ifndef KILN_OPS_CPU_GEMM_H
#define KILN_OPS_CPU_GEMM_H

#include "kiln/codegen/target.h"
#include "kiln/ops/register_tile.h"
#include "kiln/te/schedule.h"

namespace kiln::ops {

struct GemmTiling {
  int MR = 0;  ///< rows of the register block; 0: from the target (see resolve_gemm_tiling)
  int NR = 0;  ///< columns of the register block, whole vectors; 0: from the target
  int KU = 4;  ///< unroll of the k loop
  bool parallel = true;
  /** Without K blocks (KC = 0 or K): loop over column panels outside row blocks. */
  bool panel_outer = true;
  int KC = -1;  ///< K block of the packed form; -1: from the target and K (see resolve_gemm_blocks); 0: no blocks
  int MC = 0;   ///< rows per block of the packed form (a multiple of MR); 0: from the shape and the target's cores
};

/**
 * The register tile for `target` alone: NR = two vectors, MR the most rows
 * whose accumulators, with the NR/lanes vectors of B and one broadcast of A,
 * fit in the vector registers (AVX2 6x16, AVX-512 14x32, SSE 6x8).
 */
GemmTiling default_gemm_tiling(const Target& target);

/**
 * The tiling cpu_matmul uses for M x N: the fields of `t` that are 0 filled
 * in for the target. Among the tiles that fit the registers (NR of 2 or 3
 * vectors, or 1), one whose NR divides N (packing needs it) and whose MR
 * divides M (a tail block is not unrolled) is preferred, the one with most
 * accumulators first; a field given in `t` is kept.
 */
GemmTiling resolve_gemm_tiling(const GemmTiling& t, const Target& target, int M, int N);

struct CpuGemm {
  te::Tensor A, B, C;
  te::Schedule schedule;
  GemmTiling tiling;  ///< as used: MR and NR resolved
};

/**
 * The K block and row block of the packed form for M x N x K (fields of `t`
 * that are -1 / 0 filled in; MR and NR already resolved). KC: no blocks (0)
 * while a K x NR panel of B fits 256 KiB (half of a 512 KiB L2), else the
 * largest divisor of K, a multiple of KU, whose KC x NR slice does (a block
 * that does not divide K would leave a guarded tail in the unrolled loop),
 * or none when no divisor lies within a factor 2 of it. MC: with several
 * cores and A the larger operand (M >= N), M split into one block per core
 * (threads split rows), else all of M (threads split the column panels).
 */
GemmTiling resolve_gemm_blocks(const GemmTiling& t, const Target& target, int M, int N, int K);

/** Which schedule cpu_matmul takes for a shape. */
enum class GemmForm { Packed, Gemv, Streaming };
GemmForm gemm_form(int M, int N, const GemmTiling& resolved);

/**
 * C[M, N] = A[M, K] x B[K, N] in fp32 with the schedule above (packed when
 * M >= 2*MR and NR divides N, GEMV when M = 1, else streaming), its tiles
 * sized for `target` (build the kernel for the same target).
 */
CpuGemm cpu_matmul(int M, int N, int K, const GemmTiling& t = {}, const Target& target = host_target());
CpuGemm cpu_matmul(int M, int N, int K, const Target& target);

/**
 * The packed, register-blocked schedule of C = matmul(A, B) (2-D, NR divides
 * N; MR, NR and the blocks resolved) for `target`'s vector width.
 */
te::Schedule schedule_packed_matmul(const te::Tensor& B, const te::Tensor& C, const GemmTiling& t, const Target& target);

/** The GEMV schedule of C[1, N] = A[1, K] x B[K, N] (cpu_gemv.cpp). */
te::Schedule schedule_gemv(const te::Tensor& C, const GemmTiling& t, const Target& target);

}  // namespace kiln::ops

#endif  // KILN_OPS_CPU_GEMM_H
