"""Mixed precision for kiln.train (``precision="bfloat16"`` or ``"float16"``).

The model's MatMul/Gemm/Conv read and give values rounded to the 16-bit float, accumulating in
float32 (kiln.graph.autocast, in the manner of torch.autocast); everything else, the loss and the
parameters (master weights) and optimizer state stay float32. With float16, gradients through the
rounded values underflow and overflow as they would in half-precision hardware, so the step scales
the loss (dynamic loss scaling, torch.cuda.amp.GradScaler's rule): the gradients are taken of
loss * scale and divided by it; a step whose gradients are not all finite changes nothing and
halves the scale, and after ``growth_interval`` good steps in a row the scale doubles.
"""
import numpy as _np

from .._ffi import KilnError
from .. import graph as _kg
from .nodes import op as _op

LOSS_SCALE_INPUT = "train.loss_scale"  # the input a scaled step reads its loss scale from


class LossScaler:
    """The loss scale of a step (``step.scaler``): ``scale``, ``skipped`` steps, GradScaler's update rule.
    growth_interval=0 keeps the scale fixed (a static loss scale)."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        if not (init_scale > 0 and growth_factor > 1 and 0 < backoff_factor < 1 and growth_interval >= 0):
            raise KilnError(f"LossScaler: init_scale ({init_scale}) must be positive, growth_factor ({growth_factor}) > 1, "
                            f"backoff_factor ({backoff_factor}) in (0, 1) and growth_interval ({growth_interval}) >= 0")
        self.scale, self.growth_factor, self.backoff_factor = float(init_scale), growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self.good_steps, self.skipped = 0, 0

    def update(self, finite):
        if self.growth_interval == 0:
            self.skipped += not finite
            return
        if not finite:
            self.scale *= self.backoff_factor
            self.good_steps = 0
            self.skipped += 1
            return
        self.good_steps += 1
        if self.good_steps == self.growth_interval:
            self.scale *= self.growth_factor
            self.good_steps = 0


def scaler_of(loss_scale, precision):
    """The LossScaler for train.compile's `loss_scale` (None, "dynamic", a number or a LossScaler)."""
    if loss_scale is None:
        loss_scale = "dynamic" if precision == "float16" else None
    if loss_scale is None or isinstance(loss_scale, LossScaler):
        return loss_scale
    if loss_scale == "dynamic":
        return LossScaler()
    try:
        fixed = float(loss_scale)
    except (TypeError, ValueError):
        raise KilnError(f"loss_scale must be None, 'dynamic', a positive number or a LossScaler, got {loss_scale!r}") from None
    return LossScaler(init_scale=fixed, growth_interval=0)


def check_precision(precision):
    if precision not in (None, "float32", "bfloat16", "float16"):
        raise KilnError(f"precision must be None (float32), 'bfloat16' or 'float16', got {precision!r}")
    return None if precision == "float32" else precision


def scaled_gradients(loss_v, params, names, scale_v):
    """The parameters' gradients of loss * scale, divided by the scale, and a bool scalar: all finite."""
    return unscaled(_kg.gradients(_op("Mul", loss_v, scale_v), params), params, names, scale_v)


def unscaled(grads, params, names, scale_v):
    """Gradients of loss * scale (None: the parameter does not reach the loss) divided by the scale,
    and a bool scalar: all finite (None when no gradient is defined)."""
    out, total = [], None
    for n, p, g in zip(names, params, grads):
        if g is None:
            out.append(_kg.make_constant(f"zero_grad_{n}", _np.zeros(p.shape, p.dtype)))
            continue
        g = _op("Div", g, scale_v)
        out.append(g)
        # g * 0 is 0 for every finite element and NaN for inf or NaN: the sum is 0 exactly when all are finite.
        t = _op("ReduceSum", _op("Mul", g, _kg.make_constant("zero", _np.zeros((), p.dtype))), keepdims=0)
        total = t if total is None else _op("Add", total, t)
    finite = _op("Equal", total, _kg.make_constant("zero", _np.zeros((), scale_v.dtype))) if total is not None else None
    return out, finite


def guarded(finite, new, old):
    """new where the step's gradients were finite, else old (a skipped step changes nothing)."""
    return [_op("Where", finite, n, o) for n, o in zip(new, old)]


def guarded_update(finite, new_params, params, new_states, states):
    """The optimizer's new parameters and per-parameter state, each kept as it was where the step's
    gradients were not all finite."""
    return guarded(finite, new_params, params), [guarded(finite, ns, st) for ns, st in zip(new_states, states)]
