"""The levels of a run's ranks (hosts x ranks per host) and each level's link, as calibrate() measures
them: inside a host the ranks talk through shared memory, across hosts over the network, at rates
that can differ by an order of magnitude. A mesh axis whose ranks all sit on one host is costed at
the host's link, any other at the network's (a ring that crosses hosts goes at its slowest hop)."""
import hashlib as _hashlib
import os as _os
import socket as _socket
from dataclasses import dataclass

import numpy as _np

from .._ffi import KilnError, _kiln

_d = _kiln.dist


@dataclass
class Level:
    """One level of the machine: `name` ("host": ranks of one host; "net": across hosts), the ranks in
    one group of it, and its link as the ring model takes it (bytes/s per rank, seconds per step)."""
    name: str
    ranks: int
    link_bytes_per_s: float
    latency_s: float


def host_key():
    """What tells this rank's host from another's: the host name and the network namespace (the test
    bed's "hosts" share one kernel and name, each with a network of its own)."""
    try:
        ns = str(_os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        ns = ""
    digest = _hashlib.sha1(f"{_socket.gethostname()}/{ns}".encode()).digest()
    return int.from_bytes(digest[:7], "little")  # fits an int64


def host_of_ranks(keys):
    """Each rank's host index (hosts numbered in order of their first rank) from every rank's host_key."""
    index = {}
    return [index.setdefault(int(k), len(index)) for k in keys]


class Calibration(dict):
    """calibrate()'s cost dict (every key a rate or a time, as shard(cost=...) and Plan.estimate(**cost)
    take it), plus the run's `levels` and `hosts` (each rank's host index). for_mesh(mesh) gives the
    cost with each mesh axis at its level's link: the one to give a mesh that spans levels."""

    def __init__(self, cost, levels=(), hosts=()):
        super().__init__(cost)
        self.levels = list(levels)
        self.hosts = list(hosts)

    def level(self, name):
        return next((lv for lv in self.levels if lv.name == name), None)

    def axis_level(self, mesh, axis):
        """The level whose link an all-reduce over `axis` of `mesh` runs on: "host" when every group of
        ranks along it sits on one host, else "net"."""
        names = [n for n, _ in mesh.axes]
        if axis not in names:
            raise KilnError(f"the mesh {mesh} has no axis '{axis}'; its axes: {names}")
        if len(self.hosts) != mesh.size:
            raise KilnError(f"this calibration is of {len(self.hosts)} ranks, the mesh {mesh} of {mesh.size}; "
                            "calibrate on the ranks that run the plan")
        return "host" if all(len({self.hosts[r] for r in group}) == 1 for group in _axis_groups(mesh, axis)) else "net"

    def for_mesh(self, mesh):
        """The cost dict with link_bytes_per_s:<axis> / latency_s:<axis> for each axis of `mesh`."""
        out = dict(self)
        for axis, _ in mesh.axes:
            lv = self.level(self.axis_level(mesh, axis))
            if lv is not None:
                out[f"link_bytes_per_s:{axis}"], out[f"latency_s:{axis}"] = lv.link_bytes_per_s, lv.latency_s
        return out


def _axis_groups(mesh, axis):
    """The groups of ranks that differ only in their coordinate on `axis` (row-major mesh)."""
    sizes = [s for _, s in mesh.axes]
    a = [n for n, _ in mesh.axes].index(axis)
    stride = int(_np.prod(sizes[a + 1:], dtype=_np.int64))
    groups = []
    for r in range(mesh.size):
        if (r // stride) % sizes[a] == 0:
            groups.append([r + i * stride for i in range(sizes[a])])
    return groups


def fit_level(ranks, sizes, times):
    """The ring model's link from all-reduce times: the latency per step from the smallest size, the
    bandwidth from the largest (what a gradient bucket or an activation moves)."""
    steps, share = 2 * (ranks - 1), 2.0 * (ranks - 1) / ranks
    latency = times[0] / steps
    return {"latency_s": latency, "link_bytes_per_s": share * sizes[-1] / max(times[-1] - steps * latency, 1e-9)}


def measure_levels(hosts, rank, sizes=(4 << 10, 1 << 20, 4 << 20), reps=10, fit=fit_level):
    """Each level's link, timed in its own groups, all groups at once (as a mesh axis's collectives run):
    "host" over each host's ranks (where a host holds several), "net" over the ranks of one local index
    on every host (where there are several hosts). `fit(ranks, sizes, times)` gives the ring model's
    rates; the slowest rank's best time counts. Every rank must call it."""
    from .comm import all_gather, barrier
    world = _d.world()
    local = hosts[:rank].count(hosts[rank])
    per_host = [hosts.count(h) for h in sorted(set(hosts))]
    plans = []
    if max(per_host) > 1:
        plans.append(("host", hosts[rank], max(per_host)))
    if len(set(hosts)) > 1:
        plans.append(("net", local, len(set(hosts))))
    levels = []
    for name, color, ranks in plans:
        group = world.split(color, rank)
        times = []
        for nbytes in sizes:
            a = _np.zeros(nbytes // 4, "float32")
            for _ in range(3):
                barrier()
                group.all_reduce_in_place(a)
            best = float("inf")
            for _ in range(reps):
                barrier()  # every group at once
                t0 = _time_now()
                group.all_reduce_in_place(a)
                best = min(best, _time_now() - t0)
            times.append(best)
        worst = all_gather(_np.array(times, "float64")).max(axis=0)
        rates = fit(ranks, sizes, [float(t) for t in worst]) if group.size > 1 else None
        # Hosts of unequal rank counts: a one-rank group measured nothing; the others' worst stands.
        got = all_gather(_np.array([rates["link_bytes_per_s"], rates["latency_s"]] if rates else [_np.inf, 0.0], "float64"))
        levels.append(Level(name, ranks, float(got[:, 0].min()), float(got[:, 1].max())))
    return levels


def _time_now():
    import time
    return time.perf_counter()
