#include "kiln/ops/cpu_gemm.h"

#include <algorithm>

#include "kiln/ops/nn.h"
#include "kiln/support/error.h"

namespace kiln::ops {

te::Schedule schedule_packed_matmul(const te::Tensor& B, const te::Tensor& C, const GemmTiling& t) {
  KILN_USER_CHECK(t.MR > 0 && t.NR > 0 && t.KU > 0) << "schedule_packed_matmul: MR, NR and KU must be positive (resolve_gemm_tiling fills them in), got " << t.MR << ", " << t.NR << ", " << t.KU;
  te::Schedule s = te::create_schedule({C});
  te::Tensor packed_B = s.pack(B, {C}, 1, t.NR);
  te::Tensor CL = s.cache_write(C, "local");
  te::Stage& c = s[C];
  std::vector<IterVar> tiles = c.tile(c.axis("i"), c.axis("j"), t.MR, t.NR);
  if (t.panel_outer) c.reorder({tiles[1], tiles[0]});
  IterVar block = t.panel_outer ? c.fuse(tiles[1], tiles[0]) : c.fuse(tiles[0], tiles[1]);
  if (t.parallel) c.parallel(block);
  c.vectorize(tiles[3]);
  s[CL].compute_at(c, block);
  te::Stage& cl = s[CL];
  auto [ko, ki] = cl.split(cl.axis("k"), t.KU);
  cl.reorder({ko, ki, cl.axis("i"), cl.axis("j")});
  cl.unroll(ki);
  cl.unroll(cl.axis("i"));
  cl.vectorize(cl.axis("j"));
  te::Stage& p = s[packed_B];
  const auto& axes = p.leaf_iter_vars();  // [N/NR, K, NR]
  if (t.parallel) p.parallel(axes[0]);
  p.vectorize(axes[2]);
  return s;
}

static te::Schedule schedule_streaming_matmul(const te::Tensor& C, const GemmTiling& t) {
  te::Schedule s = te::create_schedule({C});
  te::Tensor CL = s.cache_write(C, "local");
  te::Stage& c = s[C];
  // Blocks of columns wide enough to keep a row of B streaming, narrow
  // enough to spread over threads: as many accumulators as the packed
  // form's MR x NR tile, so that they stay in registers.
  auto [jo, ji] = c.split(c.axis("j"), t.MR * t.NR);
  IterVar block = c.fuse(c.axis("i"), jo);
  if (t.parallel) c.parallel(block);
  auto [jio, jii] = c.split(ji, t.NR);
  (void)jio;
  c.vectorize(jii);
  s[CL].compute_at(c, block);
  te::Stage& cl = s[CL];
  auto [cjo, cji] = cl.split(cl.axis("j"), t.NR);
  cl.reorder({cl.axis("k"), cl.axis("i"), cjo, cji});
  cl.unroll(cjo);
  cl.vectorize(cji);
  return s;
}

GemmTiling default_gemm_tiling(const Target& target) {
  RegisterBudget b = register_budget(target);
  GemmTiling t;
  t.NR = 2 * b.lanes;
  t.MR = max_tile_rows(b.registers, 2);
  return t;
}

// Candidates: NR of 2, 3 or 1 vectors (2 first: it makes the longest
// runs of B per cache line), MR the rows that fit. Score: no tail block
// in N, then none in M, then the most accumulators.
GemmTiling resolve_gemm_tiling(const GemmTiling& given, const Target& target, int M, int N) {
  RegisterBudget b = register_budget(target);
  KILN_USER_CHECK(given.MR >= 0 && given.NR >= 0 && given.KU > 0) << "cpu_matmul: MR and NR must be positive (or 0: from the target) and KU positive, got MR=" << given.MR
                                                                   << " NR=" << given.NR << " KU=" << given.KU;
  GemmTiling best = given;
  long best_score = -1;
  for (int v : {2, 3, 1}) {
    int nr = given.NR ? given.NR : v * b.lanes;
    int vectors = (nr + b.lanes - 1) / b.lanes;
    int max_rows = max_tile_rows(b.registers, vectors);
    for (int mr = given.MR ? given.MR : max_rows; mr >= (given.MR ? given.MR : (max_rows + 1) / 2); --mr) {
      bool n_fits = N <= 0 || N % nr == 0, m_fits = M <= 0 || M % mr == 0;
      long score = (n_fits ? 2000L : 0) + (m_fits ? 1000L : 0) + long(mr) * vectors;
      if (score > best_score) {
        best_score = score;
        best.MR = mr;
        best.NR = nr;
      }
    }
  }
  return best;
}

CpuGemm cpu_matmul(int M, int N, int K, const GemmTiling& given, const Target& target) {
  KILN_USER_CHECK(M > 0 && N > 0 && K > 0) << "cpu_matmul: sizes must be positive, got " << M << "x" << N << "x" << K;
  GemmTiling t = resolve_gemm_tiling(given, target, M, N);
  te::Tensor A = te::placeholder({M, K}, DataType::Float(32), "A");
  te::Tensor B = te::placeholder({K, N}, DataType::Float(32), "B");
  te::Tensor C = matmul(A, B);
  bool packed = M >= 2 * t.MR && N % t.NR == 0;
  return {A, B, C, packed ? schedule_packed_matmul(B, C, t) : schedule_streaming_matmul(C, t), t};
}

CpuGemm cpu_matmul(int M, int N, int K, const Target& target) { return cpu_matmul(M, N, K, GemmTiling{}, target); }

}  // namespace kiln::ops
