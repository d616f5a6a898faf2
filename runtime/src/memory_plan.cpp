// Arena planning (memory_plan.h): lifetimes over the step order, largest
// values placed first at the lowest free offset among the values they
// overlap in time. Sizes are aligned so every buffer starts on a cache line
// (the kernels' vector loads prefer it).
#include "kiln/runtime/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "kiln/support/error.h"

namespace kiln {

namespace {

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

}  // namespace

MemoryPlanStats plan_memory(std::vector<PlannedValue>* values, int64_t alignment) {
  std::vector<PlannedValue>& vs = *values;  // hosts (view_of) are widened to their views' lifetimes
  MemoryPlanStats st;
  int last = 0;
  // Values inside another (view_of) and their hosts: no in-place reuse, counted once (by the host).
  std::vector<bool> joined(vs.size(), false);
  for (size_t i = 0; i < vs.size(); ++i) {
    const PlannedValue& v = vs[i];
    KILN_CHECK(v.bytes >= 0 && v.first_step <= v.last_step) << "bad value lifetime";
    last = std::max(last, v.last_step);
    if (v.view_of < 0) {
      st.naive_bytes += v.bytes;
      continue;
    }
    KILN_CHECK(v.view_of < static_cast<int>(vs.size()) && vs[v.view_of].view_of < 0) << "a view's host must be a value of its own";
    PlannedValue& host = vs[v.view_of];
    KILN_CHECK(v.view_offset >= 0 && v.view_offset + v.bytes <= host.bytes) << "a view must lie inside its host";
    host.first_step = std::min(host.first_step, v.first_step);  // the host's bytes live while any piece does
    host.last_step = std::max(host.last_step, v.last_step);
    joined[i] = joined[v.view_of] = true;
  }
  std::vector<int64_t> live(last + 1, 0);
  for (const PlannedValue& v : vs)
    if (v.view_of < 0)
      for (int s = v.first_step; s <= v.last_step; ++s) live[s] += align_up(v.bytes, alignment);
  for (int64_t b : live) st.peak_bytes = std::max(st.peak_bytes, b);

  // In place: a value takes its input's bytes when that input dies at the
  // step that writes it; the chain of such values is one allocation spanning
  // their lifetimes (a ResNet's residual blocks, each written over the one
  // before). One value per source: every value that passes the check is
  // written at the source's last step, so two of them would be live in the
  // same bytes; and the source must be the chain's last member alive.
  std::vector<int> root(vs.size());
  std::vector<bool> taken(vs.size(), false);
  std::iota(root.begin(), root.end(), 0);
  std::vector<int> chain_last(vs.size());  // per root: the last step any member of its chain is read
  for (size_t i = 0; i < vs.size(); ++i) chain_last[i] = vs[i].last_step;
  for (size_t i = 0; i < vs.size(); ++i)
    if (vs[i].view_of >= 0) root[i] = vs[i].view_of;
  for (size_t i = 0; i < vs.size(); ++i) {
    int src = vs[i].inplace_of;
    if (src < 0 || joined[i] || (src < static_cast<int>(vs.size()) && joined[src])) continue;
    KILN_CHECK(src < static_cast<int>(vs.size())) << "in-place source out of range";
    int r = src;
    while (root[r] != r) r = root[r];
    if (vs[src].last_step == vs[i].first_step && chain_last[r] == vs[src].last_step && vs[r].bytes >= vs[i].bytes &&
        root[i] == static_cast<int>(i) && !taken[src]) {
      root[i] = r;
      taken[src] = true;
      chain_last[r] = std::max(chain_last[r], vs[i].last_step);
      ++st.inplace;
    }
  }
  // One allocation per root, spanning the lifetimes of its members.
  struct Alloc {
    int64_t bytes;
    int first, last;
    int64_t offset = -1;
  };
  std::vector<Alloc> allocs;
  std::vector<int> alloc_of(vs.size(), -1);
  for (size_t i = 0; i < vs.size(); ++i) {
    int r = static_cast<int>(i);
    while (root[r] != r) r = root[r];
    if (alloc_of[r] < 0) {
      alloc_of[r] = static_cast<int>(allocs.size());
      allocs.push_back({align_up(vs[r].bytes, alignment), vs[r].first_step, vs[r].last_step});
    }
    Alloc& a = allocs[alloc_of[r]];
    a.first = std::min(a.first, vs[i].first_step);
    a.last = std::max(a.last, vs[i].last_step);
    alloc_of[i] = alloc_of[r];
  }
  std::vector<int> order(allocs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return allocs[a].bytes > allocs[b].bytes; });
  std::vector<int> placed;
  for (int i : order) {
    Alloc& a = allocs[i];
    // The busy intervals of placed allocations alive at the same time, by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int j : placed) {
      const Alloc& b = allocs[j];
      if (a.first <= b.last && b.first <= a.last) busy.push_back({b.offset, b.offset + b.bytes});
    }
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
    for (auto [lo, hi] : busy) {
      if (lo - cursor >= a.bytes && lo - cursor < best_gap) {
        best = cursor;
        best_gap = lo - cursor;
      }
      cursor = std::max(cursor, hi);
    }
    a.offset = best >= 0 ? best : cursor;
    st.arena_bytes = std::max(st.arena_bytes, a.offset + a.bytes);
    placed.push_back(i);
  }
  for (size_t i = 0; i < vs.size(); ++i) vs[i].offset = allocs[alloc_of[i]].offset + (vs[i].view_of >= 0 ? vs[i].view_offset : 0);
  return st;
}

}  // namespace kiln
