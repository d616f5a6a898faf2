"""The cost of a model's training step scheduled on a cluster (kiln.dist.plan with a GPT): tensor parallel (the
mesh's "model" axis, inside a host), data parallel ("data"), pipeline stages, microbatches, activation
recomputation, 16-bit training and optimizer state sharding.

The graph estimate (kiln.dist's estimate_plan) is taken of the step graphs of 1 and 2 layers over 16 and 32
sequences per data-parallel rank, each split three ways (matrix products alone, with the memory-bound ops,
with the collectives over "data" made free), and fitted as a + b L + c n + d L n: what one layer costs per
sequence (d), what the head costs per sequence (c), and what they cost once per step (b, a: the optimizer,
the gradients' all-reduce over "data"). The estimate is linear in both, so the fit is exact (the tests check it
against the stage graphs themselves); a sharding whose 3-layer graph the fit misses is not costed (Parts.linear). The schedule is then composed from the parts:

  step     = (microbatches + stages - 1) x (the slowest stage's forward and backward of one microbatch
             + its activations sent to the next stage and their gradients back)       (1F1B, Narayanan et al.)
           + the slowest stage's optimizer update and its gradients' all-reduce over "data"
  memory   = the state of a stage's parameters + the activations its microbatches in flight hold
             (the first stage holds `stages` of them, the last one, whose head holds the logits)

Assumptions (each a parameter of the estimate, not measured here): recomputation runs each layer's forward
again (1/3 of its forward-and-backward time: exact for the products, whose backward takes two products per
forward one) and keeps each layer's input (sequences x seq x hidden, in full on each tensor-parallel rank);
bfloat16 ("bf16") halves the bytes of activations, of the memory-bound ops on them and of every collective
(gradients are all-reduced in bfloat16), and keeps float32 master weights and Adam state: 16 bytes per
parameter (2 weight, 2 gradient, 12 master and Adam), as ZeRO (Rajbhandari et al. 2020) counts them; with
`zero` the 12 are split over "data" and each rank updates its share (a reduce-scatter and an all-gather
move the bytes of the all-reduce). float32 holds 4 + 4 + 8. No overlap of communication with compute.
"""
import re
from dataclasses import dataclass

from .._ffi import KilnError, _kiln
from .sharded_plan import Mesh

_d = _kiln.dist
_INF = 1e30
_KEYS = ("mm", "mb", "cm", "cd", "act")  # products, memory-bound ops, collectives over "model", over "data", live bytes


@dataclass(frozen=True)
class Schedule:
    data: int
    model: int
    pipeline: int
    microbatch: int       # sequences per data-parallel rank in one microbatch
    recompute: bool
    zero: bool
    data_outer: bool = False  # ranks ordered (data, pipeline, model) rather than (pipeline, data, model)

    def microbatches(self, batch):
        return batch // (self.data * self.microbatch)

    def __str__(self):
        extras = [w for w, on in (("recompute", self.recompute), ("ZeRO-1", self.zero)) if on]
        return (f"TP {self.model} x PP {self.pipeline} x DP {self.data}, microbatch {self.microbatch}"
                + "".join(", " + e for e in extras))


# The fit's sequences per rank: many, so that the activations, not the gradients and new weights made at the end of
# the step, hold the graph's peak of live bytes (at the turn from forward to backward), which is linear in both.
_N = (16, 32)


def _bilinear(pts, n1=_N[0], n2=_N[1]):
    """a, b, c, d of a + b L + c n + d L n through f(L, n) at L in {1, 2}, n in {n1, n2}."""
    d = (pts[2, n2] - pts[2, n1] - pts[1, n2] + pts[1, n1]) / (n2 - n1)
    c = (pts[1, n2] - pts[1, n1]) / (n2 - n1) - d
    b = pts[2, n1] - pts[1, n1] - d * n1
    return pts[1, n1] - b - c * n1 - d * n1, b, c, d


def _local_elements(sg, names):
    blocks = dict(zip(sg.graph.input_names, sg.input_blocks(0)))
    out = 0
    for n in names:
        e = 1
        for _, size in blocks[n]:
            e *= size
        out += e
    return out


def transfer_specs(specs, graph):
    """Specs chosen on a proxy graph, for every input of `graph` with the same layer pattern (digits as #)."""
    def pattern(name):
        return re.sub(r"\d+", "#", name)
    by_pattern = {pattern(n): s for n, s in specs.items()}
    return {n: by_pattern[pattern(n)] for n in graph.input_names if pattern(n) in by_pattern}


class Parts:
    """One (data, model) mesh under one sharding (`specs`, tied over the layers): the fitted costs per rank."""

    def __init__(self, model, mesh, specs, cost):
        self.specs, self.mesh = specs, mesh
        data = dict(mesh.axes)["data"]
        fits = {k: {} for k in _KEYS}
        free_data = dict(cost, **{"link_bytes_per_s:data": _INF, "latency_s:data": 0.0})
        no_memory = dict(cost, memory_bytes_per_s=_INF)
        for layers, n in [(1, _N[0]), (1, _N[1]), (2, _N[0]), (2, _N[1]), (3, _N[0])]:  # the last checks the fit
            g = model.graph(layers=layers, batch=data * n)
            sg = _d.shard_graph(g, mesh, transfer_specs(specs, g), True)  # weights and state stay sharded between steps
            e, e_nm, e_fd = (_d.estimate_plan(sg, c) for c in (cost, no_memory, free_data))
            held = sum(_local_elements(sg, [i]) * (8 if i == "labels" else 4) for i in g.input_names)
            point = {"mm": e_nm["compute_s"], "mb": e["compute_s"] - e_nm["compute_s"], "cm": e_fd["comm_s"],
                     "cd": e["comm_s"] - e_fd["comm_s"], "act": e["memory_bytes"] - held}
            for k in _KEYS:
                fits[k][layers, n] = point[k]
            if layers == 1 and n == _N[0]:
                self.layer_params = _local_elements(sg, [w for w in g.input_names if w.startswith("h0.") and w.count(".") == 1])
                self.head_params = _local_elements(sg, ["head"])
                self.weights_over_data = any("data" in specs.get(w, "") for w in g.input_names if w.startswith(("h0.", "head")))
        for k in _KEYS:
            setattr(self, k, _bilinear(fits[k]))
        self.linear = fit_holds({k: getattr(self, k) for k in _TIMES}, {k: fits[k][3, _N[0]] for k in _TIMES})


_TIMES = ("mm", "mb", "cm", "cd")


def fit_holds(coeffs, at3):
    """Whether the fitted time parts (name -> (a, b, c, d)) cost a sharding: they must meet its 3-layer graph's
    estimate (`at3`: name -> seconds at 3 layers, _N[0] sequences; a sharding whose propagation differs with the
    depth misses it) and no part step_cost adds may cost less than nothing (a fit that extrapolates to fewer
    sequences than it saw: per sequence (c, d), once a step (a, b of mb, cd), a microbatch of one (cm))."""
    scale = sum(abs(v) for v in at3.values())
    used = []
    for k, (a, b, c, d) in coeffs.items():
        if abs(a + 3 * b + _N[0] * c + 3 * _N[0] * d - at3[k]) > 1e-6 * scale:
            return False
        used += [c, d] + ([a + c, b + d] if k == "cm" else [a, b] if k in ("mb", "cd") else [])
    return min(used) >= -1e-3 * scale


def step_cost(model, cluster, parts, s, precision="bf16"):
    """(seconds, bytes per device, what each part took) of `model`'s step on `cluster` under schedule `s` with
    the mesh's fitted `parts` (see the module comment)."""
    if precision not in ("bf16", "fp32"):
        raise KilnError(f"precision must be 'bf16' (bfloat16 with float32 master weights) or 'fp32', got {precision!r}")
    f = 0.5 if precision == "bf16" else 1.0     # bytes of activations and collectives against float32
    act_bytes = 2 if precision == "bf16" else 4
    P, n, D, M = s.pipeline, s.microbatch, s.data, s.model
    m = s.microbatches(model.batch)
    Ls = model.layers // P
    mm, mb, cm, cd, act = parts.mm, parts.mb, parts.cm, parts.cd, parts.act
    # One microbatch's forward and backward (index 3: per layer and sequence; 2: the head's per sequence;
    # collectives' latency (model axis, index 1 and 0) once per microbatch).
    layer = n * (mm[3] + f * (mb[3] + cm[3] + cd[3])) * (4 / 3 if s.recompute else 1) + cm[1]
    head = n * (mm[2] + f * (mb[2] + cm[2] + cd[2])) + cm[0]
    send = 0.0
    if P > 1:
        same_host = (M * P if s.data_outer else D * M * P) <= cluster.devices_per_host
        bw, lat = (cluster.intra_bytes_per_s, cluster.intra_latency_s) if same_host else (cluster.inter_bytes_per_s, cluster.inter_latency_s)
        send = 2 * (lat + n * model.seq * model.hidden * act_bytes / M / bw)
    stage = Ls * layer + head + send  # the last stage (it holds the head) is the slowest
    zero = D if (s.zero and not parts.weights_over_data) else 1
    once = (Ls * mb[1] + mb[0]) / zero
    if parts.weights_over_data:  # weights split over "data" are gathered for each microbatch (ZeRO-3's way)
        stage += f * (Ls * cd[1] + cd[0])
    else:                        # the gradients' all-reduce, once a step
        once += f * (Ls * cd[1] + cd[0])
    step = (m + P - 1) * stage + once
    # Memory: state, then the activations in flight.
    per_param = (4 + 12 / zero) if precision == "bf16" else (8 + 8 / zero)
    state_first, state_last = Ls * parts.layer_params * per_param, (Ls * parts.layer_params + parts.head_params) * per_param
    layer_act = act[3] * n * f
    held = Ls * n * model.seq * model.hidden * act_bytes + layer_act if s.recompute else Ls * layer_act
    gathered = parts.layer_params * D * act_bytes if parts.weights_over_data else 0  # a layer's weights in full while it runs
    if P == 1:
        memory = state_last + held + act[2] * n * f
    else:
        memory = max(state_first + min(P, m) * held, state_last + held + act[2] * n * f)
    memory += gathered
    return step, memory, {"stage_s": stage, "once_s": once, "bubble_s": (P - 1) * stage, "send_s": send * (m + P - 1)}


def model_flops(model):
    """FLOPs of one step (the products of the forward and backward; no recomputation), from the graph."""
    pts = {}
    for layers in (1, 2):
        for n in _N:
            sg = _d.shard_graph(model.graph(layers=layers, batch=n), Mesh(("one", 1)), {}, False)
            pts[layers, n] = _d.estimate_plan(sg, {"flops_per_s": 1.0, "memory_bytes_per_s": _INF, "kernel_s": 0.0,
                                                   "run_s": 0.0})["compute_s"]
    a, b, c, d = _bilinear(pts)
    return model.batch * (model.layers * d + c) + model.layers * b + a
