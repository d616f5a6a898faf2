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
#include <vector>

#include "kiln/dist/communicator.h"
#include "kiln/dist/shard.h"
#include "kiln/graph/executor.h"

namespace kiln::dist {

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

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/** Runs one lowered collective node on the arrays of its axis group (exposed for tests of resharding). */
NDArray run_collective(const graph::OpNode& node, const NDArray& in, Communicator& group);

}  // namespace kiln::dist

#endif  // KILN_DIST_RUNNER_H
