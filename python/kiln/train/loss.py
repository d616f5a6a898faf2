"""The loss on a model's output: cross entropy, mean squared error, or the model's own scalar output."""
from .._ffi import KilnError
from .. import graph as _kg
from .nodes import op


def loss_value(loss, out, n_batch_hint):
    """The loss Value on the model's output and the target input it needs (None for loss=None)."""
    shape, dtype = out.shape, out.dtype
    if loss is None:
        if shape != ():
            raise KilnError(f"loss=None takes the model's output as the loss, so it must be a scalar; the output is {dtype}{list(shape)}")
        return out, None
    if loss == "cross_entropy":
        if len(shape) != 2:
            raise KilnError(f"loss='cross_entropy' needs the model's output to be logits [batch, classes]; it is {dtype}{list(shape)}")
        y = _kg.make_input("labels", [shape[0]], "int64")
        return op("kiln.SoftmaxCrossEntropy", out, y), y
    if loss == "mse":
        y = _kg.make_input("target", list(n_batch_hint or shape), dtype)
        return op("kiln.MeanSquaredError", out, y), y
    raise KilnError(f"loss must be 'cross_entropy', 'mse' or None (the model computes it), got {loss!r}")
