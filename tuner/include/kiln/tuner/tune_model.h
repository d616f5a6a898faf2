/** \file
 * Tuning a whole model: every fused group of the compiled graph is a tuning
 * task (its compute DAG on the target, keyed by the workload key); identical
 * groups are one task with a weight (how often it runs per inference). A
 * task scheduler in the manner of Ansor spreads one trial budget over the
 * tasks by the estimated gain in end-to-end time, with every record in the
 * tuning database, so a session resumes where an interrupted one stopped and
 * the records of one model serve every model with the same workloads.
 *
 * The tuner's entry point for a whole graph: it sits above the graph
 * compiler because it needs the search and the cost model, which the graph
 * compiler itself needs neither of (its default schedules come from the rules
 * in kiln_ops).
 */
#ifndef KILN_TUNER_TUNE_MODEL_H
#define KILN_TUNER_TUNE_MODEL_H

#include <string>
#include <vector>

#include "kiln/graph/executor.h"
#include "kiln/tuner/graph_search.h"
#include "kiln/tuner/records_gate.h"
#include "kiln/tuner/schedule_rules.h"

namespace kiln::tuner {

using graph::CompileOptions;
using graph::Graph;

struct ModelTask {
  Task task;
  int weight = 1;                   ///< groups of the model with this workload
  std::string ops;                  ///< "kiln.ConvNCHWc+Add+Relu"
  std::vector<std::string> groups;  ///< the groups' names
  int records = 0;                  ///< valid records in the DB (0 without a DB)
  double best_time = 0;             ///< seconds, the DB's best (0: none)
  /**
   * Seconds, the default schedule (what compile takes without a record, ops/default_schedule.h) measured
   * alone by tune_model at the session's start; 0: not measured (extract_tasks, GPU targets, an error).
   */
  double default_time = 0;
  /**
   * Its default is a hand schedule outside the search space (a fused depthwise + pointwise pair's rows, AMX
   * tiles; default_schedule.h), set with default_time: the search rarely reaches it, so the task gets no
   * warm-up round and one round without gain ends it (AMX tiles: none, compile takes them ahead of records).
   */
  bool hand_default = false;
  /**
   * 0 for a task of the model under any layout; else the channel-block cap
   * (layout_plan.h) of this variant: its groups have a variant under
   * another cap too, and compiling picks one per convolution.
   */
  int64_t layout_cap = 0;
  /** Whether compile runs this task: under the DB's tuned graph plan (tuned_plan.h) where it has one, else each convolution at default_conv_cap's cap. */
  bool in_default_plan = true;
};

/**
 * The tasks of `g` compiled for `options.target` (fused, as kiln::graph::compile would), with the DB's records when options.db is set.
 * With options.choose_layouts, the convolutions' groups under every channel-block cap (ModelTask::layout_cap).
 * A model with symbolic dims: the tasks of its static twins at options.sizes (graph::likely_bindings),
 * merged by workload; group names carry the sizes ("MatMul @ l1 [seq=128]"). compile(db=) finds
 * their records for its symbolic kernels (graph::build_group_kernel).
 */
std::vector<ModelTask> extract_tasks(const Graph& g, const CompileOptions& options = {});
/** The time the task's groups can expect: the faster of its best record and its measured default (0: neither known). */
double expected_time(const ModelTask& t);
/**
 * The model's estimated latency: per group (by name), the expected time of the
 * tasks that can run it (variants under other layouts are alternatives),
 * summed; 0 while a group has no task with a record or a measured default.
 */
double estimated_latency(const std::vector<ModelTask>& tasks);

/** A table of the tasks: workload, FLOPs, weight, layout variant, records, best time. */
std::string tasks_table(const std::vector<ModelTask>& tasks);

struct ModelTuneOptions {
  int trials = 1000;                 ///< the budget over all tasks
  int batch = 16;                    ///< trials per scheduling round (one task)
  double time_budget_s = 0;          ///< stop starting rounds after this (0: none)
  int early_stop_rounds = 3;         ///< a task that gains nothing in this many of its rounds is done
  bool progress = true;              ///< one progress line per round on stderr
  uint64_t seed = 0;
  /**
   * Time candidates with cold inputs (tuner::MeasureOptions::cold_inputs): every
   * input but the first evicted before each call, as a layer's weights are in a
   * model run. Such records are kept apart from warm ones and preferred by compile.
   */
  bool cold_inputs = true;
  /** With cold_inputs: a repeat's time is its fastest call, in the search, the confirmation and the gate (MeasureOptions::fastest_call). */
  bool fastest_call = false;
  /**
   * After the search, each task's confirm_top best schedules and its default
   * schedule are measured again in confirm_rounds interleaved rounds
   * (tuner/confirm.h; not counted in trials); 0 skips it.
   */
  int confirm_top = 4;
  int confirm_rounds = 3;
  /** cuda targets: run the candidates in the GPU simulator (tuner::MeasureOptions::gpu_simulate); no confirmation. */
  bool gpu_simulate = false;
  /**
   * The share of `trials` the graph-level search (graph_search.h) may spend,
   * each candidate plan it measures counting graph_candidate_trials trials
   * (a whole-model compile and timing costs about that many kernel
   * measurements). The loop tuning runs first, on the rest, so that the
   * candidates are timed with tuned schedules (and, under time_budget_s,
   * stops at its 1 - graph_share share of the time); what the search leaves
   * unspent (no more moves, or outcomes found in the database) goes back
   * to loop tuning, on the tasks of the winning plan. 0: no graph search;
   * neither is there one for a GPU target, a model with symbolic dims, or a
   * budget too small for one candidate.
   */
  double graph_share = 0.25;
  int graph_candidate_trials = 10;
  /**
   * At the end, with confirmation on (confirm_top > 0) on an llvm target:
   * the model with its records timed against the defaults, the records
   * reverted to the default schedules where they do not win (records_gate.h).
   */
  bool gate_records = true;
};

struct ModelTuneResult {
  std::vector<ModelTask> tasks;      ///< with their best times after the session
  int trials = 0;                    ///< measured in this session
  int rounds = 0;
  double elapsed_s = 0;
  /** estimated_latency(tasks) after the session (seconds); 0 while a group has no task with a record or a measured default. */
  double estimated_latency = 0;
  /** Tasks the session stopped because tuning them raised an error (each with the message): they keep their earlier records or the default schedule. */
  std::vector<std::string> failures;
  /** The graph-level search: its winner, what it measured (graph.skipped: why none ran). */
  GraphSearchResult graph;
  /** Trials the graph search was charged: graph.measured x graph_candidate_trials. */
  int graph_trials = 0;
  /** The records gate's outcome (gate.skipped says why it did not time the model). */
  RecordsGateResult gate;
};

/**
 * Tunes the model into options.db (required): its loop schedules (below)
 * and, with tune.graph_share, its graph-level choices (graph_search.h), one
 * trial budget for both (ModelTuneOptions::graph_share says how it is split).
 *
 * The loop tuning: tunes the model's tasks. On CPU targets each task's
 * default schedule is measured first (ModelTask::default_time): a round
 * gains only where it beats what compile takes anyway, so tasks whose
 * default the search cannot reach (a fused depthwise + pointwise pair's hand
 * schedule: its records ran 2x slower on MobileNetV2) stop early instead of
 * drawing rounds for catching up (ModelTask::hand_default). Other tasks
 * without records get one round each first (round robin); then each round goes to the task
 * with the largest expected gain in the weighted total: its weight times the
 * larger of its last round's improvement and an optimistic share of the
 * distance to the best GFLOP/s a similar task (same operators) reached.
 * One cost model (options.db + ".model") serves every task.
 */
ModelTuneResult tune_model(const Graph& g, const CompileOptions& options, const ModelTuneOptions& tune);

}  // namespace kiln::tuner

#endif  // KILN_TUNER_TUNE_MODEL_H
