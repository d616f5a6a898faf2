// Bucket planning (see buckets.h): a greedy order of the all-reduces by the ops each still needs.
#include "buckets.h"

#include <unordered_set>

namespace kiln::dist {

using namespace graph;

namespace {

// The ops of the level that `v` needs and that no earlier part runs.
std::vector<const NodeObj*> cone(const Value& v, const std::unordered_set<const NodeObj*>& level, const std::unordered_map<const NodeObj*, int>& part) {
  std::vector<const NodeObj*> out, stack{v.node.get()};
  std::unordered_set<const NodeObj*> seen;
  while (!stack.empty()) {
    const NodeObj* n = stack.back();
    stack.pop_back();
    if (!level.count(n) || part.count(n) || !seen.insert(n).second) continue;
    out.push_back(n);
    for (const Value& in : static_cast<const OpNode*>(n)->inputs)
      if (in.defined()) stack.push_back(in.node.get());
  }
  return out;
}

}  // namespace

BucketPlan plan_buckets(const std::vector<const OpNode*>& ops, const std::vector<const OpNode*>& all_reduces, int64_t cap_bytes) {
  BucketPlan plan;
  std::unordered_set<const NodeObj*> level(ops.begin(), ops.end());
  std::vector<const OpNode*> left = all_reduces;
  int64_t bytes = 0;
  int current = 0;  // the part being filled; its bucket is plan.buckets.back() when that bucket's after_part == current
  while (!left.empty()) {
    size_t best = 0, best_size = SIZE_MAX;
    for (size_t i = 0; i < left.size(); ++i) {
      size_t s = cone(left[i]->inputs[0], level, plan.part).size();
      if (s < best_size) best = i, best_size = s;
    }
    const OpNode* ar = left[best];
    left.erase(left.begin() + static_cast<std::ptrdiff_t>(best));
    const TensorType& t = ar->inputs[0].type();
    bool open = !plan.buckets.empty() && plan.buckets.back().after_part == current;
    if (open) {
      const OpNode* first = plan.buckets.back().all_reduces.front();
      if (first->attrs.get_string("axis") != ar->attrs.get_string("axis") || first->inputs[0].type().dtype != t.dtype) {
        ++current;  // another communicator or dtype: another buffer
        open = false;
      }
    }
    if (!open) {
      plan.buckets.push_back({{}, current});
      bytes = 0;
    }
    for (const NodeObj* n : cone(ar->inputs[0], level, plan.part)) plan.part[n] = current;
    plan.buckets.back().all_reduces.push_back(ar);
    bytes += t.bytes();
    if (bytes >= cap_bytes) ++current;
  }
  if (!plan.buckets.empty() && plan.buckets.back().after_part == current) ++current;
  // The ops no bucket needs run last.
  bool rest = false;
  for (const OpNode* op : ops)
    if (!plan.part.count(op)) plan.part[op] = current, rest = true;
  plan.parts = current + (rest ? 1 : 0);
  return plan;
}

}  // namespace kiln::dist
