/** \file
 * The distribution pass: from specs on some values of a graph to one graph
 * per rank.
 *
 *   ShardedGraph sg = shard_graph(g, mesh, {{"x", "S(data) R"}});
 *   std::cout << sg.str();                 // every value with its spec, every collective with its bytes
 *   Graph local = lower_to_rank(sg, rank);  // local shapes, weights sliced, collectives kept as ops
 *
 * Propagation walks the graph producers first. Each operator asks its rule
 * (OpDef::sharding, declared in its registry entry: kiln/graph/sharding_rule.h)
 * which specs it needs of its inputs and which its outputs get; an op whose
 * entry has no rule is refused with a kiln::Error naming it; where a producer's spec differs from what
 * a consumer needs, resharding ops are inserted (all-reduce for partial sums,
 * reduce-scatter, all-gather, all-to-all, or a free local slice). A graph
 * input or weight without a given spec takes the one its first consumer asks
 * for (the consumer constrains its producer), so a weight is sliced rather
 * than gathered. Graph outputs are replicated, or with `keep_outputs_sharded`
 * left split (partial sums are always resolved).
 *
 * The collectives are graph ops (kiln.AllReduce, kiln.AllGather,
 * kiln.ReduceScatter, kiln.AllToAll; attrs axis, size, dim(s), bytes; with
 * local=0 in the global graph, whose types stay global, and local=1 after
 * lowering). kiln.Shard (a local slice) exists only in the global graph; the
 * lowering makes it a Slice with the rank's offsets.
 */
#ifndef KILN_DIST_SHARD_H
#define KILN_DIST_SHARD_H

#include <map>
#include <string>
#include <unordered_map>

#include "kiln/graph/graph.h"
#include "kiln/graph/sharding.h"

namespace kiln::dist {

// The spec vocabulary lives in the graph library (operators declare their rules with it); dist speaks it unqualified.
using graph::divides;
using graph::local_block;
using graph::local_shape;
using graph::Mesh;
using graph::parse_spec;
using graph::ShardingSpec;

using SpecMap = std::unordered_map<graph::Value, ShardingSpec, graph::ValueHash>;

struct ShardedGraph {
  Mesh mesh;
  /** The global graph with resharding ops inserted. */
  graph::Graph graph;
  /** The spec of every value of `graph`. */
  SpecMap specs;
  /** The graph's dump with the spec after each value's type. */
  std::string str() const;
};

struct ShardOptions {
  /** Leave graph outputs split (each rank returns its block) instead of gathering them. */
  bool keep_outputs_sharded = false;
};

/** Names of the collective ops. */
bool is_collective(const std::string& op_name);

/** Propagates `given` (value name -> spec text; inputs or constants by name) through g and inserts the resharding ops. */
ShardedGraph shard_graph(const graph::Graph& g, const Mesh& mesh, const std::map<std::string, std::string>& given,
                         const ShardOptions& options = {});

/** A graph of one input of type `t` with spec `from` whose output is the input resharded to `to` (tests every resharding path). */
ShardedGraph reshard_graph(const graph::TensorType& t, const Mesh& mesh, const std::string& from, const std::string& to);

/**
 * Tensor parallel in the Megatron manner over mesh axis `axis`: the 2-D
 * weight (a constant, or a graph input: a training step's parameter) of each
 * op that contracts one (ShardingRule::weight_splits: MatMul, Gemm) split by columns, except where its activation
 * comes from a column-split one, then by rows (so each pair costs one
 * all-reduce). Returns weight name -> spec, for shard_graph.
 */
std::map<std::string, std::string> megatron_specs(const graph::Graph& g, const Mesh& mesh, const std::string& axis);

/** The graph rank `rank` runs: local shapes, constants sliced, kiln.Shard as Slice, collectives with local=1. */
graph::Graph lower_to_rank(const ShardedGraph& sg, int rank);

}  // namespace kiln::dist

#endif  // KILN_DIST_SHARD_H
