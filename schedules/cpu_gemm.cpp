#include "kiln/ops/cpu_gemm.h"

#include "kiln/ops/nn.h"
#include "kiln/support/error.h"

namespace kiln::ops {

te::Schedule schedule_packed_matmul(const te::Tensor& B, const te::Tensor& C, const GemmTiling& t) {
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
  // Blocks of columns wide enough to keep a row of B streaming, narrow enough to spread over threads.
  auto [jo, ji] = c.split(c.axis("j"), 16 * t.NR);
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

CpuGemm cpu_matmul(int M, int N, int K, const GemmTiling& t) {
  KILN_USER_CHECK(M > 0 && N > 0 && K > 0) << "cpu_matmul: sizes must be positive, got " << M << "x" << N << "x" << K;
  te::Tensor A = te::placeholder({M, K}, DataType::Float(32), "A");
  te::Tensor B = te::placeholder({K, N}, DataType::Float(32), "B");
  te::Tensor C = matmul(A, B);
  bool packed = M >= 2 * t.MR && N % t.NR == 0;
  return {A, B, C, packed ? schedule_packed_matmul(B, C, t) : schedule_streaming_matmul(C, t)};
}

}  // namespace kiln::ops
