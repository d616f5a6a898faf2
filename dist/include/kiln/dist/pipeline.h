/** \file
 * Pipeline parallelism: a graph cut into consecutive stages, one per rank,
 * balanced by the estimate of each op's time (auto_shard.h's cost model).
 *
 *   PipelineCut cut = cut_pipeline(g, 4);
 *   std::cout << cut.str();         // each stage: its ops, estimated time, what crosses in and out
 *   Graph mine = cut.stages[rank].graph;
 *
 * The ops are cut in g's topological order into contiguous ranges that
 * minimise the slowest stage. A stage's graph takes, in order, the values
 * the stage before sends it (its `recv`), then the model inputs it reads
 * itself (`model_inputs`: every rank is given the model's inputs); it
 * returns the values later stages need (`send`: its own, and those it
 * passes on from earlier stages), and the last stage returns the model's
 * outputs. The runner (python/kiln/dist/pipeline_parallel.py) feeds
 * micro-batches through the stages with send/recv between neighbouring ranks. A received value that
 * holds bfloat16 values (autocast's) is rounded again where it arrives,
 * which changes no value but keeps the stage's products on bfloat16 dot
 * products (use_bf16_dot).
 */
#ifndef KILN_DIST_PIPELINE_H
#define KILN_DIST_PIPELINE_H

#include <string>
#include <vector>

#include "kiln/dist/auto_shard.h"
#include "kiln/graph/graph.h"

namespace kiln::dist {

struct PipelineStage {
  graph::Graph graph;
  std::vector<std::string> recv;          ///< boundary values from the stage before, in the graph's input order
  std::vector<std::string> model_inputs;  ///< model inputs this stage reads (after the received ones)
  std::vector<std::string> send;          ///< boundary values for the stage after (empty on the last stage)
  int num_ops = 0;
  double estimated_s = 0;
};

struct PipelineCut {
  std::vector<PipelineStage> stages;
  /** Each stage's ops, estimated time and boundary, and the balance (slowest stage / mean). */
  std::string str() const;
};

/** Throws kiln::Error when num_stages < 1 or the graph has fewer ops than stages. */
PipelineCut cut_pipeline(const graph::Graph& g, int num_stages, const CostParams& cost = {});

}  // namespace kiln::dist

#endif  // KILN_DIST_PIPELINE_H
