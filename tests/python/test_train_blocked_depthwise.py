"""Depthwise convolutions in a training step's blocked layout (train_layout.cpp):
kiln.DepthwiseConvNCHWc forward and the depthwise forms of
kiln.ConvGradInputNCHWc / kiln.ConvGradWeightNCHWc, against PyTorch autograd
(float64), op by op and through a MobileNetV2-like step, whose losses follow
the NCHW step's (layout=False)."""
import collections

import numpy as np
import pytest
import torch

import kiln
from kiln import graph as kg
from test_train_blocked import large_transforms


def run(graph, *feed):
    out = kiln.compile(graph)(*feed)
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)


def blocked(a, b):
    n, c, h, w = a.shape
    return np.ascontiguousarray(a.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


# channels, block, side, kernel, stride, pads [top, left, bottom, right], dilation
CASES = [(32, 16, 9, 3, 1, [1, 1, 1, 1], 1), (32, 16, 10, 3, 2, [1, 1, 1, 1], 1), (48, 16, 11, 3, 2, [1, 1, 1, 1], 1),
         (16, 8, 12, 5, 2, [2, 2, 2, 2], 1), (16, 16, 9, 3, 1, [2, 2, 2, 2], 2), (24, 8, 8, 3, 3, [0, 1, 2, 1], 1),
         (16, 16, 7, 3, 1, [0, 0, 0, 0], 1)]


@pytest.mark.parametrize("c, b, hw, k, s, pads, d", CASES)
def test_depthwise_gradients_match_autograd(c, b, hw, k, s, pads, d):
    rng = np.random.default_rng(c + hw + k + s)
    n = 3
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    xt, wt = torch.tensor(x, dtype=torch.float64, requires_grad=True), torch.tensor(w, dtype=torch.float64, requires_grad=True)
    # PyTorch pads symmetrically: pad the input by hand for the asymmetric case.
    xp = torch.nn.functional.pad(xt, (pads[1], pads[3], pads[0], pads[2]))
    y = torch.nn.functional.conv2d(xp, wt, stride=s, dilation=d, groups=c)
    dy = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    a = dict(strides=[s, s], pads=pads, dilations=[d, d], group=c, kernel_shape=[k, k])
    bi = kg.Builder()
    gi = bi.op("kiln.ConvGradInputNCHWc", bi.input("dy", blocked(dy, b).shape), bi.input("w", w.shape), input_shape=list(x.shape),
               **{k_: v for k_, v in a.items() if k_ != "kernel_shape"})
    dx = run(bi.build(gi), blocked(dy, b), w)
    np.testing.assert_allclose(dx, blocked(xt.grad.numpy(), b), rtol=1e-4, atol=1e-4)
    bw = kg.Builder()
    gw = bw.op("kiln.ConvGradWeightNCHWc", bw.input("x", blocked(x, b).shape), bw.input("dy", blocked(dy, b).shape), weight_shape=list(w.shape),
               **{k_: v for k_, v in a.items() if k_ != "kernel_shape"})
    dw = run(bw.build(gw), blocked(x, b), blocked(dy, b))
    np.testing.assert_allclose(dw, wt.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_grouped_blocked_gradients_other_than_depthwise_are_refused():
    b = kg.Builder()
    with pytest.raises(kiln.KilnError, match="depthwise"):
        b.op("kiln.ConvGradInputNCHWc", b.input("dy", (1, 2, 4, 4, 16)), b.input("w", (32, 2, 3, 3)), input_shape=[1, 32, 4, 4],
             strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=16)
    with pytest.raises(kiln.KilnError, match="same blocks"):
        b.op("kiln.ConvGradWeightNCHWc", b.input("x", (1, 2, 4, 4, 16)), b.input("dy2", (1, 1, 4, 4, 32)), weight_shape=[32, 1, 3, 3],
             strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=32)


class InvertedResidual(torch.nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise (stride 1 with a residual, then stride 2), 1x1 project; ReLU6, batch norms."""

    def __init__(self):
        super().__init__()
        seq = lambda *m: torch.nn.Sequential(*m)  # noqa: E731
        self.stem = seq(torch.nn.Conv2d(3, 16, 3, 2, 1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU6())
        self.b1 = seq(torch.nn.Conv2d(16, 48, 1, bias=False), torch.nn.BatchNorm2d(48), torch.nn.ReLU6(),
                      torch.nn.Conv2d(48, 48, 3, 1, 1, groups=48, bias=False), torch.nn.BatchNorm2d(48), torch.nn.ReLU6(),
                      torch.nn.Conv2d(48, 16, 1, bias=False), torch.nn.BatchNorm2d(16))
        self.b2 = seq(torch.nn.Conv2d(16, 32, 1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU6(),
                      torch.nn.Conv2d(32, 32, 3, 2, 1, groups=32, bias=True), torch.nn.BatchNorm2d(32), torch.nn.ReLU6(),
                      torch.nn.Conv2d(32, 24, 1, bias=False), torch.nn.BatchNorm2d(24))
        self.fc = torch.nn.Linear(24, 5)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.b1(x)
        x = self.b2(x)
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def data():
    rng = np.random.default_rng(5)
    return rng.standard_normal((4, 3, 20, 20)).astype(np.float32), np.array([0, 1, 2, 4])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(1)
    module = InvertedResidual()
    x, _ = data()
    return module, kiln.train.from_torch(module, x)


def test_depthwise_convs_and_their_gradients_run_blocked(model):
    _, g = model
    step = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=0.1))
    opt = kg.optimize(step.graph, "llvm", False)
    ops = collections.Counter(opt.op_types())
    assert ops["kiln.DepthwiseConvNCHWc"] == 2 and ops["Conv"] == 0
    assert ops["kiln.ConvGradInput"] == 0 and ops["kiln.ConvGradWeight"] == 0
    assert ops["kiln.ConvGradInputNCHWc"] == 6 and ops["kiln.ConvGradWeightNCHWc"] == 7  # the stem's dX is never needed
    # No activation changes layout around the depthwise convs: only the image and the head's last batch norm gradient do.
    transforms = large_transforms(opt)
    assert all("(%input0)" in line or "/b2/b2.7/" in line for line in transforms) and len(transforms) <= 2, transforms


def test_step_gradients_equal_torch_autograd(model):
    module, g = model
    x, y = data()
    step = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=1.0))
    old = {n: np.array(v) for n, v in step.parameters.items()}
    loss = step(x, y)
    ref = InvertedResidual()
    ref.load_state_dict(module.state_dict())
    ref.double().train()
    out = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x).double()), torch.from_numpy(y))
    out.backward()
    assert loss == pytest.approx(out.item(), rel=1e-5)
    params = dict(ref.named_parameters())
    for n in old:
        grad = old[n] - step.parameters[n]
        want = params[n].grad.numpy()
        np.testing.assert_allclose(grad, want, rtol=2e-3, atol=max(2e-4 * np.abs(want).max(), 1e-6), err_msg=n)


def test_loss_curve_equals_the_nchw_step(model):
    _, g = model
    x, y = data()
    blocked_step = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=0.1, momentum=0.9))
    plain = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=0.1, momentum=0.9), layout=False)
    a = [blocked_step(x, y) for _ in range(4)]
    b = [plain(x, y) for _ in range(4)]
    np.testing.assert_allclose(a, b, rtol=1e-5)
    assert a[-1] < a[0]


def test_recomputation_with_depthwise_gradients_follows_the_plain_step(model):
    """Segments (recomputation) hold depthwise gradients without their forward conv: they take the blocked forms too."""
    _, g = model
    x, y = data()
    plain = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=0.1, momentum=0.9), layout=False)
    recomputed = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=0.1, momentum=0.9), segments=2)
    assert any("kiln.DepthwiseConvNCHWc" in grp["ops"] for c in recomputed._bwds for grp in c.exe.groups())
    a = [recomputed(x, y) for _ in range(3)]
    b = [plain(x, y) for _ in range(3)]
    np.testing.assert_allclose(a, b, rtol=1e-5)
