"""Training over the ranks: a kiln.train step made data parallel (each rank its block of the batch)
or tensor parallel (each rank its share of every layer's weights)."""
from .._ffi import KilnError, _kiln
from .. import train as _train
from .comm import broadcast
from .sharded_plan import Plan

_d = _kiln.dist


def train(model, mesh, axis=None, bucket_mb=None, strategy="data", grad_dtype="float32", **train_options):
    """``kiln.train.compile(model, **train_options)`` made data parallel over `mesh` (see data_parallel),
    or with strategy="tensor" tensor parallel (see tensor_parallel)."""
    step = _train.compile(model, **train_options)
    if strategy == "tensor":
        return tensor_parallel(step, mesh, axis)
    if strategy != "data":
        raise KilnError(f"kiln.dist.train: strategy must be 'data' or 'tensor', got {strategy!r} "
                        "(pipelines: kiln.dist.pipeline_train)")
    return data_parallel(step, mesh, axis, bucket_mb, grad_dtype)


def tensor_parallel(step, mesh, axis=None):
    """Makes a kiln.train step tensor parallel over `mesh` in the Megatron manner: each MatMul weight
    (a parameter) split by columns, or by rows after a column-split one, with its gradient and
    optimizer state split alike, so each rank computes its share of every layer; the batch is whole on
    every rank. The new parameters come back whole (gathered) to the step, which feeds each rank its
    block again at the next call. Call it on every rank; then call the step as before."""
    axes = [n for n, _ in mesh.axes]
    axis = axis or ("model" if "model" in axes else axes[-1])
    g = step.graph
    given = dict(_d.megatron_specs(g, mesh, axis))
    if not given:
        raise KilnError("tensor_parallel: the step has no 2-D MatMul/Gemm weight to split")
    _shard_step(step, Plan(_d.shard_graph(g, mesh, given, False), g, given), None)
    return step


def _shard_step(step, plan, bucket_mb, grad_dtype="float32"):
    step.run_with(plan.compile(bucket_mb=bucket_mb, grad_dtype=grad_dtype))  # step.runner: its stats() say where each step's time went
    # Every rank starts from rank 0's parameters and buffers (as DDP does), whatever each initialised.
    for table in (step.parameters, step.buffers):
        for name in list(table):
            table[name] = broadcast(table[name], 0)
    step.plan = plan


def data_parallel(step, mesh, axis=None, bucket_mb=None, grad_dtype="float32"):
    """Makes a kiln.train step data parallel over `mesh`: each rank takes its block of the batch,
    the step's graph is sharded (gradients come out as partial sums and are all-reduced before the
    optimizer; the loss is the mean over the whole batch, so their sum is the average gradient),
    parameters start as rank 0's, so every rank holds the same parameters after every step and the
    loss is the full batch's. Call it on every rank; then call the step with the full batch as before.
    bucket_mb: overlap the gradient all-reduces with the backward pass in buckets of that many MiB (see Plan.compile).
    grad_dtype="bfloat16": the gradients travel as bfloat16, half the bytes (see Plan.compile)."""
    axes = [n for n, _ in mesh.axes]
    axis = axis or ("data" if "data" in axes else axes[0])
    g = step.graph
    n_batch = step.n_batch
    given = {}
    for name, t in list(zip(g.input_names, g.input_types))[:n_batch]:
        given[name] = " ".join([f"S({axis})"] + ["R"] * (len(t[0]) - 1))
    _shard_step(step, Plan(_d.shard_graph(g, mesh, given, False), g, given), bucket_mb, grad_dtype)
    return step
