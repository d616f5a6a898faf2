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

Without mpirun one process runs a mesh of size 1. Ranks that die or hang
make the others stop with an error after ``set_timeout`` seconds (default
300, or $KILN_DIST_TIMEOUT). Ranks that share a host share its cores: unless
$KILN_NUM_THREADS is set, each rank's kernels take its share of them (at
least one thread).
"""
import atexit
import os as _os
import time as _time

import numpy as _np

from .._ffi import KilnError, _kiln


def _share_the_cores():
    """Each of the ranks mpirun starts on this host runs its kernels on its share of the cores the
    rank may use. Without it every rank would start one thread per core, and on oversubscribed
    cores a rank's idle threads spin where its peers need to run (a 4-rank step on 2 cores took
    1.8 ms against 0.1 on 2 ranks). Read when kiln's thread pool starts, at the first kernel."""
    local = _os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or _os.environ.get("MPI_LOCALNRANKS")
    if not local or _os.environ.get("KILN_NUM_THREADS"):
        return
    cores = len(_os.sched_getaffinity(0))
    # A rank bound to its own cores keeps them all; unbound, the host's are split among the ranks.
    share = cores if cores < (_os.cpu_count() or cores) else cores // max(int(local), 1)
    _os.environ["KILN_NUM_THREADS"] = str(max(1, share))


_share_the_cores()

_d = _kiln.dist
rank = _d.rank
size = _d.size
backend = _d.backend
set_timeout = _d.set_timeout
timeout = _d.timeout
barrier = _d.barrier
all_reduce = _d.all_reduce
all_gather = _d.all_gather
broadcast = _d.broadcast
send = _d.send
recv = _d.recv
mpi_built = _d.mpi_built
nccl_all_reduce = _d.nccl_all_reduce

atexit.register(_d.finalize)


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

    def compile(self, target="llvm", bucket_mb=None):
        """This rank's graph, cut at its collectives and compiled (every rank must call it: it splits the communicator).

        bucket_mb > 0 overlaps the all-reduces of the values a segment computes (gradients) with the rest of
        it (the backward pass), packed in buckets of about that many MiB (PyTorch DDP's bucket_cap_mb);
        0 runs every collective in turn; None takes $KILN_DIST_BUCKET_MB (else 0)."""
        if _d.size() != self.mesh.size:
            raise KilnError(f"the mesh {self.mesh} has {self.mesh.size} ranks but {_d.size()} process(es) run; "
                            f"start them with mpirun -np {self.mesh.size}")
        if bucket_mb is not None and bucket_mb < 0:
            raise KilnError(f"bucket_mb must be >= 0 (0: no overlap), got {bucket_mb}")
        bucket_bytes = -1 if bucket_mb is None else int(bucket_mb * 1024 * 1024)
        return Runner(_d.Runner(self.sharded, str(target), bucket_bytes), self)

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


from .pipeline_parallel import PipelinePlan, PipelineRunner, pipeline, pipeline_train  # noqa: E402,F401


def _best_time(fn, reps):
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = _time.perf_counter()
        fn()
        best = min(best, _time.perf_counter() - t0)
    return best


def _time_together(fn, reps):
    """fn's time per call when every rank runs it at once, as the ranks of a step do: `reps` calls
    back to back between two barriers, the span over reps. Ranks that share cores share them here
    too: timing each call alone, a rank the scheduler held back before its clock started looked as
    fast as one with a core of its own (4 ranks on 2 cores measured 53 GFLOP/s a rank, against 77
    for 2, and the auto plans ran 1.15x to 1.65x their estimate); the closing barrier makes the
    slowest rank's span every rank's. The best of three spans; one rank: its best time."""
    if size() == 1:
        return _best_time(fn, reps)
    fn()
    best = float("inf")
    for _ in range(3):  # the best of three spans, as Plan.measure reports a plan's best run
        barrier()
        t0 = _time.perf_counter()
        for _ in range(reps):
            fn()
        barrier()
        best = min(best, (_time.perf_counter() - t0) / reps)
    return best


def calibrate(gemm=384, stream_mb=16, reps=10):
    """Measures the machine under the auto-sharding estimate, on every rank (call it on all: it
    runs collectives): a kiln-compiled [gemm]^3 MatMul (flops_per_s; with every rank running it at
    once, so that ranks sharing cores are timed sharing them) and a [32, 1024] x [1024, 1024] one
    (few_rows_flops_per_s: the rate of a small batch's slice), an elementwise Add over
    `stream_mb` MB written in place (memory_bytes_per_s), and all-reduces of 1 KB to 4 MB over all
    ranks (latency_s and link_bytes_per_s of the ring model, and the rate of large messages where it
    differs: large_message_bytes, large_link_bytes_per_s), and tiny graphs of 1 and 8 kernels (run_s,
    kernel_s: the fixed costs of a run and of each kernel, Python's call included); on several ranks,
    sharded plans of 1 and 4 collectives through the runner (collective_s, and run_s as the runner
    pays it). Each figure is the slowest rank's best
    of `reps`. Returns the cost dict ``shard(..., strategy="auto", cost=...)`` and
    ``Plan.estimate(**cost)`` take."""
    from .. import graph as _g
    rng = _np.random.default_rng(0)

    def matmul_time(rows, k):
        """A [rows, k] x [k, k] product's time, every rank running it at once."""
        b = _g.Builder()
        mm = _g.compile(b.build(b.op("MatMul", b.input("a", (rows, k)), b.constant("w", rng.standard_normal((k, k)).astype("float32")))))
        av = rng.standard_normal((rows, k)).astype("float32")
        return _time_together(lambda: mm(av), reps)

    t_mm = matmul_time(gemm, gemm)
    few, wide = 32, 1024  # few rows (a data-parallel rank's slice of a small batch) against a large weight
    t_few = matmul_time(few, wide)
    n = stream_mb * (1 << 20) // 12
    b = _g.Builder()
    x, y = b.input("x", (n,)), b.input("y", (n,))
    add = _g.compile(b.build(b.op("Add", x, y)))
    xv, yv = _np.ones(n, "float32"), _np.zeros(n, "float32")
    # The sum goes into x's own array (donated), as a step's intermediates go into its planned arena:
    # a fresh output array would time the kernel's first touch of new pages, not its streaming.
    t_add = _time_together(lambda: add.run([xv, yv], donate=[0]), reps)
    # Fixed costs: a run of one tiny kernel, and what each further (unfusable) kernel adds.
    b = _g.Builder()
    h = t0 = b.input("t", (4, 4))
    eye = b.constant("i", _np.eye(4, dtype="float32"))
    for _ in range(8):
        h = b.op("MatMul", h, eye)
    tiny1 = _g.compile(b.build(b.op("MatMul", t0, eye)))
    tiny8 = _g.compile(b.build(h))
    tv = _np.ones((4, 4), "float32")
    t_run = _best_time(lambda: tiny1(tv), reps * 10)
    t_kernel = max((_best_time(lambda: tiny8(tv), reps * 10) - t_run) / 7, 0.0)
    ranks = size()
    # All-reduces of 1 KB to 4 MB, each in its own array as a step's are in its planned buffers
    # (all_reduce's copies in and out would time fresh pages: 4 MB took 33 ms so, 1.5 ms in place).
    # MPI may send large messages by another protocol than small ones, at another rate.
    sizes = [1 << 10, 1 << 16, 1 << 18, 1 << 20, 1 << 22]
    t_ar = [0.0] * len(sizes)
    if ranks > 1:
        for k, nbytes in enumerate(sizes):
            a = _np.zeros(nbytes // 4, "float32")
            for _ in range(3):  # together first, past the kernels above
                barrier()
                _d.all_reduce_in_place(a)
            t_ar[k] = _best_time(lambda: _d.all_reduce_in_place(a), max(reps, 10))
    # The slowest rank sets the pace of a synchronous step.
    times = _np.array([t_mm, t_few, t_add, t_run, t_kernel] + t_ar, "float64")
    worst = all_gather(times).max(axis=0) if ranks > 1 else times
    t_mm, t_few, t_add, t_run, t_kernel = (float(v) for v in worst[:5])
    t_ar = [float(v) for v in worst[5:]]
    flops = 2.0 * gemm ** 3 / t_mm
    cost = {"flops_per_s": flops, "few_rows_flops_per_s": min(2.0 * few * wide * wide / t_few, flops), "few_rows": float(few),
            "many_rows": float(gemm), "memory_bytes_per_s": 3 * 4 * n / t_add, "kernel_s": t_kernel, "run_s": max(t_run - t_kernel, 0.0)}
    if ranks > 1:
        cost.update(_link_rates(ranks, sizes, t_ar))
        cost.update(_calibrate_runner(ranks, reps, cost))
    return cost


def _link_rates(ranks, sizes, times):
    """The ring model's rates from all-reduce times of `sizes` bytes: latency and bandwidth from the
    two smallest; the sizes up to the last one that model predicts within 2x move at that rate, and
    beyond, at the rate of the largest (large_message_bytes, large_link_bytes_per_s)."""
    share = 2.0 * (ranks - 1) / ranks  # a ring all-reduce: 2(n-1) steps, 2(n-1)/n of the bytes sent
    bandwidth = share * (sizes[1] - sizes[0]) / max(times[1] - times[0], 1e-9)
    latency = max((times[0] - share * sizes[0] / bandwidth) / (2 * (ranks - 1)), 0.0)
    out = {"link_bytes_per_s": bandwidth, "latency_s": latency}
    model = lambda b: share * b / bandwidth + 2 * (ranks - 1) * latency
    fits = [b for b, t in zip(sizes, times) if t <= 2 * model(b)]
    if times[-1] > 2 * model(sizes[-1]):
        out["large_message_bytes"] = float(max([b for b in fits if b < sizes[-1]] or [sizes[1]]))
        out["large_link_bytes_per_s"] = share * sizes[-1] / max(times[-1] - 2 * (ranks - 1) * latency, 1e-9)
    return out


def _calibrate_runner(ranks, reps, cost):
    """The runner's fixed costs: plans of 1 and 4 tiny row-split matmuls (one all-reduce each) run
    through Plan.compile(); the slope is each collective's cost beyond the ring model, the rest the run's."""
    from .. import graph as _g
    mesh = Mesh(("c", ranks))
    times = []
    for k in (1, 4):
        b = _g.Builder()
        h = b.input("x", (4, 4 * ranks))
        for i in range(k):
            h = b.op("MatMul", h, b.constant(f"w{i}", _np.eye(4 * ranks, dtype="float32")))
        model = b.build(h)
        runner = shard(model, mesh, specs={f"w{i}": "S(c) R" for i in range(k)}).compile()
        xv = _np.ones((4, 4 * ranks), "float32")
        barrier()
        times.append(_best_time(lambda: runner(xv), reps * 10))
    t1, t4 = (float(v) for v in all_gather(_np.array(times, "float64")).max(axis=0))
    ring = 2 * (ranks - 1) * cost["latency_s"]
    per = max((t4 - t1) / 3 - ring - cost["kernel_s"], 0.0)
    return {"collective_s": per, "run_s": max(t1 - per - ring - cost["kernel_s"], cost["run_s"])}


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
    the machine the estimate assumes (flops_per_s, memory_bytes_per_s, link_bytes_per_s, latency_s).
    ``print(plan.report)`` shows the choice beside the named strategies.
    """
    from ..graph import Graph
    if not isinstance(model, Graph):
        raise KilnError(f"kiln.dist.shard takes a kiln.graph.Graph, got a {type(model).__name__}")
    if strategy == "auto":
        if specs:
            raise KilnError("strategy='auto' chooses every spec itself; give specs=... without a strategy instead")
        cost = {k: float(v) for k, v in (cost or {}).items()}
        chosen, sharded, _, baselines, report = _d.auto_shard(model, mesh, int(memory_limit or 0), cost, int(max_plans),
                                                             bool(keep_outputs_sharded))
        return Plan(sharded, model, chosen, report, baselines)
    given = _strategy_specs(model, mesh, strategy) if strategy else {}
    given.update({str(k): _spec_text(v) for k, v in (specs or {}).items()})
    return Plan(_d.shard_graph(model, mesh, given, bool(keep_outputs_sharded)), model, given)


def train(model, mesh, axis=None, bucket_mb=None, strategy="data", **train_options):
    """``kiln.train.compile(model, **train_options)`` made data parallel over `mesh` (see data_parallel),
    or with strategy="tensor" tensor parallel (see tensor_parallel)."""
    from .. import train as _train
    step = _train.compile(model, **train_options)
    if strategy == "tensor":
        return tensor_parallel(step, mesh, axis)
    if strategy != "data":
        raise KilnError(f"kiln.dist.train: strategy must be 'data' or 'tensor', got {strategy!r} "
                        "(pipelines: kiln.dist.pipeline_train)")
    return data_parallel(step, mesh, axis, bucket_mb)


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


def _shard_step(step, plan, bucket_mb):
    step._exe = plan.compile(bucket_mb=bucket_mb)
    step.runner = step._exe  # its stats() say where each step's time went
    # Every rank starts from rank 0's parameters and buffers (as DDP does), whatever each initialised.
    for table in (step.parameters, step.buffers):
        for name in list(table):
            table[name] = broadcast(table[name], 0)
    step.plan = plan


def data_parallel(step, mesh, axis=None, bucket_mb=None):
    """Makes a kiln.train step data parallel over `mesh`: each rank takes its block of the batch,
    the step's graph is sharded (gradients come out as partial sums and are all-reduced before the
    optimizer; the loss is the mean over the whole batch, so their sum is the average gradient),
    parameters start as rank 0's, so every rank holds the same parameters after every step and the
    loss is the full batch's. Call it on every rank; then call the step with the full batch as before.
    bucket_mb: overlap the gradient all-reduces with the backward pass in buckets of that many MiB (see Plan.compile)."""
    axes = [n for n, _ in mesh.axes]
    axis = axis or ("data" if "data" in axes else axes[0])
    g = step.graph
    n_batch = step._n_data + (1 if step._has_target else 0)
    given = {}
    for name, t in list(zip(g.input_names, g.input_types))[:n_batch]:
        given[name] = " ".join([f"S({axis})"] + ["R"] * (len(t[0]) - 1))
    _shard_step(step, Plan(_d.shard_graph(g, mesh, given, False), g, given), bucket_mb)
    return step
