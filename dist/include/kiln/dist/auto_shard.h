/** \file
 * Automatic sharding: the plan for a graph on a mesh chosen by a search over
 * each parameter's and input's sharding, scored by an estimate of one rank's
 * run time (compute + communication) under a per-rank memory limit.
 *
 *   AutoShardOptions o;
 *   o.memory_limit = 64 << 20;                  // bytes per rank
 *   AutoShardResult r = auto_shard(g, Mesh({{"data", 2}, {"model", 2}}), o);
 *   std::cout << r.report();                    // the plan, its estimate, the named strategies beside it
 *   Graph local = lower_to_rank(r.sharded, rank);
 *
 * The choices: every weight an op's sharding rule names (ShardingRule::
 * weight_splits; a constant, or a graph input of a training step: a
 * MatMul/Gemm's 2-D B, a Conv's W) is replicated or split on one of the dims
 * the rule lists (B's rows or columns; W's output or, for groups of 1, input
 * channels) over one mesh axis; every other graph input is replicated or split
 * on its first (batch) dimension over one axis or over all. Everything else
 * follows by propagation (shard_graph). The search is exhaustive up to
 * max_plans complete choices; beyond, coordinate descent from the best named
 * strategy (each choice in turn set to its best while the others stay, until
 * a pass changes nothing).
 *
 * The estimate (estimate_plan), for one rank (ranks are symmetric):
 *   compute  per op, its registry cost (OpDef::cost) on the rank's local
 *            types: a contraction (OpCost::macs: MatMul, Gemm, Conv) takes
 *            2 x local multiply-adds / flops_per_s (with few output rows,
 *            the rate moves toward few_rows_flops_per_s); every other op
 *            its bytes read and written (OpCost::bytes) / memory_bytes_per_s;
 *   comm     per collective, ring algorithms over its group of n ranks:
 *            all-reduce 2(n-1)/n of the bytes, all-gather and all-to-all
 *            (n-1)/n of the result, reduce-scatter (n-1)/n of the input;
 *            over link_bytes_per_s, plus latency_s per step (2(n-1) steps
 *            for an all-reduce, n-1 for the others), plus collective_s and
 *            peer_wait_s (ranks sharing cores) each;
 *            plus kernel_s per op that starts a fused group (not elementwise,
 *            broadcast or injective: those fuse into their producer) and
 *            run_s once;
 *   memory   constants and graph inputs (local blocks) plus the most
 *            intermediate bytes live at once, in graph order.
 * It ignores overlap of compute and communication, and fusion.
 */
#ifndef KILN_DIST_AUTO_SHARD_H
#define KILN_DIST_AUTO_SHARD_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/dist/shard.h"

namespace kiln::dist {

/** The machine the estimate assumes (per rank). */
struct CostParams {
  double flops_per_s = 50e9;         ///< sustained GEMM/conv rate of one rank
  /** The GEMM rate with few_rows output rows (a data-parallel rank's slice of a small batch runs
   *  below the square rate); between few_rows and many_rows rows the rate is interpolated on the
   *  log of the rows. 0: flops_per_s for every shape. */
  double few_rows_flops_per_s = 0;
  double few_rows = 32;
  double many_rows = 384;
  double memory_bytes_per_s = 10e9;  ///< what memory-bound ops stream
  double link_bytes_per_s = 5e9;     ///< one rank's link bandwidth in a ring
  double latency_s = 20e-6;          ///< per step of a collective
  double kernel_s = 5e-6;            ///< fixed cost of each kernel a rank runs (a fused group)
  double run_s = 50e-6;              ///< fixed cost of one run (dispatch, inputs in, outputs out)
  double collective_s = 10e-6;       ///< fixed cost of each collective in the runner (a segment ends, the call, the wait)
  /** Each collective's wait for peers the scheduler holds back, where more ranks share a machine than it
   *  has cores (4 ranks on 2 cores): a rank that arrives first waits for the one descheduled behind it
   *  (kiln.dist.calibrate measures it there; 0 where every rank has a core). */
  double peer_wait_s = 0;
  /** Collectives of more bytes than this move at large_link_bytes_per_s instead (0: one rate for
   *  every size). MPI sends small messages eagerly and large ones by another protocol, whose rate
   *  can differ by an order of magnitude (kiln.dist.calibrate measures both). */
  double large_message_bytes = 0;
  double large_link_bytes_per_s = 0;
  /** A mesh axis's own link (bandwidth, latency), in place of link_bytes_per_s and latency_s for the
   *  collectives over it: a mesh of levels (hosts x devices per host) whose inner axis runs over
   *  NVLink and outer one over the network. Axes not named use the defaults. */
  std::map<std::string, std::pair<double, double>> axis_links;
};

struct PlanEstimate {
  double compute_s = 0;
  double comm_s = 0;
  double total_s() const { return compute_s + comm_s; }
  int64_t memory_bytes = 0;  ///< per rank
  int64_t comm_bytes = 0;    ///< sent per rank per run (ring model)
  int collectives = 0;
  std::string str() const;   ///< "1.23 ms (compute 1.00 ms + comm 0.23 ms, 4 collectives, 1.5 MB sent), memory 12.0 MB"
};

/** The estimate of a sharded graph (see the file comment). */
PlanEstimate estimate_plan(const ShardedGraph& sg, const CostParams& cost = {});

/** The estimate's seconds of each op of g (in g.op_nodes() order) on one device. */
std::vector<double> op_times(const graph::Graph& g, const CostParams& cost = {});

struct AutoShardOptions {
  int64_t memory_limit = 0;  ///< bytes per rank; 0: none
  CostParams cost;
  int max_plans = 4096;      ///< exhaustive search up to this many complete choices
  bool keep_outputs_sharded = false;
  /** One decision for every weight whose name differs from another's only in its numbers
   *  ("layer.3.fc1" and "layer.7.fc1"): the repeated layers of a deep model share their split,
   *  which keeps the search of a 96-layer model as small as one layer's. */
  bool tie_repeated = false;
  /** Weights may also split over every mesh axis at once (1/size each, gathered where read). */
  bool weights_over_all_axes = false;
};

struct AutoShardResult {
  /** The chosen specs (value name -> spec text), as shard_graph takes them. */
  std::map<std::string, std::string> specs;
  ShardedGraph sharded;
  PlanEstimate estimate;
  /** The named strategies under the same estimate ("replicated", "data", "tensor"), where they apply. */
  std::vector<std::pair<std::string, PlanEstimate>> baselines;
  int plans_evaluated = 0;
  bool exhaustive = false;
  /** The chosen specs, the estimate, and the baselines with whether each fits the limit. */
  std::string report(int64_t memory_limit = 0) const;
};

/**
 * Searches the plan with the lowest estimated time whose memory fits
 * options.memory_limit. Throws kiln::Error when no plan fits, naming the
 * limit and the least memory any plan needs.
 */
AutoShardResult auto_shard(const graph::Graph& g, const Mesh& mesh, const AutoShardOptions& options = {});

}  // namespace kiln::dist

#endif  // KILN_DIST_AUTO_SHARD_H
