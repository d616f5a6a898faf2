"""Depthwise and grouped convolutions' gradients (kiln.ConvGradInput, kiln.ConvGradWeight with
group > 1) against PyTorch's autograd: strides 1 and 2 (the stride-2 input gradient is computed per
stride phase, conv_grad_grouped.cpp), padding, channel multipliers 1 and 2, channel counts that are
no multiple of a vector (24, 40), in float32 and under bfloat16 autocast (kiln.train's
precision="bfloat16": the operands rounded to bfloat16, float32 sums)."""
import numpy as np
import pytest
import torch

import kiln
from kiln import graph as kg

from test_train_precision import round_to


def conv_loss_graph(x_shape, w_shape, r, **attrs):
    """loss = sum(Conv(x, w) * r): its gradient graph gives dX and dW for the output gradient r."""
    b = kg.Builder()
    x, w = b.input("x", x_shape), b.input("w", w_shape)
    y = b.op("Conv", x, w, **attrs)
    loss = b.op("ReduceSum", b.op("Mul", y, b.constant("r", r)), keepdims=0)
    return b.build(loss), [x, w]


def torch_grads(x, w, r, stride, pad, group):
    xt, wt = torch.from_numpy(x).double().requires_grad_(), torch.from_numpy(w).double().requires_grad_()
    y = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=pad, groups=group)
    (y * torch.from_numpy(r).double()).sum().backward()
    return xt.grad.numpy(), wt.grad.numpy()


CASES = [  # channels, multiplier (output channels per group), group, image side, stride, pad, kernel
    (24, 1, 24, 9, 1, 1, 3),    # depthwise, stride 1
    (24, 1, 24, 10, 2, 1, 3),   # depthwise, stride 2, even side
    (40, 1, 40, 7, 2, 1, 3),    # odd side: the last phase is one shorter
    (40, 2, 40, 8, 2, 2, 5),    # multiplier 2, 5x5, pad 2
    (24, 2, 24, 9, 1, 0, 3),    # multiplier 2, no padding
    (24, 3, 8, 11, 2, 1, 3),    # grouped: 3 input and 3 output channels per group
    (6, 1, 6, 12, 3, 1, 3),     # stride 3
]


def run_case(channels, mult, group, side, stride, pad, kernel, bf16=False):
    rng = np.random.default_rng(channels * 100 + side + stride)
    x = rng.standard_normal((2, channels, side, side)).astype(np.float32)
    w = rng.standard_normal((channels // group * mult * group, channels // group, kernel, kernel)).astype(np.float32)
    out = (side + 2 * pad - kernel) // stride + 1
    r = rng.standard_normal((2, w.shape[0], out, out)).astype(np.float32)
    graph, wrt = conv_loss_graph(x.shape, w.shape, r, kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4, group=group)
    if bf16:
        graph = kg.autocast(graph, "bfloat16")
    _, dx, dw = kiln.compile(kg.gradient_graph(graph, wrt))(x, w)
    ref_x, ref_w = (x, w) if not bf16 else (round_to(x, "bfloat16"), round_to(w, "bfloat16"))
    want_dx, want_dw = torch_grads(ref_x, ref_w, r, stride, pad, group)
    return dx, dw, want_dx, want_dw


@pytest.mark.parametrize("case", CASES)
def test_grouped_conv_gradients_match_torch(case):
    dx, dw, want_dx, want_dw = run_case(*case)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("case", [CASES[1], CASES[3], CASES[5]])
def test_grouped_conv_gradients_under_bfloat16_autocast(case):
    """The output gradient is rounded to bfloat16 as well (it feeds rounded products): a few bfloat16 ulps
    of the sums' scale."""
    dx, dw, want_dx, want_dw = run_case(*case, bf16=True)
    for got, want in ((dx, want_dx), (dw, want_dw)):
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=0, atol=scale * 2 ** -6)
        assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.999
