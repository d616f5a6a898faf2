"""Distributed runs: a graph sharded over a mesh of ranks, collectives inserted, one graph per rank.

Start the ranks with mpirun (``mpirun -np 4 python3 script.py``); every rank
runs the same script::

    import kiln
    mesh = kiln.dist.Mesh(("data", 2), ("model", 2))
    plan = kiln.dist.shard(model, mesh, strategy="tensor")   # or "data", or specs={...}
    print(plan)                    # every value with its sharding spec, every collective with its bytes
    runner = plan.compile()        # this rank's graph, compiled
    (y,) = runner(x)               # the full inputs in; the full (gathered) outputs out

Sharding specs are written one token per tensor dimension: ``R`` (replicated)
or ``S(axis)`` / ``S(axis1,axis2)`` (split over mesh axes), then optionally
``partial(axis)``; e.g. ``"S(data) R"`` for a batch split. Specs given on some
inputs or weights flow through the graph; a weight without a spec is sliced
the way its first consumer wants.

Clusters this machine cannot hold are planned on paper: ``kiln.dist.plan(graph, kiln.dist.Cluster.h100(64))``
(cluster.py) picks the mesh and sharding with its predicted step time, memory and share of peak; given a model
(``kiln.dist.GPT("175B", batch=1536)``) also pipeline stages, microbatches, recomputation, bfloat16 and ZeRO-1
(step_costs.py).

Without mpirun one process runs a mesh of size 1. Ranks that die or hang
make the others stop with an error after ``set_timeout`` seconds (default
300, or $KILN_DIST_TIMEOUT). Ranks that share a host share its cores: unless
$KILN_NUM_THREADS is set, each rank's kernels take its share of them (at
least one thread).
"""
from .._ffi import KilnError
from .comm import (rank, size, backend, set_timeout, timeout, barrier, all_reduce, all_gather, broadcast, send, recv,
                   mpi_built, nccl_all_reduce, set_ring, ring)
from .sharded_plan import Mesh, Plan, Runner, shard
from .calibration import calibrate
from .training import train, tensor_parallel, data_parallel
from .pipeline_parallel import (PipelinePlan, PipelineRunner, PipelineTrainPlan, PipelineTrainStep, pipeline,
                                pipeline_train)
from .cluster import Cluster, ClusterPlan, plan
from .gpt import GPT, gpt_training_graph

__all__ = ["rank", "size", "backend", "set_timeout", "timeout", "barrier", "all_reduce", "all_gather", "broadcast", "send",
           "recv", "mpi_built", "nccl_all_reduce", "set_ring", "ring", "Mesh", "Plan", "Runner", "shard", "calibrate", "train",
           "tensor_parallel", "data_parallel", "PipelinePlan", "PipelineRunner", "PipelineTrainPlan", "PipelineTrainStep",
           "pipeline", "pipeline_train", "Cluster", "ClusterPlan", "plan", "GPT", "gpt_training_graph", "KilnError"]
