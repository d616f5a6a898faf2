"""Training: a model's forward pass, loss, backward pass and optimizer update
compiled into one graph, run one step per call.

    step = kiln.train.compile(model, loss="cross_entropy", optimizer=kiln.train.SGD(lr=0.1, momentum=0.9))
    for x, y in batches:
        loss = step(x, y)
    step.parameters["fc1.weight"]      # numpy arrays, readable and writable
    kiln.train.save(step, "ckpt", data_position=i)   # and kiln.train.load(step, "ckpt") to resume (saving.py)

`model` is a :class:`kiln.graph.Graph` (from a Builder, ``from_onnx`` or
``from_torch``) with one output. Its float constants of rank >= 1 that no
operator reads at compile time (the initializers of an ONNX model, the
weights of a Builder graph) are the trainable parameters: they become inputs
of the training graph, whose outputs are the loss, the new parameters and
the new optimizer state, fed back by the step object at the next call.
Batch norms train on batch statistics (as torch.nn.BatchNorm in train mode);
their running statistics are ``step.buffers``, updated at every step.
Optimizers follow PyTorch's update rules (torch.optim.SGD, Adam, AdamW), so a
model trained with the same initial weights and data follows PyTorch's
losses.
"""
from .optimizers import SGD, Adam, AdamW
from .precision import LossScaler
from .checkpoint import CheckpointedTrainStep
from .step import TrainStep, compile, from_torch
from .saving import save, load

__all__ = ["compile", "from_torch", "SGD", "Adam", "AdamW", "TrainStep", "CheckpointedTrainStep", "LossScaler", "save", "load"]
