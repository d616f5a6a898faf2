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
  double seconds = 0;         ///< time the rank spent inside it (waiting for peers included)
  int64_t wire_bytes = -1;    ///< bytes this rank sent for it (wire_bytes_sent(); -1 unknown)
};

/** What run() did since the last reset_stats(): where the time went and what the collectives moved. */
struct RunStats {
  int64_t runs = 0;
  double seconds = 0;             ///< inside run()
  double segment_seconds = 0;     ///< in compiled segments
  double collective_seconds = 0;  ///< in collectives
  std::vector<CollectiveStats> collectives;  ///< in the order they run
};

class Runner {
 public:
  /** Throws kiln::Error when the world's size is not the mesh's. */
  Runner(const ShardedGraph& sg, std::shared_ptr<Communicator> world, const graph::CompileOptions& options = {});
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
