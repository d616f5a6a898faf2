// size_buckets and variant_specs (kernel_variants.h).
#include "kiln/graph/kernel_variants.h"

#include <algorithm>
#include <limits>
#include <set>

#include "kiln/ir/functor.h"
#include "kiln/ops/task.h"

namespace kiln::graph {

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// The shape variables (by plan index) that the DAG's arguments' extents read.
std::vector<int> vars_read(const GraphDag& dag, const std::vector<std::string>& vars) {
  std::set<int> used;
  for (const te::Tensor& t : dag.args())
    for (const Expr& e : t.shape())
      post_order_visit(e, [&](const Expr& x) {
        if (const Variable* v = x.as<Variable>()) {
          auto it = std::find(vars.begin(), vars.end(), v->name);
          if (it != vars.end()) used.insert(static_cast<int>(it - vars.begin()));
        }
      });
  return {used.begin(), used.end()};
}

// The bucket that holds the default hint, or the range's size nearest to it.
size_t fallback_bucket(const std::vector<SizeBucket>& buckets) {
  for (size_t i = 0; i < buckets.size(); ++i)
    if (buckets[i].lo <= ops::kDefaultSizeHint && ops::kDefaultSizeHint <= buckets[i].hi) return i;
  return buckets.front().lo > ops::kDefaultSizeHint ? 0 : buckets.size() - 1;
}

}  // namespace

std::vector<SizeBucket> size_buckets(const std::optional<ShapeRange>& range) {
  static const SizeBucket policy[] = {{0, 1, 1}, {2, 16, 8}, {17, 256, ops::kDefaultSizeHint}, {257, kMax, 512}};
  int64_t lo = range ? range->lo : 0, hi = range ? range->hi : kMax;
  std::vector<SizeBucket> out;
  for (SizeBucket b : policy) {
    b.lo = std::max(b.lo, lo);
    b.hi = std::min(b.hi, hi);
    if (b.lo > b.hi) continue;
    b.hint = std::clamp(b.hint, std::max<int64_t>(b.lo, 1), std::max<int64_t>(b.hi, 1));
    out.push_back(b);
  }
  return out;
}

std::vector<VariantSpec> variant_specs(const GraphDag& dag, const std::vector<std::string>& vars,
                                       const std::vector<std::optional<ShapeRange>>& ranges) {
  std::vector<int> used = vars_read(dag, vars);
  std::vector<std::vector<SizeBucket>> buckets;
  std::vector<size_t> pick;  // the combination being built: a bucket per used variable
  for (int v : used) {
    buckets.push_back(size_buckets(static_cast<size_t>(v) < ranges.size() ? ranges[v] : std::nullopt));
    pick.push_back(fallback_bucket(buckets.back()));
  }
  std::vector<std::vector<size_t>> combos = {pick};  // the fallback first
  std::vector<size_t> at(used.size(), 0);
  for (bool more = !used.empty(); more;) {
    if (at != pick) combos.push_back(at);
    more = false;
    for (size_t k = 0; k < at.size() && !more; ++k) {
      if (++at[k] < buckets[k].size()) more = true;
      else at[k] = 0;
    }
  }
  std::vector<VariantSpec> specs;
  for (const std::vector<size_t>& c : combos) {
    VariantSpec s;
    for (size_t k = 0; k < used.size(); ++k) {
      const SizeBucket& b = buckets[k][c[k]];
      const std::string& name = vars[used[k]];
      s.hints[name] = b.hint;
      if (buckets[k].size() == 1) continue;  // the whole range: no condition
      s.when.push_back({ShapeExpr::param(used[k]), b.lo, b.hi});
      s.text += (s.text.empty() ? "" : ", ") + name + " in [" + std::to_string(b.lo) + ", " + (b.hi == kMax ? "inf" : std::to_string(b.hi)) + "]";
    }
    specs.push_back(std::move(s));
  }
  return specs;
}

}  // namespace kiln::graph
