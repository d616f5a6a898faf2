// A matmul seed's K-blocked form (block_k_of_wide_panels, search_space_internal.h).
//
// The plain seed runs each register tile over the whole reduction, so every
// row tile walks its K x panel slice of the weights (768 KiB for K = 3072
// and a panel of four AVX-512 vectors) from L2, or beyond where L2 is
// smaller than that. Blocked, the reduction's outer loop (R0) runs outside
// the row tiles (S2): one KC x panel slice serves every row tile of the
// panel from L1, and the accumulator (all the rows of one panel, at S0) is
// read and written once per block.
//
// It is a seed, not the default: on the 2 MiB-L2 Xeon of 2026-12-07 (one
// core, CPU time, interleaved in one process, load 4-5) the blocked form of
// BERT's and ViT's FFN (x[1, M, 768] @ [768, 3072] + bias + GELU and
// [3072, 768] + bias, M = 128 and 197; slices of 12, 24 and 48 KiB) ran at
// 0.77-0.99x the plain seed's GFLOP/s on AVX-512 and 0.93-1.03x on AVX2
// (-mcpu=znver3); at two threads 0.88-0.98x (medians). The plain seed there
// reached 0.91-0.97 of the 768 x 768 projection's rate already: each panel
// stays in L2 and only its first row tile waits on L3. The search measures
// this form first on targets where the panel outgrows a small L2.
#include "search_space_internal.h"

namespace kiln::ops::detail {

namespace {

// A K x panel slice of the weights counts as outgrowing L2 from here: half
// of a 512 KiB L2 (Zen 2 to 4), as the hand GEMM's K blocks (cpu_gemm.cpp).
constexpr int64_t kWidePanelBytes = 256 << 10;
// Bytes of one K block's slice of a panel: half of a 48 KiB L1 (the rows of
// A and the accumulator's tile pass beside it).
constexpr int64_t kSliceBytes = 24 << 10;

}  // namespace

bool block_k_of_wide_panels(const StageInfo& st, const Sketch& sk, const StagePlan& p, std::vector<int>* d) {
  const size_t n = p.spatial_tiles.size();
  if (n < 2 || st.reduce.size() != 1 || p.reduce_tiles.size() != 1 || st.spatial.size() != n || p.location < 0 ||
      sk.slots[p.location].choices < 2 || st.any_var())
    return false;  // not a static matmul with a choice of accumulator level
  const int64_t bytes = st.tensor.dtype().bytes(), K = st.reduce[0];
  const Slot& cols = sk.slots[p.spatial_tiles.back()];
  const int64_t width = (*d)[cols.offset + cols.size - 1];
  if (K * width * bytes <= kWidePanelBytes) return false;
  int* r = d->data() + sk.slots[p.reduce_tiles[0]].offset;
  // The largest divisor of K whose slice fits, a multiple of the seed's unrolled steps and at least half the slice.
  const int64_t want = kSliceBytes / (width * bytes);
  int64_t kc = 0;
  for (int64_t c : divisors(K))
    if (c <= want && c % r[1] == 0) kc = c;
  if (kc * 2 < want || kc >= K) return false;
  r[0] = static_cast<int>(K / kc);
  r[1] = static_cast<int>(kc);
  // Row axes (those that do not index the weights): their tiles move from S0 (and S1) to S2, inside the blocks.
  const std::vector<bool> weight_axis = indexes_vector_operand(st);
  for (size_t k = 0; k + 1 < n; ++k)
    if (k >= weight_axis.size() || !weight_axis[k]) {
      int* f = d->data() + sk.slots[p.spatial_tiles[k]].offset;
      f[2] *= f[0] * f[1];
      f[0] = f[1] = 1;
    }
  (*d)[sk.slots[p.location].offset] = 1;  // the accumulator at S0: all the rows of a panel
  return true;
}

}  // namespace kiln::ops::detail
