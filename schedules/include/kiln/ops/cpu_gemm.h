/** \file
 * A hand-written CPU schedule for fp32 GEMM on the plain matmul DAG: B is
 * packed (Schedule::pack) into panels of NR columns ([N/NR, K, NR],
 * contiguous per k), each MR x NR block of C is accumulated in registers
 * (cache_write to "local" + full unroll), the k loop is unrolled by KU, the
 * loop over column panels is outside the loop over row blocks (each packed
 * panel stays in cache while every row block passes), and the block loop is
 * parallel. The tile is sized from the target's vector lanes and register
 * file, so that it stays in registers (see register_tile.h). For few rows,
 * packing does not pay: a streaming schedule reads
 * each row of B once, contiguously. It shows what the code generator
 * reaches before any tuning; the benchmarks and the main job use it.
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
  /** Loop over column panels outside row blocks. */
  bool panel_outer = true;
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
 * C[M, N] = A[M, K] x B[K, N] in fp32 with the schedule above (packed when
 * M >= 2*MR and NR divides N), its tile sized for `target` (build the kernel
 * for the same target).
 */
CpuGemm cpu_matmul(int M, int N, int K, const GemmTiling& t = {}, const Target& target = host_target());
CpuGemm cpu_matmul(int M, int N, int K, const Target& target);

/** The packed, register-blocked schedule of C = matmul(A, B) (2-D, NR divides N; MR and NR given). */
te::Schedule schedule_packed_matmul(const te::Tensor& B, const te::Tensor& C, const GemmTiling& t);

}  // namespace kiln::ops

#endif  // KILN_OPS_CPU_GEMM_H
