// Gradient buckets for overlapping all-reduces with the backward pass (DDP's bucket_cap_mb idea), used by
// the runner: the ops of one level are cut into parts so that each bucket's inputs are ready as early as
// possible; after part p the runner packs bucket p's inputs into one buffer and starts a non-blocking
// all-reduce, which is waited only where the next level needs it.
#ifndef KILN_SRC_DIST_BUCKETS_H
#define KILN_SRC_DIST_BUCKETS_H

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::dist {

struct BucketPlan {
  /** Each op of the level -> its part (0 .. parts-1), run in that order. */
  std::unordered_map<const graph::NodeObj*, int> part;
  int parts = 1;
  struct Bucket {
    std::vector<const graph::OpNode*> all_reduces;  ///< packed in this order
    int after_part = 0;                             ///< started once this part has run
  };
  std::vector<Bucket> buckets;
};

/** Plans the buckets of `all_reduces` (kiln.AllReduce nodes whose inputs the ops of one level produce; `ops`
 *  are that level's ops in topological order). The all-reduce whose inputs need the fewest ops not yet run
 *  goes first (in a backward pass: the last layer's gradients); a bucket closes once it holds `cap_bytes`,
 *  or when the next all-reduce is over another mesh axis or of another dtype. */
BucketPlan plan_buckets(const std::vector<const graph::OpNode*>& ops, const std::vector<const graph::OpNode*>& all_reduces, int64_t cap_bytes);

}  // namespace kiln::dist

#endif  // KILN_SRC_DIST_BUCKETS_H
