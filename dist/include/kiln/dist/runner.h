/** \file
 * The per-rank runner: runs a rank's lowered graph (shard.h). The graph is
 * cut at its collectives into segments, each compiled by the normal graph
 * compiler (kiln::graph::compile), and the collectives run between them on
 * the communicator of their mesh axis (the ranks that differ only in that
 * axis's coordinate).
 *
 *   Runner r(sharded, world());      // on every rank (collective: splits the communicator per axis)
 *   auto outs = r.run(local_inputs); // this rank's blocks in, this rank's outputs out
 */
#ifndef KILN_DIST_RUNNER_H
#define KILN_DIST_RUNNER_H

#include <memory>
#include <string>
#include <vector>

#include "kiln/dist/communicator.h"
#include "kiln/dist/shard.h"
#include "kiln/graph/executor.h"

namespace kiln::dist {

/** One collective of the rank's graph, summed over the runs since the last reset. */
struct CollectiveStats {
  std::string op, axis;       ///< e.g. "kiln.AllReduce" over mesh axis "data"
  int group_size = 1;         ///< ranks taking part
  int64_t bytes = 0;          ///< this rank's input per call
  int64_t calls = 0;
  double seconds = 0;         ///< time the rank spent inside it (waiting for peers included; a bucket's wait is shared by size)
};

/** What run() did since the last reset_stats(): where the time went, and each collective's payload and time.
 *  (The bytes MPI sends for a collective depend on its algorithm: bench/dist_bench.py reads them from Open
 *  MPI's monitoring.) */
struct RunStats {
  int64_t runs = 0;
  double seconds = 0;             ///< inside run()
  double segment_seconds = 0;     ///< in compiled segments
  double collective_seconds = 0;  ///< in collectives (for overlapped buckets: packing, starting, waiting, unpacking)
  double bucket_wait_seconds = 0; ///< of which blocked waiting for overlapped buckets to complete
  int buckets = 0;                ///< overlapped all-reduce buckets per run (0: no overlap)
  std::vector<CollectiveStats> collectives;  ///< in the order they run
};

class Runner {
 public:
  /** Throws kiln::Error when the world's size is not the mesh's. bucket_bytes > 0 overlaps the all-reduces of
   *  values a segment produces (gradients) with the rest of that segment's level (the backward pass): they are
   *  packed in buckets of about that many bytes, each started (non-blocking) as soon as its inputs are
   *  computed and waited where the next level needs it; the level is cut into parts for it, and a thread
   *  tests the buckets in flight while segments compute (KILN_DIST_PROGRESS=0: only between). 0: collectives
   *  run one by one between segments; -1: $KILN_DIST_BUCKET_MB megabytes (MiB), else 0. bf16_gradients: the
   *  float32 buckets travel as bfloat16 (half the bytes; Communicator::start_all_reduce_bf16); needs buckets. */
  Runner(const ShardedGraph& sg, std::shared_ptr<Communicator> world, const graph::CompileOptions& options = {}, int64_t bucket_bytes = -1,
         bool bf16_gradients = false);
  ~Runner();

  /** Runs the rank's graph; inputs are this rank's blocks, in the graph's input order. */
  std::vector<NDArray> run(const std::vector<NDArray>& inputs) const;
  int rank() const;
  const graph::Graph& local_graph() const;
  /** How many compiled segments the graph was cut into. */
  int num_segments() const;
  /** Counters of the runs since construction or the last reset_stats(). */
  RunStats stats() const;
  void reset_stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/** Runs one lowered collective node on the arrays of its axis group (exposed for tests of resharding). */
NDArray run_collective(const graph::OpNode& node, const NDArray& in, Communicator& group);

}  // namespace kiln::dist

#endif  // KILN_DIST_RUNNER_H
