"""The backward pass of one segment of a cut loss graph (a checkpointed step's segment, a stage of
kiln.dist.pipeline_train), recomputing the segment's forward before differentiating it."""
import numpy as _np

from .. import graph as _kg
from .nodes import op


def backward_graph(stage, param_names, rounded_grads=()):
    """The stage's backward: its inputs and, except on the last stage, the gradients of what it sends
    (``grad.<name>``) in; the gradients of what it received and of its parameters out (the last stage
    puts its loss first, and its graph's other outputs last). It recomputes the stage's forward, so a
    micro-batch keeps only its stage inputs between the two passes (GPipe's re-materialisation).
    `rounded_grads`: the sent values whose incoming gradients hold bfloat16 values (the next stage's
    backward gives them rounded, see bfloat16_grads); they are rounded again here, which changes no
    value, so that the products reading them still take the bfloat16 dot products."""
    g = stage["graph"]
    ins, outs = g.input_values, g.output_values
    n_recv = len(stage["recv"])
    params = [ins[n_recv + i] for i, n in enumerate(stage["model_inputs"]) if n in param_names]
    wrt = ins[:n_recv] + params
    last = not stage["send"]
    dys = [] if last else [_kg.make_input(f"grad.{n}", list(o.shape), o.dtype) for n, o in zip(stage["send"], outs)]
    if last:
        got = _kg.gradients(outs[0], wrt)
    else:  # integer values sent on have no gradient
        seeds = [(o, _bf16_round(d) if n in rounded_grads else d)
                 for n, o, d in zip(stage["send"], outs, dys) if o.dtype.startswith("float")]
        got = _kg.vjp([o for o, _ in seeds], [d for _, d in seeds], wrt)
    grads = [gv if gv is not None else _kg.make_constant(f"zero_grad_{i}", _np.zeros(v.shape, v.dtype))
             for i, (v, gv) in enumerate(zip(wrt, got))]
    names = ([g.output_names[0]] if last else []) + [f"grad.{n}" for n in stage["recv"]] + \
        [f"grad.{n}" for n in stage["model_inputs"] if n in param_names]
    extras = list(outs[1:]) if last else []  # the last stage's other outputs, passed on (a checkpointed step's buffers)
    return _kg.make_graph(list(ins) + dys, ([outs[0]] if last else []) + grads + extras,
                          names + (list(g.output_names[1:]) if last else [])), len(params)


def _bf16_round(v):
    return op("Cast", op("Cast", v, to=16), to=1)


def bfloat16_grads(stage, backward):
    """The names of the values `stage` received whose gradients its `backward` graph gives
    holding bfloat16 values: the previous stage's rounded_grads."""
    outs = backward.output_values[(0 if stage["send"] else 1):]
    return {n for n, v in zip(stage["recv"], outs) if _kg.holds_bfloat16_values(v)}
