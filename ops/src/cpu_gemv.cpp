// The GEMV form of the hand GEMM (cpu_gemm.h): C[1, N] = A[1, K] x B[K, N].
// Every element of B is used once, so the kernel is a stream over B and
// its speed is the memory's: no packing (a copy would double the traffic),
// each row of B read contiguously over a wide block of columns (whole pages
// for the prefetchers), KU rows at a time so that KU streams are in flight
// and the block's sums are read and written once per KU rows. Blocks of
// columns are the parallel loop (a thread reads only its own columns).
#include <algorithm>

#include "kiln/ops/cpu_gemm.h"
#include "kiln/support/error.h"

namespace kiln::ops {

namespace {
// Columns per block: each core's share of N in one block, so that every
// row of B is read in runs as long as possible (the prefetchers stop at
// page ends), up to 4096 (16 KiB of sums, in L1); whole vectors. On a
// Xeon with AVX-512 (1 x 4096 x 4096, interleaved, loaded machine) blocks of
// 4096 ran in 0.84x the time of blocks of 1024 on one thread, 2048 in
// 0.94-0.98x of them on two.
int gemv_block(int N, int lanes, int cores) {
  int w = std::min((N + cores - 1) / cores, 4096);
  return (w + lanes - 1) / lanes * lanes;
}
}  // namespace

te::Schedule schedule_gemv(const te::Tensor& C, const GemmTiling& t, const Target& target) {
  const int lanes = register_budget(target).lanes, N = static_cast<int>(*as_const_int(C.shape()[1]));
  const int cores = t.parallel ? std::max(1, target.num_cores) : 1;
  // KU rows of B per step, JU vectors of each unrolled: 16 independent FMAs.
  const int W = gemv_block(N, lanes, cores), KU = t.KU, JU = 4;
  te::Schedule s = te::create_schedule({C});
  te::Tensor CL = s.cache_write(C, "local");
  te::Stage& c = s[C];
  auto [jo, ji] = c.split(c.axis("j"), W);
  IterVar block = c.fuse(c.axis("i"), jo);
  if (t.parallel) c.parallel(block);
  auto [jv, jl] = c.split(ji, lanes);
  (void)jv;
  c.vectorize(jl);
  s[CL].compute_at(c, block);
  te::Stage& cl = s[CL];
  auto [ko, ki] = cl.split(cl.axis("k"), KU);
  auto [cv, cl_] = cl.split(cl.axis("j"), lanes);
  auto [cvo, cvi] = cl.split(cv, JU);
  cl.reorder({cl.axis("i"), ko, cvo, ki, cvi, cl_});
  cl.unroll(ki);
  cl.unroll(cvi);
  cl.vectorize(cl_);
  return s;
}

}  // namespace kiln::ops
