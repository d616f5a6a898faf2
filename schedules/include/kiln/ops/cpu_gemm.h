/** \file
 * A hand-written CPU schedule for fp32 GEMM on the plain matmul DAG: B is
 * packed (Schedule::pack) into panels of NR columns ([N/NR, K, NR],
 * contiguous per k), each MR x NR block of C is accumulated in registers
 * (cache_write to "local" + full unroll), the k loop is unrolled by KU, the
 * loop over column panels is outside the loop over row blocks (each packed
 * panel stays in cache while every row block passes), and the block loop is
 * parallel. For few rows, packing does not pay: a streaming schedule reads
 * each row of B once, contiguously. It shows what the code generator
 * reaches before any tuning; the benchmarks and the main job use it.
 */
#ifndef KILN_OPS_CPU_GEMM_H
#define KILN_OPS_CPU_GEMM_H

#include "kiln/te/schedule.h"

namespace kiln::ops {

struct GemmTiling {
  int MR = 8;   ///< rows of the register block
  int NR = 32;  ///< columns of the register block (two AVX-512 or four AVX2 vectors)
  int KU = 4;   ///< unroll of the k loop
  bool parallel = true;
  /** Loop over column panels outside row blocks. */
  bool panel_outer = true;
};

struct CpuGemm {
  te::Tensor A, B, C;
  te::Schedule schedule;
};

/** C[M, N] = A[M, K] x B[K, N] in fp32 with the schedule above (packed when M >= 2*MR and NR divides N). */
CpuGemm cpu_matmul(int M, int N, int K, const GemmTiling& t = {});

/** The packed, register-blocked schedule of C = matmul(A, B) (2-D, NR divides N). */
te::Schedule schedule_packed_matmul(const te::Tensor& B, const te::Tensor& C, const GemmTiling& t);

}  // namespace kiln::ops

#endif  // KILN_OPS_CPU_GEMM_H
