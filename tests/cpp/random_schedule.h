// Random valid schedules for property tests: random splits, reorders,
// fuses, compute_at locations and annotations, driven by a seed. Splits and
// fuses also come after compute_at, on the loops producers are attached to.
#ifndef KILN_TESTS_RANDOM_SCHEDULE_H
#define KILN_TESTS_RANDOM_SCHEDULE_H

#include <algorithm>
#include <random>

#include "kiln/te/schedule.h"

namespace kiln::testing {

/** Applies random primitives to the stage of `out`; `producers` are stages that may be computed at a random loop of it. */
inline void random_schedule(te::Schedule& s, const te::Tensor& out, const std::vector<te::Tensor>& producers, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  te::Stage& st = s[out];
  auto random_splits = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const auto& leaves = st.leaf_iter_vars();
      IterVar iv = leaves[pick(static_cast<int>(leaves.size()))];
      int factor = 1 + pick(9);
      if (pick(4) == 0) st.split_nparts(iv, factor);
      else st.split(iv, factor);
    }
  };
  auto random_fuse = [&] {
    const auto& leaves = st.leaf_iter_vars();
    int start = pick(static_cast<int>(leaves.size()));
    for (size_t i = start; i + 1 < leaves.size(); ++i)
      if (leaves[i].kind() == leaves[i + 1].kind()) {
        st.fuse(leaves[i], leaves[i + 1]);
        break;
      }
  };
  random_splits(pick(4));
  if (pick(2)) {
    std::vector<IterVar> order = st.leaf_iter_vars();
    std::shuffle(order.begin(), order.end(), rng);
    st.reorder(order);
  }
  if (pick(3) == 0) random_fuse();
  for (const te::Tensor& p : producers) {
    int choice = pick(3);
    if (choice == 0) continue;  // root
    if (choice == 1 && s[p].op()->kind == te::OpKind::Compute && !static_cast<const te::ComputeOpNode*>(s[p].op().get())->is_reduction()) {
      s[p].compute_inline();
      continue;
    }
    const auto& leaves = st.leaf_iter_vars();
    s[p].compute_at(st, leaves[pick(static_cast<int>(leaves.size()))]);
  }
  // Loops producers are attached to may be split and fused afterwards too.
  random_splits(pick(3));
  if (pick(3) == 0) random_fuse();
  const auto& leaves = st.leaf_iter_vars();
  std::vector<IterVar> spatial;
  for (const IterVar& iv : leaves)
    if (iv.kind() == IterVarKind::DataPar) spatial.push_back(iv);
  if (!spatial.empty() && pick(2)) st.vectorize(spatial.back());
  if (pick(2)) st.unroll(leaves[pick(static_cast<int>(leaves.size()))]);
  if (!spatial.empty() && pick(2)) {
    IterVar p = spatial.front();
    const te::IterVarAttr* a = st.attr(p);
    if (!a || a->kind == ForKind::Serial) st.parallel(p);
  }
}

}  // namespace kiln::testing

#endif  // KILN_TESTS_RANDOM_SCHEDULE_H
