"""ResNet-style convnets compiled once over a symbolic batch, and over symbolic height and width (issue 49):
every size (1, primes, larger) against PyTorch on an AVX2 and an AVX-512 target; with a symbolic batch the
3x3 convs take the Winograd form the likely batch's static compile would, and its products run full register
tiles with the last tile peeled (loop_partition), not a row loop of run-time length."""
import os

import numpy as np
import pytest
import torch

import kiln
from kiln import te
from kiln._ffi import _kiln
from kiln_helpers import host_has_avx512

AVX2 = "llvm -mcpu=znver3 -num-cores=2"
AVX512 = "llvm -mcpu=skylake-avx512 -num-cores=2"


TARGETS = [AVX2, pytest.param(AVX512, marks=pytest.mark.skipif(not host_has_avx512(), reason="no AVX-512 on this machine"))]


class Block(torch.nn.Module):
    """A ResNet basic block (conv-bn-relu-conv-bn, identity or 1x1 stride-2 shortcut, relu)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride, bias=False), torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


def resnet_stage(cin=16, c=32):
    torch.manual_seed(0)
    net = torch.nn.Sequential(Block(cin, c, 1), Block(c, 2 * c, 2)).eval()
    with torch.no_grad():  # batch norm statistics that are not the identity
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return net


def to_onnx(net, tmp_path, example, axes):
    path = os.fspath(tmp_path / "net.onnx")
    torch.onnx.export(net, (example,), path, input_names=["x"], opset_version=13, dynamic_axes={"x": axes})
    return path


def check(exe, net, shapes):
    rng = np.random.default_rng(49)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = net(torch.from_numpy(x)).numpy()
        got = exe.run([x])[0]
        assert got.shape == want.shape
        err = np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want))))
        assert err <= 1e-4, (shape, err)


@pytest.mark.parametrize("target", TARGETS)
def test_resnet_blocks_over_a_symbolic_batch(tmp_path, target):
    net = resnet_stage()
    path = to_onnx(net, tmp_path, torch.randn(1, 16, 28, 28), {0: "batch"})
    g = kiln.graph.from_onnx(path, shapes={"x": ("batch", 16, 28, 28)})
    exe = kiln.compile(g, target=target, sizes={"batch": [8]})
    assert any(grp["ops"].startswith("kiln.WinogradMatMul") for grp in exe.groups())
    check(exe, net, [(b, 16, 28, 28) for b in (1, 2, 3, 5, 7, 13)])


@pytest.mark.parametrize("target", TARGETS)
def test_resnet_blocks_over_symbolic_height_and_width(tmp_path, target):
    net = resnet_stage(8, 16)
    path = to_onnx(net, tmp_path, torch.randn(1, 8, 20, 20), {0: "batch", 2: "h", 3: "w"})
    g = kiln.graph.from_onnx(path, shapes={"x": ("batch", 8, "h", "w")})
    exe = kiln.compile(g, target=target)
    check(exe, net, [(1, 8, 1, 1), (1, 8, 13, 13), (2, 8, 16, 9), (3, 8, 23, 31), (1, 8, 40, 40)])


def conv_7x7(tmp_path, channels=64):
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU()).eval()
    path = to_onnx(net, tmp_path, torch.randn(1, channels, 7, 7), {0: "batch"})
    return net, kiln.graph.from_onnx(path, shapes={"x": ("batch", channels, 7, 7)})


def test_a_symbolic_batch_takes_winograd_at_its_likely_size(tmp_path):
    # 7x7 outputs have 16 2x2 tiles an image: too few alone, enough at a likely batch of 8 (as its static compile).
    net, g = conv_7x7(tmp_path)
    exe = kiln.compile(g, target=AVX2, sizes={"batch": [8]})
    ops = [grp["ops"] for grp in exe.groups()]
    assert any(o.startswith("kiln.WinogradMatMul") for o in ops), ops
    check(exe, net, [(b, 64, 7, 7) for b in (1, 2, 3, 8, 11)])
    # A likely batch of one keeps it direct, as the static compile of one image does.
    single = kiln.compile(g, target=AVX2, sizes={"batch": [1]})
    assert not any(grp["ops"].startswith("kiln.Winograd") for grp in single.groups())


def winograd_products(target, rows_per_image=49):
    """Winograd F(2x2)'s 16 products over a symbolic batch's tiles (49 an image: 14x14 outputs), default schedule."""
    b = te.var("batch")
    V = te.placeholder((16, 8, b * rows_per_image, 32), name="V")
    U = te.placeholder((16, 8, 8, 32, 32), name="U")
    rco, rci = te.reduce_axis((0, 8), "rco"), te.reduce_axis((0, 32), "rci")
    M = te.compute((16, 8, b * rows_per_image, 32),
                   lambda e, ko, p, ki: te.sum(V[e, rco, p, rci] * U[e, ko, rco, rci, ki], axis=[rco, rci]), name="wmm")
    args = [V, U, M]
    task = _kiln.tuner.make_task(args, target, "", {"batch": 8})
    return args, _kiln.Schedule.from_trace(task.outputs, _kiln.tuner.default_trace(task))


@pytest.mark.parametrize("target", TARGETS)
def test_winograd_products_over_a_symbolic_batch_run_full_register_tiles(target):
    args, s = winograd_products(target)
    text = str(kiln.lower(s, args))
    # The loop over the row tiles splits where the last (clamped) tile starts: the full tiles' rows are
    # unrolled register slots, with no row loop of run-time length (a clamped min/max extent) among them.
    pieces = text.split("for (p.outer")
    assert len(pieces) >= 3, text
    main = pieces[1].split("\n", 1)[1]  # the full tiles' body, after the loop's own (clamped) extent
    assert "max(min(" not in main and "for (p.inner" not in main, main
    mod = kiln.build(s, args, target)
    rng = np.random.default_rng(3)
    for batch in (1, 2, 3, 5):  # 49 to 245 rows: the last tile partial or whole
        v = rng.standard_normal((16, 8, batch * 49, 32)).astype(np.float32)
        u = rng.standard_normal((16, 8, 8, 32, 32)).astype(np.float32)
        out = np.zeros((16, 8, batch * 49, 32), np.float32)
        mod(v, u, out, batch)  # the rows are batch * 49: batch cannot be read off an array
        np.testing.assert_allclose(out, np.einsum("ecpi,ekcij->ekpj", v, u), rtol=1e-4, atol=1e-3)
