#include "kiln/ops/cpu_gemm.h"

#include <algorithm>

#include "kiln/ops/nn.h"
#include "kiln/support/error.h"

namespace kiln::ops {

namespace {

// The target's vector width, or all of NR when a given NR is no whole number of vectors.
int vector_width(int NR, const Target& target) {
  int lanes = register_budget(target).lanes;
  return NR % lanes == 0 ? lanes : NR;
}

// Packing by panels is a pass over B; each vector load of B in the kernel is
// then contiguous. The pass reads B row by row (k outermost), contiguously,
// writing each panel's next NR values: by panels (k inner) it read strips of
// NR columns with a row's stride between loads, and 128x768x3072 ran 1.03
// to 1.15x slower (1 and 2 threads, interleaved; squares 0.96-1.0x).
te::Tensor pack_b(te::Schedule& s, const te::Tensor& B, const te::Tensor& C, const GemmTiling& t) {
  te::Tensor packed_B = s.pack(B, {C}, 1, t.NR);
  te::Stage& p = s[packed_B];
  const std::vector<IterVar> axes = p.leaf_iter_vars();  // [N/NR, K, NR]
  p.reorder({axes[1], axes[0], axes[2]});
  if (t.parallel) p.parallel(axes[1]);
  p.vectorize(axes[2]);
  return packed_B;
}

// The register tile of a "local" stage attached where its MR x NR region is
// one tile: k by KU unrolled outside the rows, the rows and the vectors of a
// row unrolled, each vector the target's width (one <48 x float> per row,
// NR = 3 AVX-512 vectors, was legalized into shuffles and ~1500 spill and
// reload lines, and ran BERT's 128x768x3072 at 15-30 GFLOP/s).
void register_tile(te::Stage& cl, const IterVar& k, const IterVar& i, const IterVar& j, int KU, int lanes) {
  auto [ko, ki] = cl.split(k, KU);
  auto [jv, jl] = cl.split(j, lanes);
  cl.reorder({ko, ki, i, jv, jl});
  cl.unroll(ki);
  cl.unroll(i);
  cl.unroll(jv);
  cl.vectorize(jl);
}

// The loops of C over row blocks (MC), panels (NR), register tiles (MR) and
// the vectors of a tile row: [ib, jo, io, ii, jv, jl].
std::vector<IterVar> tile_c(te::Stage& c, const IterVar& i, const IterVar& j, const GemmTiling& t, int lanes) {
  auto [ib, ir] = c.split(i, t.MC);
  auto [io, ii] = c.split(ir, t.MR);
  auto [jo, jj] = c.split(j, t.NR);
  auto [jv, jl] = c.split(jj, lanes);
  return {ib, jo, io, ii, jv, jl};
}

// Without K blocks: each MR x NR tile runs the whole reduction in registers.
te::Schedule schedule_unblocked(const te::Tensor& B, const te::Tensor& C, const GemmTiling& t, int lanes) {
  te::Schedule s = te::create_schedule({C});
  pack_b(s, B, C, t);
  te::Tensor CL = s.cache_write(C, "local");
  te::Stage& c = s[C];
  std::vector<IterVar> l = tile_c(c, c.axis("i"), c.axis("j"), t, lanes);
  if (t.panel_outer) c.reorder({l[0], l[1], l[2], l[3], l[4], l[5]});
  else c.reorder({l[0], l[2], l[1], l[3], l[4], l[5]});
  IterVar block = t.panel_outer ? c.fuse({l[0], l[1], l[2]}) : c.fuse({l[0], l[2], l[1]});
  if (t.parallel) c.parallel(block);
  c.unroll(l[4]);
  c.vectorize(l[5]);
  s[CL].compute_at(c, block);
  te::Stage& cl = s[CL];
  register_tile(cl, cl.axis("k"), cl.axis("i"), cl.axis("j"), t.KU, lanes);
  return s;
}

// K blocks: C reduces over the blocks (a read-add-write of each tile per
// block) the partial sums of a factored stage, which is the register tile.
te::Schedule schedule_k_blocked(const te::Tensor& B, const te::Tensor& C, const GemmTiling& t, int lanes) {
  te::Schedule s = te::create_schedule({C});
  pack_b(s, B, C, t);
  te::Stage& c0 = s[C];
  auto [kb0, kr0] = c0.split(c0.axis("k"), t.KC);
  (void)kr0;
  te::Tensor partial = s.rfactor(C, kb0, 0);  // partial[kb, i, j]: the sum over one K block
  te::Tensor tile = s.cache_write(partial, "local");
  s[partial].compute_inline();
  te::Stage& c = s[C];
  const std::vector<IterVar> root = c.leaf_iter_vars();  // i, j, then the blocks (reduce)
  std::vector<IterVar> l = tile_c(c, root[0], root[1], t, lanes);
  c.reorder({l[0], l[1], root[2], l[2], l[3], l[4], l[5]});
  IterVar block = c.fuse(l[0], l[1]);
  if (t.parallel) c.parallel(block);
  c.unroll(l[3]);
  c.unroll(l[4]);
  c.vectorize(l[5]);
  s[tile].compute_at(c, l[2]);
  te::Stage& r = s[tile];
  const std::vector<IterVar> rl = r.leaf_iter_vars();  // the block, i, j, the reduce within the block
  register_tile(r, rl[3], rl[1], rl[2], t.KU, lanes);
  return s;
}

}  // namespace

te::Schedule schedule_packed_matmul(const te::Tensor& B, const te::Tensor& C, const GemmTiling& t, const Target& target) {
  KILN_USER_CHECK(t.MR > 0 && t.NR > 0 && t.KU > 0) << "schedule_packed_matmul: MR, NR and KU must be positive (resolve_gemm_tiling fills them in), got " << t.MR << ", " << t.NR << ", " << t.KU;
  const int lanes = vector_width(t.NR, target);
  const int K = static_cast<int>(*as_const_int(B.shape()[0]));
  KILN_USER_CHECK(t.MC > 0 && t.MC % t.MR == 0) << "schedule_packed_matmul: MC = " << t.MC << " must be a multiple of MR = " << t.MR << " (resolve_gemm_blocks fills it in)";
  if (t.KC <= 0 || t.KC >= K) return schedule_unblocked(B, C, t, lanes);
  KILN_USER_CHECK(K % t.KC == 0 && t.KC % t.KU == 0) << "schedule_packed_matmul: KC = " << t.KC << " must divide K = " << K << " and be a multiple of KU = " << t.KU;
  return schedule_k_blocked(B, C, t, lanes);
}

static te::Schedule schedule_streaming_matmul(const te::Tensor& C, const GemmTiling& t, const Target& target) {
  const int lanes = vector_width(t.NR, target);
  te::Schedule s = te::create_schedule({C});
  te::Tensor CL = s.cache_write(C, "local");
  te::Stage& c = s[C];
  // Blocks of columns wide enough to keep a row of B streaming, narrow
  // enough to spread over threads: as many accumulators as the packed
  // form's MR x NR tile, so that they stay in registers.
  auto [jo, ji] = c.split(c.axis("j"), t.MR * t.NR);
  IterVar block = c.fuse(c.axis("i"), jo);
  if (t.parallel) c.parallel(block);
  auto [jio, jii] = c.split(ji, lanes);
  (void)jio;
  c.vectorize(jii);
  s[CL].compute_at(c, block);
  te::Stage& cl = s[CL];
  auto [cjo, cji] = cl.split(cl.axis("j"), lanes);
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

// The cache the K blocks are sized for: half of a 512 KiB L2 (Zen 2 to 4;
// Intel's since Ice Lake hold 1.25 to 2 MiB) for one K x NR panel of B.
// Measured on a Xeon with AVX-512 and 2 MiB of L2 (shared and noisy): K
// blocks of 128 (the panel slice in L1) ran the 1024^3 and 2048^3 squares
// 1.1-1.8x slower than whole panels from L2, and 128x768x3072 at 0.92-1.05x
// of them; C is read and written once per block and A is read unpacked.
constexpr int kPanelBytes = 256 << 10;

GemmTiling resolve_gemm_blocks(const GemmTiling& given, const Target& target, int M, int N, int K) {
  GemmTiling t = given;
  KILN_USER_CHECK(t.KC >= -1 && t.MC >= 0) << "cpu_matmul: KC must be -1 (from the target), 0 (no K blocks) or positive, MC 0 or positive, got KC=" << t.KC
                                           << " MC=" << t.MC;
  if (t.KC < 0) {
    // The largest divisor of K (a multiple of KU) whose KC x NR slice fits, and at least half of it.
    const int want = std::max(t.KU, kPanelBytes / (t.NR * 4));
    t.KC = 0;
    if (K > want)
      for (int d = want; d >= want / 2 && !t.KC; --d)
        if (K % d == 0 && d % t.KU == 0) t.KC = d;
  }
  if (t.KC >= K) t.KC = 0;
  if (t.MC == 0) {
    // Rows split over the cores where A is the larger operand (each thread
    // then reads all of B and its share of A), columns (panels) otherwise
    // (M = 128: each thread reads all of A and its share of B). The
    // parallel loop runs row blocks outside panels, so one row block per
    // core splits rows and a single block splits columns.
    const int tiles = (M + t.MR - 1) / t.MR, cores = t.parallel ? std::max(1, target.num_cores) : 1;
    t.MC = cores > 1 && M >= N && tiles >= 2 * cores ? (tiles + cores - 1) / cores * t.MR : tiles * t.MR;
  }
  return t;
}

GemmForm gemm_form(int M, int N, const GemmTiling& t) {
  if (M == 1) return GemmForm::Gemv;
  return M >= 2 * t.MR && N % t.NR == 0 ? GemmForm::Packed : GemmForm::Streaming;
}

CpuGemm cpu_matmul(int M, int N, int K, const GemmTiling& given, const Target& target) {
  KILN_USER_CHECK(M > 0 && N > 0 && K > 0) << "cpu_matmul: sizes must be positive, got " << M << "x" << N << "x" << K;
  GemmTiling t = resolve_gemm_tiling(given, target, M, N);
  te::Tensor A = te::placeholder({M, K}, DataType::Float(32), "A");
  te::Tensor B = te::placeholder({K, N}, DataType::Float(32), "B");
  te::Tensor C = matmul(A, B);
  switch (gemm_form(M, N, t)) {
    case GemmForm::Packed:
      t = resolve_gemm_blocks(t, target, M, N, K);
      return {A, B, C, schedule_packed_matmul(B, C, t, target), t};
    case GemmForm::Gemv: return {A, B, C, schedule_gemv(C, t, target), t};
    case GemmForm::Streaming: break;
  }
  return {A, B, C, schedule_streaming_matmul(C, t, target), t};
}

CpuGemm cpu_matmul(int M, int N, int K, const Target& target) { return cpu_matmul(M, N, K, GemmTiling{}, target); }

}  // namespace kiln::ops
