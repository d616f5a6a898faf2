"""Measuring the machine under the auto-sharding estimate (calibrate): compute, memory and link
rates, and the fixed costs of a run, a kernel and a collective."""
import hashlib as _hashlib
import os as _os
import time as _time

import numpy as _np

from .._ffi import _kiln
from .. import graph as _g
from .comm import all_gather, barrier, rank, size
from .sharded_plan import Mesh, shard
from .topology import Calibration, host_key, host_of_ranks, measure_levels

_d = _kiln.dist


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
    ``Plan.estimate(**cost)`` take, a Calibration (topology.py) that also holds the levels of the
    run: "host" (a host's ranks, through shared memory) and "net" (across hosts), each with its link
    timed in its own groups; ``cost.for_mesh(mesh)`` costs each mesh axis at its level's link."""
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
    hosts = host_of_ranks(all_gather(_np.array([host_key()], "int64")).ravel()) if ranks > 1 else [0]
    levels = measure_levels(hosts, rank(), reps=reps) if ranks > 1 else []
    out = Calibration(cost, levels, hosts)
    if ranks > 1 and _ranks_on_this_machine() > (_os.cpu_count() or 1):  # not the affinity: mpirun binds a rank to one core
        out["peer_wait_s"] = _peer_wait(ranks, reps, out)
    return out


def _ranks_on_this_machine():
    """Ranks whose kernel is this one's (hosts of the test bed, containers: one machine's cores)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return 1
    key = int.from_bytes(_hashlib.sha1(boot.encode()).digest()[:7], "little")
    return int((all_gather(_np.array([key], "int64")).ravel() == key).sum())


def _peer_wait(ranks, reps, calibration):
    """The wait for descheduled peers, per collective, where ranks share cores: a plan of 4 row-split
    matmuls (an all-reduce after each, a rank's compute between them, as in a step) run through the
    runner; the time its ranks spend in the collectives (the runner's collective_seconds, the mean
    over runs and ranks) beyond what the ring model gives them at their level's link. A rank that
    reaches a collective first waits there for the peer the scheduler holds back, which the links'
    rates alone miss (4 ranks on 2 cores ran 1.5-2.2x their estimate)."""
    mesh = Mesh(("c", ranks))
    cost = calibration.for_mesh(mesh)
    rng = _np.random.default_rng(1)
    b = _g.Builder()
    width = 128 * ranks
    h = b.input("x", (64, width))
    for i in range(4):
        h = b.op("MatMul", h, b.constant(f"w{i}", (rng.standard_normal((width, width)) / _np.sqrt(width)).astype("float32")))
    plan = shard(b.build(h), mesh, specs={f"w{i}": "S(c) R" for i in range(4)})
    runner = plan.compile()
    xv = rng.standard_normal((64, width)).astype("float32")
    runner(xv)
    barrier()
    runner.reset_stats()
    runs = reps * 5
    for _ in range(runs):
        runner(xv)
    st = runner.stats()
    mine = st["collective_seconds"] / max(st["runs"], 1) / 4
    modeled = plan.estimate(**cost)["comm_s"] / 4  # per collective: the ring at the link, latency and collective_s
    return max(float(all_gather(_np.array([mine], "float64")).mean()) - modeled, 0.0)


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
