"""Distributed runs (plan.py) and pipeline parallelism (pipeline_parallel.py)."""
from .plan import (rank, size, backend, set_timeout, timeout, barrier, all_reduce, all_gather, broadcast, send, recv,
                   mpi_built, nccl_all_reduce, Mesh, Plan, Runner, shard, calibrate, train, tensor_parallel, data_parallel,
                   PipelinePlan, PipelineRunner, pipeline, pipeline_train, KilnError, _d, _link_rates)
