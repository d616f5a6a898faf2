"""Plans for clusters this machine cannot hold: ``kiln.dist.plan(graph, cluster)``.

A Cluster describes hosts x devices per host, each device's FLOP rate and memory, and the two
levels of links (inside a host: NVLink; between hosts: the network). The plan searches meshes
("data", D) x ("model", M), M dividing the devices of a host (tensor parallel inside a host, where
the links are fast; data parallel across), and for each the auto-sharding search (kiln.dist.shard's
strategy="auto") with each axis costed at its own level's rate and latency; weights may also split
over both axes at once (fully sharded). It returns the fastest plan whose memory fits a device.

A deep model's repeated layers share one decision (weights whose names differ only in numbers), and
with `proxy` (the same model with fewer layers) the search scores plans on the proxy and only the
chosen plan (and the named strategies) on the whole graph: a 175B model's step graph takes 0.4 s
to shard, too slow to score hundreds of plans in a minute.

Given a model (kiln.dist.GPT: a step graph of any number of layers and sequences) rather than a graph, the
search also places pipeline stages (dividing the layers), the microbatch, activation recomputation and
optimizer state sharding, in bfloat16 with float32 master weights or in float32 (step_costs.py has the
costs): for each mesh (tensor parallel inside a host x data parallel) two shardings (Megatron's tensor
parallel and the auto-sharding search's fastest), each costed once and composed for every schedule.
"""
import time as _time
from dataclasses import dataclass

from .._ffi import KilnError, _kiln
from .sharded_plan import Mesh, Plan
from .step_costs import Parts, Schedule, model_flops, step_cost, transfer_specs

_d = _kiln.dist


@dataclass
class Cluster:
    hosts: int
    devices_per_host: int
    flops_per_s: float          # a device's peak (dense) FLOP rate
    memory_bytes: float         # a device's memory
    intra_bytes_per_s: float    # one device's link bandwidth inside a host, per direction
    intra_latency_s: float
    inter_bytes_per_s: float    # one device's share of the network between hosts, per direction
    inter_latency_s: float
    memory_bytes_per_s: float = 3.35e12
    gemm_efficiency: float = 0.75  # sustained / peak for large matrix products

    @property
    def devices(self):
        return self.hosts * self.devices_per_host

    @staticmethod
    def h100(devices):
        """`devices` H100 SXM (989 TFLOP/s dense bfloat16, 80 GB, HBM3 3.35 TB/s) in hosts of 8 joined
        by NVLink 4 (450 GB/s per direction) and one 400 Gb/s InfiniBand NIC per GPU (50 GB/s).
        Latencies are assumptions (a collective step: 5 us over NVLink, 10 us over the network)."""
        if devices % 8 and devices > 8:
            raise KilnError(f"Cluster.h100 makes hosts of 8 GPUs; {devices} is not a multiple of 8")
        return Cluster(hosts=max(1, devices // 8), devices_per_host=min(devices, 8), flops_per_s=989e12, memory_bytes=80e9,
                       intra_bytes_per_s=450e9, intra_latency_s=5e-6, inter_bytes_per_s=50e9, inter_latency_s=10e-6)

    @staticmethod
    def a100(devices):
        """`devices` A100 SXM 80 GB (312 TFLOP/s dense bfloat16, HBM2e 2.0 TB/s) in hosts of 8 joined by NVLink 3
        (300 GB/s per direction) and one 200 Gb/s HDR InfiniBand NIC per GPU (25 GB/s): the DGX A100 nodes of
        Selene, where Megatron-LM measured (Narayanan et al. 2021). Latencies as h100's."""
        if devices % 8 and devices > 8:
            raise KilnError(f"Cluster.a100 makes hosts of 8 GPUs; {devices} is not a multiple of 8")
        return Cluster(hosts=max(1, devices // 8), devices_per_host=min(devices, 8), flops_per_s=312e12, memory_bytes=80e9,
                       intra_bytes_per_s=300e9, intra_latency_s=5e-6, inter_bytes_per_s=25e9, inter_latency_s=10e-6,
                       memory_bytes_per_s=2.0e12)

    def meshes(self):
        """(data, model) with model dividing a host's devices."""
        return [(self.devices // m, m) for m in range(1, self.devices_per_host + 1) if self.devices_per_host % m == 0]

    def cost(self, data, model, data_inside=None):
        """The estimate's machine for the mesh (data, model): each axis at its level's link (the data axis over the
        network where there are hosts, unless `data_inside` says its groups lie inside one)."""
        inside = self.hosts == 1 if data_inside is None else data_inside
        data_link = (self.intra_bytes_per_s, self.intra_latency_s) if inside else (self.inter_bytes_per_s, self.inter_latency_s)
        c = {"flops_per_s": self.flops_per_s * self.gemm_efficiency, "memory_bytes_per_s": self.memory_bytes_per_s,
             "kernel_s": 0.0, "run_s": 0.0, "collective_s": 0.0,  # a GPU's launches run ahead of its kernels
             "link_bytes_per_s": data_link[0], "latency_s": data_link[1],
             "link_bytes_per_s:data": data_link[0], "latency_s:data": data_link[1],
             "link_bytes_per_s:model": self.intra_bytes_per_s, "latency_s:model": self.intra_latency_s}
        return c


def _flops(graph):
    """The graph's FLOPs on one device (the estimate's compute at one FLOP/s, memory-bound ops free)."""
    sg = _d.shard_graph(graph, Mesh(("one", 1)), {}, False)
    return _d.estimate_plan(sg, {"flops_per_s": 1.0, "memory_bytes_per_s": 1e30, "kernel_s": 0.0, "run_s": 0.0})["compute_s"]


class ClusterPlan:
    """What kiln.dist.plan chose: mesh, specs, estimate (one step), memory per device, share of peak."""

    def __init__(self, cluster, mesh, plan, estimate, flops, fits, candidates, seconds):
        self.cluster, self.mesh, self.plan, self.estimate, self.flops = cluster, mesh, plan, estimate, flops
        self.fits, self.candidates, self.plan_seconds = fits, candidates, seconds
        self.step_s = estimate["total_s"]
        self.memory_bytes = estimate["memory_bytes"]
        self.peak_share = flops / (self.step_s * cluster.devices * cluster.flops_per_s)

    def __str__(self):
        d, m = self.mesh
        return (f"mesh data {d} x model {m}: step {self.step_s * 1e3:.1f} ms, {self.memory_bytes / 1e9:.1f} GB per device"
                f"{'' if self.fits else ' (over the device memory)'}, {100 * self.peak_share:.1f}% of peak FLOP/s")


def plan(graph, cluster, proxy=None, max_plans=64, precision="bf16", **only):
    """The plan for `graph` (a training step) on `cluster` (see the module comment). Returns a ClusterPlan;
    ``.candidates`` holds each mesh's (mesh, estimate, fits). `graph` a model (kiln.dist.GPT): a ModelPlan, with
    pipeline stages, microbatches, recomputation and optimizer sharding in the search, in `precision`; `only`:
    plan_model's tensor=, pipeline= and recompute=, to hold those fixed."""
    if hasattr(graph, "layers") and hasattr(graph, "graph"):
        return plan_model(graph, cluster, precision=precision, max_plans=max_plans, **only)
    start = _time.perf_counter()
    flops = _flops(graph)
    search_graph = proxy or graph
    scale = 1.0
    if proxy is not None:  # the proxy's share of the memory: its bytes of inputs against the graph's
        nb = lambda g: sum(_prod(s) * 4 for s, _ in g.input_types)
        scale = nb(proxy) / nb(graph)
    best, candidates = None, []
    for data, model in cluster.meshes():
        mesh = Mesh(("data", data), ("model", model))
        cost = cluster.cost(data, model)
        try:
            chosen, *_ = _d.auto_shard(search_graph, mesh, int(cluster.memory_bytes * scale), cost, max_plans, False, True, True)
        except KilnError:  # no plan fits: the fastest is reported, marked over the memory
            chosen, *_ = _d.auto_shard(search_graph, mesh, 0, cost, max_plans, False, True, True)
        specs = transfer_specs(chosen, graph) if proxy is not None else dict(chosen)
        sharded = _d.shard_graph(graph, mesh, specs, False)
        est = _d.estimate_plan(sharded, cost)
        fits = est["memory_bytes"] <= cluster.memory_bytes
        candidates.append(((data, model), est, fits))
        key = (not fits, est["total_s"] if fits else est["memory_bytes"])
        if best is None or key < best[0]:
            best = (key, (data, model), Plan(sharded, graph, specs), est, fits)
    _, mesh, p, est, fits = best
    return ClusterPlan(cluster, mesh, p, est, flops, fits, candidates, _time.perf_counter() - start)


def _prod(shape):
    out = 1
    for s in shape:
        out *= int(s)
    return out


class ModelPlan:
    """What kiln.dist.plan chose for a model: the schedule (step_costs.Schedule), its sharding (specs), step time,
    memory per device, share of the peak FLOP rate; ``.candidates``: every (schedule, step_s, memory, fits)."""

    def __init__(self, cluster, model, precision, best, candidates, flops, seconds):
        self.cluster, self.model, self.precision, self.candidates, self.flops, self.plan_seconds = (
            cluster, model, precision, candidates, flops, seconds)
        self.schedule, self.step_s, self.memory_bytes, self.fits, self.specs, self.parts_s = best
        self.mesh = (self.schedule.data, self.schedule.model)
        self.peak_share = flops / (self.step_s * cluster.devices * cluster.flops_per_s)

    def __str__(self):
        return (f"{self.schedule}: step {self.step_s:.3f} s, {self.memory_bytes / 1e9:.1f} GB per device"
                f"{'' if self.fits else ' (over the device memory)'}, {100 * self.peak_share:.1f}% of peak FLOP/s")


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _shardings(model, mesh, cost, max_plans):
    """Megatron's tensor parallel over "model" (where it has ranks) and the search's fastest plan, on one layer."""
    data, tp = dict(mesh.axes)["data"], dict(mesh.axes)["model"]
    g = model.graph(layers=1, batch=data)
    batch = {"x": "S(data) R R", "labels": "S(data)"}
    out = []
    if tp > 1:
        out.append(dict(_d.megatron_specs(g, mesh, "model"), **batch))
    fastest, *_ = _d.auto_shard(g, mesh, 0, cost, max_plans, True, True, False)
    out.append(dict(fastest))
    if tp == 1 and data == 1:
        out = [{}]
    return [p for p in (Parts(model, mesh, specs, cost) for specs in out) if p.linear]


def plan_model(model, cluster, precision="bf16", max_plans=64, tensor=None, pipeline=None, recompute=None):
    """kiln.dist.plan for a model (see the module comment): the fastest schedule that fits a device; `tensor`,
    `pipeline`, `recompute`: only schedules of that many tensor-parallel ranks, pipeline stages, with or without
    recomputation (to cost a published schedule)."""
    if precision not in ("bf16", "fp32"):
        raise KilnError(f"plan: precision must be 'bf16' (bfloat16 with float32 master weights) or 'fp32', got {precision!r}")
    start = _time.perf_counter()
    shardings, candidates, best = {}, [], None
    for tp in [m for m in _divisors(cluster.devices_per_host) if cluster.devices % m == 0 and tensor in (None, m)]:
        for pp in [p for p in _divisors(model.layers) if cluster.devices % (tp * p) == 0 and pipeline in (None, p)]:
            dp = cluster.devices // (tp * pp)
            if model.batch % dp:
                continue
            for data_outer in ((False, True) if pp > 1 and dp > 1 else (False,)):
                inside = (dp * tp if not data_outer else dp * tp * pp) <= cluster.devices_per_host
                key = (dp, tp, inside)
                if key not in shardings:
                    mesh = Mesh(("data", dp), ("model", tp))
                    shardings[key] = _shardings(model, mesh, cluster.cost(dp, tp, data_inside=inside), max_plans)
                for parts in shardings[key]:
                    for n in _divisors(model.batch // dp):
                        for rc in ((False, True) if recompute is None else (recompute,)):
                            for zero in ((False, True) if dp > 1 else (False,)):
                                s = Schedule(dp, tp, pp, n, rc, zero, data_outer)
                                step, memory, detail = step_cost(model, cluster, parts, s, precision)
                                fits = memory <= cluster.memory_bytes
                                candidates.append((s, step, memory, fits))
                                key_ = (not fits, step if fits else memory)
                                if best is None or key_ < best[0]:
                                    best = (key_, (s, step, memory, fits, parts.specs, detail))
    if best is None:
        raise KilnError(f"plan: no schedule of {model} on {cluster.devices} devices: the batch ({model.batch}) must "
                        f"divide over the data-parallel ranks; give a batch that a power of two divides")
    return ModelPlan(cluster, model, precision, best[1], candidates, model_flops(model), _time.perf_counter() - start)
