/** \file
 * A hand-written CPU schedule for fp32 GEMM: B is packed into panels of NR
 * columns ([N/NR, K, NR], contiguous per k), each MR x NR block of C is
 * accumulated in registers (cache_write to "local" + full unroll), the
 * k loop is unrolled by KU, and the block loops are parallel. It shows what
 * the code generator reaches before any tuning; the benchmarks and the
 * main-job demo use it.
 */
#ifndef KILN_OPS_CPU_GEMM_H
#define KILN_OPS_CPU_GEMM_H

#include "kiln/te/schedule.h"

namespace kiln::ops {

struct PackedGemm {
  te::Tensor A, B, packed_B, C;
  int M = 0, N = 0, K = 0, NR = 0;
};

struct GemmTiling {
  int MR = 8;   ///< rows of the register block
  int NR = 32;  ///< columns of the register block (two AVX-512 or four AVX2 vectors)
  int KU = 4;   ///< unroll of the k loop
  bool parallel = true;
  /** Loop over column panels outside row blocks: each packed panel of B stays in cache while all rows pass. */
  bool panel_outer = true;
};

/** C[M, N] = A[M, K] x B[K, N] with B packed in panels of nr columns; N must be a multiple of nr. */
PackedGemm packed_matmul(int M, int N, int K, int nr);
/** The register-blocked schedule described above. */
te::Schedule schedule_packed_matmul(const PackedGemm& g, const GemmTiling& t);

/**
 * A GEMM kernel chosen by shape: the packed, register-blocked schedule when
 * there are enough rows to amortise packing B, else a streaming schedule
 * (no packing: each row of B is read once, contiguously, into NR-wide
 * accumulators), which is what a matrix-vector product needs.
 */
struct CpuGemm {
  te::Tensor A, B, C;
  te::Schedule schedule;
};
CpuGemm cpu_matmul(int M, int N, int K, const GemmTiling& t = {});

}  // namespace kiln::ops

#endif  // KILN_OPS_CPU_GEMM_H
