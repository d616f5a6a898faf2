"""kiln.train in the blocked layout (graph/src/passes/train_layout.cpp): a
training step's convolutions, batch norms, ReLUs, residual adds and pools,
and their gradients, run on NCHWc tensors, with layout changes only at the
graph's edges; the gradients are PyTorch autograd's, and the losses those of
the NCHW step (kiln.train.compile(layout=False))."""
import collections
import re

import numpy as np
import pytest
import torch

import kiln
from kiln import graph as kg


class SmallResNet(torch.nn.Module):
    """Channels no block divides (3, 24, 20), stride 2, padding, a residual add, max and average pools, a conv bias."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 24, 3, stride=2, padding=1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(24)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.c2 = torch.nn.Conv2d(24, 24, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(24)
        self.c3 = torch.nn.Conv2d(24, 20, 1, stride=2, bias=True)
        self.b3 = torch.nn.BatchNorm2d(20)
        self.fc = torch.nn.Linear(20, 5)

    def forward(self, x):
        x = self.pool(torch.relu(self.b1(self.c1(x))))
        x = torch.relu(self.b2(self.c2(x)) + x)
        x = torch.relu(self.b3(self.c3(x)))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def data():
    rng = np.random.default_rng(3)
    return rng.standard_normal((4, 3, 16, 16)).astype(np.float32), np.array([0, 1, 2, 4])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    module = SmallResNet()
    x, _ = data()
    return module, kiln.train.from_torch(module, x)


def large_transforms(graph):
    """The lines of the kiln.LayoutTransform nodes of an activation (pixels > 1), not of a per-channel vector."""
    out = []
    for line in str(graph).splitlines():
        m = re.search(r"= kiln\.LayoutTransform\(.*: \w+\[([\d, ]+)\]", line)
        if m:
            shape = [int(d) for d in m.group(1).split(",")]
            if shape[2] * shape[3] > 1:
                out.append(line.strip())
    return out


def test_layout_changes_only_at_the_edges(model):
    _, g = model
    step = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=0.1))
    opt = kg.optimize(step.graph, "llvm", False)
    ops = collections.Counter(opt.op_types())
    assert ops["kiln.ConvNCHWc"] == 3 and ops["kiln.PackConvWeights"] == 3 and ops["Conv"] == 0
    assert ops["kiln.MaxPoolNCHWc"] == 1 and ops["kiln.GlobalAveragePoolNCHWc"] == 1
    assert ops["kiln.ConvGradInputNCHWc"] == 2 and ops["kiln.ConvGradWeightNCHWc"] == 3
    assert ops["kiln.ConvGradInput"] == 0 and ops["kiln.ConvGradWeight"] == 0
    # The one relayout of an activation: the image into the first conv (the
    # others are of per-channel vectors: parameters, statistics, pooled features).
    transforms = large_transforms(opt)
    assert len(transforms) == 1 and "(%input0)" in transforms[0], transforms


def test_gradients_equal_torch_autograd(model):
    module, g = model
    x, y = data()
    # SGD with lr 1 and no momentum: new = old - gradient.
    step = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=1.0))
    old = {n: np.array(v) for n, v in step.parameters.items()}
    loss = step(x, y)
    ref = SmallResNet()
    ref.load_state_dict(module.state_dict())
    ref.train()
    out = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x)), torch.from_numpy(y))
    out.backward()
    assert loss == pytest.approx(out.item(), rel=1e-5)
    params = dict(ref.named_parameters())
    for n in old:
        grad = old[n] - step.parameters[n]
        want = params[n].grad.numpy()
        np.testing.assert_allclose(grad, want, rtol=2e-3, atol=max(2e-5 * np.abs(want).max(), 1e-7), err_msg=n)  # a bias before a batch norm: zero up to rounding


def test_loss_curve_equals_the_nchw_step(model):
    _, g = model
    x, y = data()
    blocked = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=0.1, momentum=0.9))
    plain = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=0.1, momentum=0.9), layout=False)
    ops = lambda step: " ".join(grp["ops"] for grp in step._exe.groups())
    assert "kiln.ConvNCHWc" in ops(blocked) and "kiln.ConvNCHWc" not in ops(plain)
    a = [blocked(x, y) for _ in range(4)]
    b = [plain(x, y) for _ in range(4)]
    np.testing.assert_allclose(a, b, rtol=1e-5)
    assert a[-1] < a[0]
    for n in blocked.parameters:
        np.testing.assert_allclose(blocked.parameters[n], plain.parameters[n], rtol=1e-4, atol=1e-6, err_msg=n)
        np.testing.assert_allclose(blocked.buffers.get(n, 0), plain.buffers.get(n, 0))
    for n in blocked.buffers:
        np.testing.assert_allclose(blocked.buffers[n], plain.buffers[n], rtol=1e-5, atol=1e-7, err_msg=n)


def test_recomputation_on_the_blocked_graph_follows_the_plain_step(model):
    _, g = model
    x, y = data()
    plain = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=0.1, momentum=0.9), layout=False)
    recomputed = kiln.train.compile(g, optimizer=kiln.train.SGD(lr=0.1, momentum=0.9), segments=2)
    assert any("kiln.ConvNCHWc" in grp["ops"] for c in recomputed._bwds for grp in c.exe.groups())
    a = [recomputed(x, y) for _ in range(3)]
    b = [plain(x, y) for _ in range(3)]
    np.testing.assert_allclose(a, b, rtol=1e-5)
