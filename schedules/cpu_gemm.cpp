#include "kiln/ops/cpu_gemm.h"

#include "kiln/ir/op.h"
#include "kiln/support/error.h"

namespace kiln::ops {

PackedGemm packed_matmul(int M, int N, int K, int nr) {
  KILN_USER_CHECK(M > 0 && N > 0 && K > 0) << "packed_matmul: sizes must be positive";
  KILN_USER_CHECK(nr > 0 && N % nr == 0) << "packed_matmul: N = " << N << " must be a multiple of the panel width " << nr;
  PackedGemm g;
  g.M = M, g.N = N, g.K = K, g.NR = nr;
  g.A = te::placeholder({M, K}, DataType::Float(32), "A");
  g.B = te::placeholder({K, N}, DataType::Float(32), "B");
  g.packed_B = te::compute({N / nr, K, nr}, [&](const std::vector<Var>& i) { return g.B(i[1], i[0] * nr + i[2]); }, "packed_B", {"jo", "k", "ji"});
  IterVar k = te::reduce_axis(Range(0, K), "k");
  g.C = te::compute({M, N}, [&](const std::vector<Var>& i) { return te::sum(g.A(i[0], k.var()) * g.packed_B(floordiv(i[1], nr), k.var(), floormod(i[1], nr)), {k}); }, "C");
  return g;
}

te::Schedule schedule_packed_matmul(const PackedGemm& g, const GemmTiling& t) {
  KILN_USER_CHECK(t.NR == g.NR) << "schedule_packed_matmul: tiling NR " << t.NR << " differs from the packing width " << g.NR;
  te::Schedule s = te::create_schedule({g.C});
  te::Tensor CL = s.cache_write(g.C, "local");
  te::Stage& c = s[g.C];
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
  te::Stage& p = s[g.packed_B];
  if (t.parallel) p.parallel(p.axis("jo"));
  p.vectorize(p.axis("ji"));
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
  if (M >= 2 * t.MR && N % t.NR == 0) {
    PackedGemm g = packed_matmul(M, N, K, t.NR);
    return {g.A, g.B, g.C, schedule_packed_matmul(g, t)};
  }
  te::Tensor A = te::placeholder({M, K}, DataType::Float(32), "A");
  te::Tensor B = te::placeholder({K, N}, DataType::Float(32), "B");
  IterVar k = te::reduce_axis(Range(0, K), "k");
  te::Tensor C = te::compute({M, N}, [&](const std::vector<Var>& i) { return te::sum(A(i[0], k.var()) * B(k.var(), i[1]), {k}); }, "C");
  return {A, B, C, schedule_streaming_matmul(C, t)};
}

}  // namespace kiln::ops
