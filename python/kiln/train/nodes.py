"""Building a training graph: one operator's output (op) and the scalar inputs a step feeds anew
at each call (Scalars: the learning rate, bias corrections)."""
import numpy as _np

from .. import graph as _kg


def op(name, *inputs, **attrs):
    """The first output of one operator node (``op("Mul", a, b)``)."""
    return _kg.make_op(name, list(inputs), **attrs)[0]


class Scalars:
    """Per-step scalar inputs of the training graph (learning rate, bias corrections), fed at each call."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.values = []  # graph input Values
        self.fns = []  # step number -> value

    def add(self, name, fn):
        v = _kg.make_input(f"train.{name}", [], self.dtype)
        self.values.append(v)
        self.fns.append(fn)
        return v

    def feed(self, step):
        return [_np.asarray(f(step), v.dtype) for f, v in zip(self.fns, self.values)]
