"""FLOPs of one training step, counted on PyTorch's own step, and the machine's FMA peak they are set against.

The count is of the products only (2 per multiply-add): every convolution
and matrix product PyTorch dispatches in forward and backward (aten
convolution, convolution_backward with the gradients it is asked for, mm,
addmm, bmm, baddbmm), caught by a TorchDispatchMode. So the first layer's
input gradient, which neither side computes, is not counted, and batch
norm, activations, the loss and the optimizer (a few FLOPs per element) are
left out. Both sides are rated by this one count.
"""
import math


def _prod(shape):
    return math.prod(int(v) for v in shape)


def count_products(run):
    """FLOPs of the convolutions and matrix products that run() dispatches (forward and backward)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    aten = torch.ops.aten

    class Counter(TorchDispatchMode):
        flops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            p = func.overloadpacket
            if p is aten.convolution:  # out elements x (C/groups x taps) multiply-adds
                self.flops += 2 * _prod(out.shape) * _prod(args[1].shape[1:])
            elif p is aten.convolution_backward:  # (dY, X, W, ..., output_mask): each gradient asked for costs the forward's
                mask = args[-1]
                self.flops += 2 * _prod(args[0].shape) * _prod(args[2].shape[1:]) * (int(bool(mask[0])) + int(bool(mask[1])))
            elif p in (aten.mm, aten.bmm):
                self.flops += 2 * _prod(args[0].shape) * int(args[1].shape[-1])
            elif p in (aten.addmm, aten.baddbmm):
                self.flops += 2 * _prod(args[1].shape) * int(args[2].shape[-1])
            return out

    with Counter() as c:
        run()
    return c.flops


def step_flops(module, x, y, loss_fn):
    """FLOPs of one forward + backward of module on (x, y); the module's gradients are cleared after."""
    def run():
        loss_fn(module(x), y).backward()
    flops = count_products(run)
    module.zero_grad(set_to_none=True)
    return flops


def fma_peak(cores, lanes, clock_ghz, fma_units=2):
    """GFLOP/s: cores x FMA units x float32 lanes x 2 (multiply and add) x clock."""
    return cores * fma_units * lanes * 2 * clock_ghz
