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

Memory here is what kiln plans and holds for a step: parameters, optimizer state, the arena of
intermediate values (activations and gradients) of the largest graph a step runs at a time, the
kept boundary values, and the updated parameters and state the step writes.
"""
import numpy as _np

from ._ffi import KilnError, _kiln
from . import graph as _kg


def apply_update(update, parameters, grads, states, scalars, step_number):
    """Runs an optimizer update graph (parameters, gradients, optimizer state and the step's scalars
    in; new parameters and state out) and stores its results in `parameters` and `states`."""
    names = list(parameters)
    ups = update.run([dict.__getitem__(parameters, n) for n in names] + list(grads) +
                     [s for per in states for s in per] + scalars.feed(step_number))
    for k, n in enumerate(names):
        dict.__setitem__(parameters, n, ups[k])
    at = len(names)
    for per in states:
        per[:] = ups[at: at + len(per)]
        at += len(per)


def _nbytes_of(types):
    return sum(int(_np.prod(shape, dtype=_np.int64)) * _np.dtype(dtype).itemsize for shape, dtype in types)


def plain_step_memory(step):
    """The memory report of a plain kiln.train step (dict of bytes; see the module doc)."""
    g = step.graph
    params = sum(a.nbytes for a in step.parameters.values())
    states = sum(a.nbytes for per in step._states for a in per)
    inputs = _nbytes_of(g.input_types) - params - states
    # Outputs written into their donated inputs (parameter and state updates) take no memory of their own.
    reuses = getattr(step._exe, "output_reuses_input", [])
    outputs = _nbytes_of([t for k, t in enumerate(g.output_types) if k >= len(reuses) or reuses[k] < 0])
    running = step._exe.memory()["arena_bytes"] + outputs
    return {"parameters": params, "optimizer_state": states, "inputs": inputs, "gradients": 0, "kept_boundaries": 0,
            "running_graph": running, "total": params + states + inputs + running, "segments": 1}


class CheckpointedTrainStep:
    """A training step that keeps only segment boundaries between its forward and backward passes.
    Called like kiln.train's step: ``loss = step(x, y)``; ``parameters``, ``state``, ``memory()``."""

    def __init__(self, graph, stages, fwds, bwds, update, param_names, params, state_names, states, scalars, n_batch, seed_fn=None):
        self.graph, self.stages = graph, stages
        self._fwds, self._bwds, self._update = fwds, bwds, update
        self._param_names = param_names
        self.parameters = params
        self._state_names, self._states, self._scalars = state_names, states, scalars
        self._n_batch = n_batch
        self._seed_fn = seed_fn  # step number -> the dropout seed (the graph's input after the batch), or None
        self.steps = 0

    @property
    def state(self):
        return {n: dict(zip(self._state_names, s)) for n, s in zip(self._param_names, self._states)}

    def __call__(self, *inputs):
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
        for n in self._param_names:
            feed[n] = dict.__getitem__(self.parameters, n)
        kept, carried = [], []
        for st, fwd in zip(self.stages, self._fwds):
            ins = carried + [feed[n] for n in st["model_inputs"]]
            kept.append(ins)
            if fwd is not None:
                carried = fwd.run(ins)
        grads = {n: None for n in self._param_names}
        dys, loss = [], None
        for st, bwd, ins in reversed(list(zip(self.stages, self._bwds, kept))):
            outs = bwd.run(ins + dys)
            if not st["send"]:
                loss, outs = float(outs[0]), outs[1:]
            n_recv = len(st["recv"])
            dys = outs[:n_recv]
            for n, gv in zip([n for n in st["model_inputs"] if n in grads], outs[n_recv:]):
                grads[n] = gv if grads[n] is None else grads[n] + gv  # a parameter read by several segments
        self.steps += 1
        apply_update(self._update, self.parameters, [grads[n] for n in self.parameters], self._states, self._scalars, self.steps)
        return loss

    def memory(self):
        """Bytes a step holds at its peak (see the module doc), by part. One graph runs at a time: the
        largest of them (its arena and the outputs it writes) counts, beside what the step keeps."""
        params = sum(a.nbytes for a in self.parameters.values())
        states = sum(a.nbytes for per in self._states for a in per)
        inputs = _nbytes_of(self.graph.input_types[:self._n_batch])
        boundaries = sum(_nbytes_of(st["graph"].input_types[:len(st["recv"])]) for st in self.stages)
        running = max(c.memory()["arena_bytes"] + _nbytes_of(c.graph.output_types)
                      for c in self._fwds + self._bwds + [self._update] if c is not None)
        grads = params  # the parameter gradients, summed over the segments until the update
        return {"parameters": params, "optimizer_state": states, "inputs": inputs, "gradients": grads,
                "kept_boundaries": boundaries, "running_graph": running,
                "total": params + states + inputs + grads + boundaries + running, "segments": len(self.stages)}


def compile_checkpointed(graph, n_batch, names, values, optimizer, segments, target, seed_fn=None):
    """The checkpointed step of `graph` (batch inputs, the dropout seed when seed_fn is given, then parameters,
    in; the loss out) in `segments` segments."""
    from . import train as _t
    from .dist_pipeline import _vjp_graph
    stages, _ = _kiln.dist.cut_pipeline(graph, int(segments), {})
    pset = set(names)
    fwds, bwds = [], []
    for st in stages:
        fwds.append(_Compiled(_kiln.graph.compile(st["graph"], target=target), st["graph"]) if st["send"] else None)
        bg, _ = _vjp_graph(st, pset)
        bwds.append(_Compiled(_kiln.graph.compile(bg, target=target), bg))
    state_names = optimizer.state_names()
    pv = [_kg.make_input(n, list(v.shape), str(v.dtype)) for n, v in zip(names, values)]
    gv = [_kg.make_input(f"grad.{n}", list(v.shape), str(v.dtype)) for n, v in zip(names, values)]
    sv = [[_kg.make_input(f"{n}.{s}", list(v.shape), str(v.dtype)) for s in state_names] for n, v in zip(names, values)]
    scalars = _t._Scalars(str(values[0].dtype))
    new_p, new_s = optimizer.build(pv, gv, sv, scalars)
    ug = _kg.make_graph(pv + gv + [x for per in sv for x in per] + scalars.values, new_p + [x for per in new_s for x in per],
                        [f"new.{n}" for n in names] + [f"new.{n}.{s}" for n in names for s in state_names])
    update = _Compiled(_kiln.graph.compile(ug, target=target), ug)
    params = _t._Parameters((n, _np.array(v, copy=True)) for n, v in zip(names, values))
    states = [[_np.zeros(v.shape, v.dtype) for _ in state_names] for v in values]
    return CheckpointedTrainStep(graph, stages, fwds, bwds, update, list(names), params, state_names, states, scalars, n_batch, seed_fn)


class _Compiled:
    """A native executor with the graph it runs (for its memory report)."""

    def __init__(self, exe, graph):
        self.exe, self.graph = exe, graph

    def run(self, inputs):
        return self.exe.run(inputs)

    def memory(self):
        return self.exe.memory()
