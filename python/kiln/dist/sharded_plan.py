"""Sharding plans: a graph sharded over a mesh of ranks by strategy or specs (shard), what it costs
(Plan.estimate, Plan.measure), and this rank's compiled share of it (Plan.compile, Runner)."""
import time as _time

import numpy as _np

from .._ffi import KilnError, _kiln
from .. import graph as _kg
from .comm import all_gather, barrier

_d = _kiln.dist


def Mesh(*axes):
    """A mesh of ranks with named axes: ``Mesh(("data", 2), ("model", 2))`` (row-major: rank 1 is data 0, model 1)."""
    try:
        return _d.Mesh([(str(n), int(s)) for n, s in axes])
    except (TypeError, ValueError):
        raise KilnError(f"Mesh takes (name, size) pairs, e.g. Mesh(('data', 2)); got {axes!r}") from None


def _spec_text(spec):
    if isinstance(spec, str):
        return spec
    toks = []
    for d in spec:  # a sequence per dim: None / axis name / tuple of axis names
        if d is None:
            toks.append("R")
        else:
            toks.append("S(" + ",".join([d] if isinstance(d, str) else list(d)) + ")")
    return " ".join(toks)


def _strategy_specs(model, mesh, strategy):
    axes = [n for n, _ in mesh.axes]
    if strategy == "data":
        axis = "data" if "data" in axes else axes[0]
        return {n: " ".join([f"S({axis})"] + ["R"] * (len(t[0]) - 1)) for n, t in zip(model.input_names, model.input_types) if len(t[0]) >= 1}
    if strategy == "tensor":
        return dict(_d.megatron_specs(model, mesh, "model" if "model" in axes else axes[-1]))
    if strategy == "pipeline":
        raise KilnError("strategy='pipeline' is its own call: kiln.dist.pipeline(model, micro_batches=...) "
                        "(or kiln.dist.pipeline_train for training)")
    raise KilnError(f"strategy must be 'data', 'tensor' or 'auto' (or give specs=...), got {strategy!r}")


class Plan:
    """A graph sharded over a mesh: ``print(plan)`` shows it; ``plan.compile()`` gives this rank's runner."""

    def __init__(self, sharded, model, specs=None, report=None, baselines=None):
        self.sharded = sharded
        self.model = model
        self.mesh = sharded.mesh
        self.specs = dict(specs or {})  # what was given (or chosen by strategy="auto")
        self._report = report
        self.baselines = baselines or {}

    def estimate(self, **cost):
        """The estimated time and memory of one rank's run (a dict: total_s, compute_s, comm_s, memory_bytes,
        comm_bytes, collectives, text). `cost` overrides flops_per_s, memory_bytes_per_s, link_bytes_per_s, latency_s."""
        return _d.estimate_plan(self.sharded, {k: float(v) for k, v in cost.items()})

    @property
    def report(self):
        """For strategy="auto": the chosen specs, the estimate, and the named strategies' estimates beside it."""
        return self._report or f"# specs: {self.specs}\n# estimate: {self.estimate()['text']}\n"

    def __str__(self):
        cs = self.collectives()
        total = sum(c[2] for c in cs)
        kinds = {}
        for c in cs:
            kinds[c[0][5:]] = kinds.get(c[0][5:], 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "no collectives"
        return f"{self.sharded}\n# {summary}; {total} bytes of results per rank per run"

    def collectives(self):
        """(op, mesh axis, bytes) for each inserted collective."""
        return self.sharded.collectives()

    def lower(self, rank):
        """The graph `rank` runs (local shapes, sliced weights, collectives)."""
        return self.sharded.lower(rank)

    def compile(self, target="llvm", bucket_mb=None, grad_dtype="float32"):
        """This rank's graph, cut at its collectives and compiled (every rank must call it: it splits the communicator).

        bucket_mb > 0 overlaps the all-reduces of the values a segment computes (gradients) with the rest of
        it (the backward pass), packed in buckets of about that many MiB (PyTorch DDP's bucket_cap_mb);
        0 runs every collective in turn; None takes $KILN_DIST_BUCKET_MB (else 0).
        grad_dtype="bfloat16" sends those float32 buckets as bfloat16 (half the bytes, each sum rounded to
        bfloat16's 8 bits of mantissa); the graph's outputs (a loss) stay float32. It needs buckets: with
        bucket_mb None it takes 25 MiB."""
        if _d.size() != self.mesh.size:
            raise KilnError(f"the mesh {self.mesh} has {self.mesh.size} ranks but {_d.size()} process(es) run; "
                            f"start them with mpirun -np {self.mesh.size}")
        if bucket_mb is not None and bucket_mb < 0:
            raise KilnError(f"bucket_mb must be >= 0 (0: no overlap), got {bucket_mb}")
        if grad_dtype not in ("float32", "bfloat16"):
            raise KilnError(f"grad_dtype must be 'float32' or 'bfloat16', got {grad_dtype!r}")
        bf16 = grad_dtype == "bfloat16"
        if bf16 and bucket_mb is None:
            bucket_mb = 25.0
        bucket_bytes = -1 if bucket_mb is None else int(bucket_mb * 1024 * 1024)
        return Runner(_d.Runner(self.sharded, str(target), bucket_bytes, bf16), self)

    def measure(self, *inputs, runs=20, runner=None, **cost):
        """Runs the plan `runs` times on every rank (compiling it unless `runner` is given) and sets the
        measurement beside the estimate: a dict of best_s and median_s (the slowest rank's), estimate_s
        (with `cost`, e.g. from calibrate()) and their ratio best / estimate. Every rank must call it."""
        runner = runner or self.compile()
        runner(*inputs)  # warm-up
        barrier()
        times = []
        for _ in range(int(runs)):
            t0 = _time.perf_counter()
            runner(*inputs)
            times.append(_time.perf_counter() - t0)
        mine = _np.array([min(times), float(_np.median(times))], "float64")
        best, median = (float(v) for v in (all_gather(mine).max(axis=0) if _d.size() > 1 else mine))
        est = self.estimate(**cost)["total_s"]
        return {"best_s": best, "median_s": median, "estimate_s": est, "best_over_estimate": best / est if est > 0 else float("nan")}


def _block(a, blocks):
    # np.ascontiguousarray would make a 0-d array 1-d.
    return _np.require(a[tuple(slice(o, o + n) for o, n in blocks)] if blocks else a, requirements="C")


class Runner:
    """A rank's compiled graph. ``runner(*inputs)`` takes the full (global) inputs, feeds this rank its blocks
    and returns the outputs (full, unless the plan keeps them sharded: then this rank's blocks)."""

    def __init__(self, native, plan):
        self._r = native
        self.plan = plan
        self._blocks = plan.sharded.input_blocks(native.rank)
        self._shapes = [tuple(t[0]) for t in plan.model.input_types]
        self._dtypes = [t[1] for t in plan.model.input_types]

    @property
    def rank(self):
        return self._r.rank

    @property
    def local_graph(self):
        return self._r.local_graph

    def __call__(self, *inputs):
        return self.run(list(inputs))

    def stats(self):
        """Counters since the last reset_stats() (a dict): where run() spent its time (segments, collectives,
        blocked on overlapped buckets), and each collective's payload, calls and seconds."""
        return self._r.stats()

    def reset_stats(self):
        self._r.reset_stats()

    def run(self, inputs, local=False):
        """`inputs` in the graph's input order: full arrays (each rank takes its block), or with local=True this rank's blocks."""
        if len(inputs) != len(self._blocks):
            raise KilnError(f"the graph takes {len(self._blocks)} input(s), got {len(inputs)}")
        feed = []
        for i, (a, blocks, shape, dtype) in enumerate(zip(inputs, self._blocks, self._shapes, self._dtypes)):
            a = _np.asarray(a, dtype=dtype)
            if not local:
                if a.shape != shape:
                    raise KilnError(f"input {i} must have the global shape {shape}, got {a.shape}")
                a = _block(a, blocks)
            feed.append(a)
        return self._r.run(feed)


def shard(model, mesh, strategy=None, specs=None, keep_outputs_sharded=False, memory_limit=None, cost=None, max_plans=4096):
    """Shards `model` (a kiln.graph.Graph) over `mesh`.

    strategy="data": every model input split on its first dim over the mesh's
    "data" axis (else its first), weights replicated. strategy="tensor":
    Megatron-style over the "model" axis (else the last): matmul weights
    split by columns, and by rows where their activation comes from a
    column-split one (one all-reduce per pair; attention splits by heads). `specs` ({input or weight
    name: spec}) adds to or overrides the strategy's specs.
    strategy="auto": a search over every matmul weight's split (none, rows or columns, per mesh axis)
    and every input's batch split, for the lowest estimated time (compute + communication, see
    Plan.estimate) whose memory per rank fits `memory_limit` (bytes; None: no limit); `cost` overrides
    the machine the estimate assumes (flops_per_s, memory_bytes_per_s, link_bytes_per_s, latency_s;
    calibrate()'s also costs each mesh axis at the link of its level: a host's, or the network's).
    ``print(plan.report)`` shows the choice beside the named strategies.
    """
    if not isinstance(model, _kg.Graph):
        raise KilnError(f"kiln.dist.shard takes a kiln.graph.Graph, got a {type(model).__name__}")
    if strategy == "auto":
        if specs:
            raise KilnError("strategy='auto' chooses every spec itself; give specs=... without a strategy instead")
        if getattr(cost, "levels", None):  # calibrate()'s: each mesh axis at its level's link
            cost = cost.for_mesh(mesh)
        cost = {k: float(v) for k, v in (cost or {}).items()}
        chosen, sharded, _, baselines, report = _d.auto_shard(model, mesh, int(memory_limit or 0), cost, int(max_plans),
                                                             bool(keep_outputs_sharded))
        return Plan(sharded, model, chosen, report, baselines)
    given = _strategy_specs(model, mesh, strategy) if strategy else {}
    given.update({str(k): _spec_text(v) for k, v in (specs or {}).items()})
    return Plan(_d.shard_graph(model, mesh, given, bool(keep_outputs_sharded)), model, given)
