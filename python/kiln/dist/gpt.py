"""GPT-style training graphs for planning (kiln.dist.plan): shapes only, no weights allocated.

Every 2-D weight is a graph input, not a constant, so a 175B model is a graph of shapes; the step
is the forward pass, the cross-entropy loss, its gradients and Adam's update (the optimizer state
as inputs too), as kiln.train builds it. Simplifications, none of which moves the FLOP count by
more than a few percent: the token embedding is the input (its lookup and scatter are not modelled),
no causal mask, no biases, ReLU for GeLU, LayerNorm scales fixed (tiny constants), float32
throughout (kiln.dist.plan's precision="bf16" halves the bytes of activations and collectives; step_costs.py).
"""
import numpy as _np

from .. import graph as _kg
from .._ffi import KilnError
from ..train.nodes import Scalars, op
from ..train.optimizers import Adam

# (layers, hidden, heads) of GPT-3's sizes (Brown et al. 2020, Table 2.1). 13B's d_model is 5140 in
# that table, which 40 heads of 128 do not make: we take 5120 (= 40 x 128, as Megatron-LM's configs).
GPT_SIZES = {"1.3B": (24, 2048, 16), "13B": (40, 5120, 40), "175B": (96, 12288, 96)}
VOCAB = 51200  # GPT-2's 50257 padded to a multiple of 1024, as Megatron-LM pads it


def training_graph(inputs, loss, weights, optimizer=None):
    """The training step of `loss` (a scalar Value) over `weights` (input Values): loss, new weights
    and new optimizer state out."""
    optimizer = optimizer or Adam(lr=1e-4)
    grads = _kg.gradients(loss, weights)
    names = optimizer.state_names()
    states = [[_kg.make_input(f"{w.name}.{s}", list(w.shape), w.dtype) for s in names] for w in weights]
    scalars = Scalars(loss.dtype)
    new_w, new_s = optimizer.build(weights, grads, states, scalars)
    ins = inputs + weights + [s for per in states for s in per] + scalars.values
    outs = [loss] + new_w + [s for per in new_s for s in per]
    return _kg.make_graph(ins, outs, [])


def gpt_training_graph(size="1.3B", batch=8, seq=2048, layers=None, hidden=None, heads=None, vocab=VOCAB):
    """A GPT's training step: `size` one of GPT_SIZES, or layers/hidden/heads given. Returns (graph, parameters)."""
    L, H, nh = GPT_SIZES.get(size, (layers, hidden, heads))
    L, H, nh = layers or L, hidden or H, heads or nh
    hd = H // nh
    x = _kg.make_input("x", [batch, seq, H], "float32")
    labels = _kg.make_input("labels", [batch * seq], "int64")
    ws = []  # names differ in more than numbers (fc_in, fc_out): the planner ties names that differ only in numbers

    def weight(name, shape):
        ws.append(_kg.make_input(name, list(shape), "float32"))
        return ws[-1]

    def const(name, a):
        return _kg.make_constant(name, _np.asarray(a))

    ones, zeros = const("ln.scale", _np.ones(H, "float32")), const("ln.bias", _np.zeros(H, "float32"))
    split, merge = const("split", _np.array([batch, seq, nh, hd], "int64")), const("merge", _np.array([batch, seq, H], "int64"))
    h = x
    for i in range(L):
        a = op("LayerNormalization", h, ones, zeros, axis=-1)
        q, k, v = (op("Transpose", op("Reshape", op("MatMul", a, weight(f"h{i}.w{n}", (H, H))), split), perm=p)
                   for n, p in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])))
        s = op("Softmax", op("Mul", op("MatMul", q, k), const("scale", _np.array(hd ** -0.5, "float32"))), axis=-1)
        o = op("Reshape", op("Transpose", op("MatMul", s, v), perm=[0, 2, 1, 3]), merge)
        h = op("Add", h, op("MatMul", o, weight(f"h{i}.wo", (H, H))))
        m = op("LayerNormalization", h, ones, zeros, axis=-1)
        h = op("Add", h, op("MatMul", op("Relu", op("MatMul", m, weight(f"h{i}.fc_in", (H, 4 * H)))), weight(f"h{i}.fc_out", (4 * H, H))))
    flat = op("Reshape", op("LayerNormalization", h, ones, zeros, axis=-1), const("flat", _np.array([batch * seq, H], "int64")))
    loss = op("kiln.SoftmaxCrossEntropy", op("MatMul", flat, weight("head", (H, vocab))), labels)
    params = sum(int(_np.prod(w.shape)) for w in ws)
    return training_graph([x, labels], loss, ws), params


class GPT:
    """A GPT to plan (kiln.dist.plan): its shape, the batch of one step (sequences), and step graphs of any
    number of layers and sequences, so the planner can cost pipeline stages and microbatches."""

    def __init__(self, size="1.3B", batch=8, seq=2048, layers=None, hidden=None, heads=None, vocab=VOCAB):
        L, H, nh = GPT_SIZES.get(size, (layers, hidden, heads))
        self.layers, self.hidden, self.heads = layers or L, hidden or H, heads or nh
        if not (self.layers and self.hidden and self.heads):
            raise KilnError(f"GPT: unknown size {size!r} (known: {', '.join(GPT_SIZES)}); or give layers, hidden and heads")
        self.name, self.batch, self.seq, self.vocab = size if size in GPT_SIZES else f"{self.layers}x{self.hidden}", batch, seq, vocab
        self.params = self.layers * 12 * self.hidden ** 2 + self.hidden * vocab

    def graph(self, layers=None, batch=None):
        """The training step of `layers` layers (all) over `batch` sequences (the step's)."""
        return gpt_training_graph(batch=batch or self.batch, seq=self.seq, layers=layers or self.layers, hidden=self.hidden,
                                  heads=self.heads, vocab=self.vocab)[0]

    def __repr__(self):
        return f"GPT({self.name}: {self.layers} layers, hidden {self.hidden}, batch {self.batch} x {self.seq})"

