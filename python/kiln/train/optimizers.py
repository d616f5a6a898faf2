"""Optimizers, PyTorch's update rules built into the training graph: SGD, Adam, AdamW. Each adds
the scalars it reads at every step (``lr``, ...) to the step's Scalars."""
import numpy as _np

from .._ffi import KilnError
from .. import graph as _kg
from .nodes import op as _op


def _const(value, like):
    return _kg.make_constant("train.c", _np.asarray(value, like.dtype))


class SGD:
    """torch.optim.SGD's rule: d = g + weight_decay * p; with momentum,
    buf = momentum * buf + (1 - dampening) * d (buf = d at the first step),
    d = d + momentum * buf if nesterov else buf; p = p - lr * d.
    ``lr`` may be changed between steps."""

    def __init__(self, lr=0.01, momentum=0.0, weight_decay=0.0, dampening=0.0, nesterov=False):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise KilnError(f"SGD: lr ({lr}), momentum ({momentum}) and weight_decay ({weight_decay}) must not be negative")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise KilnError("SGD: nesterov needs a positive momentum and zero dampening (as torch.optim.SGD)")
        self.lr, self.momentum, self.weight_decay, self.dampening, self.nesterov = lr, momentum, weight_decay, dampening, nesterov

    def state_names(self):
        return ["momentum_buffer"] if self.momentum else []

    def build(self, params, grads, states, scalars):
        lr = scalars.add("lr", lambda t: self.lr)
        # The first step's buffer is d itself (no dampening), as in PyTorch.
        damp = scalars.add("dampening", lambda t: 1.0 if t == 1 else 1.0 - self.dampening) if self.momentum else None
        new_params, new_states = [], []
        for p, g, st in zip(params, grads, states):
            d = g
            if self.weight_decay:
                d = _op("Add", d, _op("Mul", p, _const(self.weight_decay, p)))
            if self.momentum:
                buf = _op("Add", _op("Mul", st[0], _const(self.momentum, p)), _op("Mul", d, damp))
                new_states.append([buf])
                d = _op("Add", d, _op("Mul", buf, _const(self.momentum, p))) if self.nesterov else buf
            else:
                new_states.append([])
            new_params.append(_op("Sub", p, _op("Mul", d, lr)))
        return new_params, new_states


class Adam:
    """torch.optim.Adam's rule: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
    p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps); weight_decay
    adds weight_decay * p to g (L2). ``lr`` may be changed between steps."""

    decoupled = False

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        b1, b2 = betas
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise KilnError(f"{type(self).__name__}: lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}: "
                            "lr, eps and weight_decay must not be negative and the betas must be in [0, 1)")
        self.lr, self.betas, self.eps, self.weight_decay = lr, (b1, b2), eps, weight_decay

    def state_names(self):
        return ["exp_avg", "exp_avg_sq"]

    def build(self, params, grads, states, scalars):
        b1, b2 = self.betas
        step_size = scalars.add("step_size", lambda t: self.lr / (1 - b1 ** t))
        bc2_sqrt = scalars.add("bias_correction2_sqrt", lambda t: _np.sqrt(1 - b2 ** t))
        decay = scalars.add("decay", lambda t: 1 - self.lr * self.weight_decay) if self.decoupled and self.weight_decay else None
        new_params, new_states = [], []
        for p, g, (m, v) in zip(params, grads, states):
            if self.weight_decay and not self.decoupled:
                g = _op("Add", g, _op("Mul", p, _const(self.weight_decay, p)))
            if decay is not None:
                p = _op("Mul", p, decay)  # AdamW: decay the weights apart from the gradient
            m = _op("Add", _op("Mul", m, _const(b1, p)), _op("Mul", g, _const(1 - b1, p)))
            v = _op("Add", _op("Mul", v, _const(b2, p)), _op("Mul", _op("Mul", g, g), _const(1 - b2, p)))
            denom = _op("Add", _op("Div", _op("Sqrt", v), bc2_sqrt), _const(self.eps, p))
            new_params.append(_op("Sub", p, _op("Mul", _op("Div", m, denom), step_size)))
            new_states.append([m, v])
        return new_params, new_states


class AdamW(Adam):
    """torch.optim.AdamW: Adam with the weight decay applied to the weights (p *= 1 - lr * weight_decay) instead of the gradient."""

    decoupled = True

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(lr, betas, eps, weight_decay)
