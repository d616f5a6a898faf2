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
to shard, too slow to score hundreds of plans in a minute. Pipeline parallelism, activation
recomputation and 16-bit training are not in the search (see kiln/dist/gpt.py's note).
"""
import re as _re
import time as _time
from dataclasses import dataclass

from .._ffi import KilnError, _kiln
from .sharded_plan import Mesh, Plan

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

    def meshes(self):
        """(data, model) with model dividing a host's devices."""
        return [(self.devices // m, m) for m in range(1, self.devices_per_host + 1) if self.devices_per_host % m == 0]

    def cost(self, data, model):
        """The estimate's machine for the mesh (data, model): each axis at its level's link."""
        data_link = (self.inter_bytes_per_s, self.inter_latency_s) if self.hosts > 1 else (self.intra_bytes_per_s, self.intra_latency_s)
        c = {"flops_per_s": self.flops_per_s * self.gemm_efficiency, "memory_bytes_per_s": self.memory_bytes_per_s,
             "link_bytes_per_s": data_link[0], "latency_s": data_link[1],
             "link_bytes_per_s:data": data_link[0], "latency_s:data": data_link[1],
             "link_bytes_per_s:model": self.intra_bytes_per_s, "latency_s:model": self.intra_latency_s}
        return c


def _flops(graph):
    """The graph's FLOPs on one device (the estimate's compute at one FLOP/s, memory-bound ops free)."""
    sg = _d.shard_graph(graph, Mesh(("one", 1)), {}, False)
    return _d.estimate_plan(sg, {"flops_per_s": 1.0, "memory_bytes_per_s": 1e30, "kernel_s": 0.0, "run_s": 0.0})["compute_s"]


def _pattern(name):
    return _re.sub(r"\d+", "#", name)


def _transfer(specs, graph):
    """Specs chosen on a proxy, for every value of `graph` with the same layer pattern."""
    by_pattern = {_pattern(n): s for n, s in specs.items()}
    return {n: by_pattern[_pattern(n)] for n in graph.input_names if _pattern(n) in by_pattern}


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


def plan(graph, cluster, proxy=None, max_plans=64):
    """The plan for `graph` (a training step) on `cluster` (see the module comment). Returns a ClusterPlan;
    ``.candidates`` holds each mesh's (mesh, estimate, fits)."""
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
        specs = _transfer(chosen, graph) if proxy is not None else dict(chosen)
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
