"""Training under a memory budget: activation checkpointing (rematerialisation).

``kiln.train.compile(model, ..., memory_limit=bytes)`` first compiles the plain step (forward,
backward and update in one graph, which keeps every activation the backward pass reads). When
its memory is over the limit, the loss graph is cut into segments balanced by estimated time
(the cut of ``kiln.dist.pipeline``); a step then runs the segments forward keeping only their
boundary values, and backward in reverse order, each segment recomputing its own forward before
differentiating it (Chen et al.'s checkpointing: one extra forward pass in all). More segments
keep fewer activations at once; the fewest segments that fit are chosen, since every
segmentation costs the same one extra forward pass. Losses and parameters are those of the plain
step (the same arithmetic, reassociated at most).

With a loss scale (float16), each segment differentiates loss x scale and the update divides the
summed gradients by it, skipping a step whose gradients are not all finite, as the plain step
does. Batch-norm running statistics are outputs of the loss graph, carried from the segment that
computes them to the last: the first forward's values are kept and the recomputation's are not
read, so the statistics advance once a step.

Memory here is what kiln plans and holds for a step: parameters, optimizer state, the arena of
intermediate values (activations and gradients) of the largest graph a step runs at a time, the
kept boundary values, and the updated parameters and state the step writes.
"""
import numpy as _np

from .._ffi import KilnError, _kiln
from .. import graph as _kg
from . import precision as _prec
from .nodes import Scalars
from .parameters import Parameters, nbytes_of
from .precision import LOSS_SCALE_INPUT
from .segments import backward_graph, bfloat16_grads


def apply_update(update, parameters, grads, states, scalars, step_number, extra_inputs=()):
    """Runs an optimizer update graph (parameters, gradients, optimizer state, the step's scalars and
    `extra_inputs` in; new parameters and state out, then anything else) and stores its results in
    `parameters` and `states`. Returns the outputs after those (a scaled step's all-finite flag)."""
    names = list(parameters)
    ups = update.run([dict.__getitem__(parameters, n) for n in names] + list(grads) +
                     [s for per in states for s in per] + scalars.feed(step_number) + list(extra_inputs))
    for k, n in enumerate(names):
        dict.__setitem__(parameters, n, ups[k])
    at = len(names)
    for per in states:
        per[:] = ups[at: at + len(per)]
        at += len(per)
    return ups[at:]


def update_graph(optimizer, names, values, scaler=None):
    """The optimizer's update of the parameters `names` (arrays `values`) as a graph of its own, for
    steps that differentiate elsewhere: parameters, their gradients (``grad.<name>``), optimizer
    state, the step's scalars and, with a `scaler`, the loss scale in; new parameters and state out.
    Scaled, the gradients are of loss x scale: the update divides them by it, keeps everything as it
    was where they are not all finite, and gives that flag ("finite") last. Returns (graph, scalars)."""
    state_names = optimizer.state_names()
    pv = [_kg.make_input(n, list(v.shape), str(v.dtype)) for n, v in zip(names, values)]
    gv = [_kg.make_input(f"grad.{n}", list(v.shape), str(v.dtype)) for n, v in zip(names, values)]
    sv = [[_kg.make_input(f"{n}.{s}", list(v.shape), str(v.dtype)) for s in state_names] for n, v in zip(names, values)]
    scalars = Scalars(str(values[0].dtype))
    grads, finite, scale = gv, None, []
    if scaler is not None:
        scale = [_kg.make_input(LOSS_SCALE_INPUT, [], str(values[0].dtype))]
        grads, finite = _prec.unscaled(gv, pv, names, scale[0])
    new_p, new_s = optimizer.build(pv, grads, sv, scalars)  # it adds the scalars it reads (lr, ...)
    if finite is not None:
        new_p, new_s = _prec.guarded_update(finite, new_p, pv, new_s, sv)
    outs = new_p + [x for per in new_s for x in per] + ([finite] if finite is not None else [])
    out_names = ([f"new.{n}" for n in names] + [f"new.{n}.{s}" for n in names for s in state_names]
                 + (["finite"] if finite is not None else []))
    return _kg.make_graph(pv + gv + [x for per in sv for x in per] + scalars.values + scale, outs, out_names), scalars


class CheckpointedTrainStep:
    """A training step that keeps only segment boundaries between its forward and backward passes.
    Called like kiln.train's step: ``loss = step(x, y)``; ``parameters``, ``buffers`` (batch-norm
    running statistics), ``state``, ``scaler`` (the loss scale, or None), ``memory()``."""

    def __init__(self, graph, stages, fwds, bwds, update, lifted, states, state_names, scalars, n_batch, seed_fn=None, scaler=None):
        self.graph, self.stages = graph, stages
        self._fwds, self._bwds, self._update = fwds, bwds, update
        self._param_names = list(lifted.names)
        self.parameters = Parameters((n, _np.array(v, copy=True)) for n, v in zip(lifted.names, lifted.values))
        self.buffers = Parameters((n, _np.array(v, copy=True)) for n, v in zip(lifted.buffer_names, lifted.buffer_values))
        self.optimizer_state_names, self.optimizer_states, self._scalars = state_names, states, scalars
        self._n_batch = n_batch
        self._seed_fn = seed_fn  # step number -> the dropout seed (the graph's input after the batch), or None
        self.scaler = scaler
        self.steps = 0

    @property
    def state(self):
        return {n: dict(zip(self.optimizer_state_names, s)) for n, s in zip(self._param_names, self.optimizer_states)}

    def _feed(self, inputs):
        """Every input of the loss graph by name: the batch (converted and checked), the dropout seed,
        the parameters, the buffers and the loss scale."""
        names = self.graph.input_names
        if len(inputs) != self._n_batch:
            raise KilnError(f"the training step takes {self._n_batch} input(s) (the model's and the target), got {len(inputs)}")
        feed = {}
        for n, (shape, dtype), a in zip(names, self.graph.input_types, inputs):
            a = _np.asarray(a)
            a = a.astype(dtype) if a.dtype != _np.dtype(dtype) else a
            if a.shape != tuple(shape):
                raise KilnError(f"input '{n}' must have shape {tuple(shape)}, got {a.shape}")
            feed[n] = _np.ascontiguousarray(a)
        if self._seed_fn is not None:  # one seed for a segment's forward and its recomputation: the same masks
            feed[names[self._n_batch]] = _np.asarray(self._seed_fn(self.steps + 1), self.graph.input_types[self._n_batch][1])
        for d in (self.parameters, self.buffers):
            for n in d:
                feed[n] = dict.__getitem__(d, n)
        if self.scaler is not None:
            feed[LOSS_SCALE_INPUT] = _np.asarray(self.scaler.scale, self.graph.input_types[-1][1])
        return feed

    def __call__(self, *inputs):
        feed = self._feed(inputs)
        kept, carried = [], []
        for st, fwd in zip(self.stages, self._fwds):
            ins = carried + [feed[n] for n in st["model_inputs"]]
            kept.append(ins)
            if fwd is not None:
                carried = fwd.run(ins)
        grads = {n: None for n in self._param_names}
        dys, objective, extras = [], None, []
        for st, bwd, ins in reversed(list(zip(self.stages, self._bwds, kept))):
            outs = bwd.run(ins + dys)
            if not st["send"]:  # the last segment: the objective first, the loss graph's other outputs last
                n_extra = len(self.graph.output_names) - 1
                objective, extras, outs = outs[0], outs[len(outs) - n_extra:], outs[1: len(outs) - n_extra]
            n_recv = len(st["recv"])
            dys = outs[:n_recv]
            for n, gv in zip([n for n in st["model_inputs"] if n in grads], outs[n_recv:]):
                grads[n] = gv if grads[n] is None else grads[n] + gv  # a parameter read by several segments
        loss = float(extras.pop(0) if self.scaler is not None else objective)  # scaled: the loss itself comes after
        for n, v in zip(list(self.buffers), extras):  # the first forward's running statistics: they advance once a step
            dict.__setitem__(self.buffers, n, v)
        self.steps += 1
        scale = [] if self.scaler is None else [feed[LOSS_SCALE_INPUT]]  # the update divides by the scale the segments used
        rest = apply_update(self._update, self.parameters, [grads[n] for n in self.parameters], self.optimizer_states, self._scalars,
                            self.steps, scale)
        if self.scaler is not None:
            finite = bool(rest[0])
            self.scaler.update(finite)
            if not finite:
                self.steps -= 1  # a skipped step: the optimizer's step count does not advance (as in the plain step)
        return loss

    def memory(self):
        """Bytes a step holds at its peak (see the module doc), by part. One graph runs at a time: the
        largest of them (its arena and the outputs it writes) counts, beside what the step keeps."""
        params = sum(a.nbytes for a in self.parameters.values())
        states = sum(a.nbytes for per in self.optimizer_states for a in per)
        inputs = nbytes_of(self.graph.input_types[:self._n_batch]) + sum(a.nbytes for a in self.buffers.values())
        boundaries = sum(nbytes_of(st["graph"].input_types[:len(st["recv"])]) for st in self.stages)
        running = max(c.memory()["arena_bytes"] + nbytes_of(c.graph.output_types)
                      for c in self._fwds + self._bwds + [self._update] if c is not None)
        grads = params  # the parameter gradients, summed over the segments until the update
        return {"parameters": params, "optimizer_state": states, "inputs": inputs, "gradients": grads,
                "kept_boundaries": boundaries, "running_graph": running,
                "total": params + states + inputs + grads + boundaries + running, "segments": len(self.stages)}


def compile_checkpointed(graph, n_batch, lifted, optimizer, segments, target, seed_fn=None, scaler=None, layout=True):
    """The checkpointed step of `graph` (step._Lifted.loss_graph's: the batch, the dropout seed when
    seed_fn is given, the parameters, the buffers and the loss scale when scaled, in; the objective,
    the loss when scaled and the buffers' new values out) in `segments` segments; layout as kiln.train.compile's."""
    names, values = lifted.names, lifted.values
    stages, _ = _kiln.dist.cut_pipeline(graph, int(segments), {})
    pset = set(names)
    fwds, bwds, rounded = [], [], set()
    for st in reversed(stages):  # last first: each backward tells the one before which gradients it gives rounded
        bg, _ = backward_graph(st, pset, rounded)
        rounded = bfloat16_grads(st, bg)
        bwds.insert(0, _Compiled(_kiln.graph.compile(bg, target=target, layout=layout), bg))
    for st in stages:
        fwds.append(_Compiled(_kiln.graph.compile(st["graph"], target=target, layout=layout), st["graph"]) if st["send"] else None)
    state_names = optimizer.state_names()
    ug, scalars = update_graph(optimizer, names, values, scaler)
    update = _Compiled(_kiln.graph.compile(ug, target=target), ug)
    states = [[_np.zeros(v.shape, v.dtype) for _ in state_names] for v in values]
    return CheckpointedTrainStep(graph, stages, fwds, bwds, update, lifted, states, state_names, scalars, n_batch, seed_fn, scaler)


class _Compiled:
    """A native executor with the graph it runs (for its memory report)."""

    def __init__(self, exe, graph):
        self.exe, self.graph = exe, graph

    def run(self, inputs):
        return self.exe.run(inputs)

    def memory(self):
        return self.exe.memory()
