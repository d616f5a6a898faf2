"""ShuffleNet's channel shuffle (Reshape [N, g, C/g, H, W], Transpose, Reshape back) and the
joins and pieces around it stay in the blocked NCHWc layout: the shuffle is an index map on
the blocks (kiln.ChannelPermuteNCHWc), or folds into the weights of a conv that reads it; a
Concat of channels no block divides (58 + 58 padded to whole vectors) joins the blocked
inputs (kiln.ChannelConcatNCHWc); part-block Slices and Splits, and pieces of a shuffle,
read the blocked source. Equal to PyTorch at batch 1 and 3, odd channel counts included, on
the host target and, on an AVX-512 host, an AVX2 one; and with a symbolic batch."""

import numpy as np
import pytest

import kiln
from kiln_helpers import check_against_torch, cpu_targets, randomize_batch_norms

torch = pytest.importorskip("torch")
nn = torch.nn

TARGETS = cpu_targets()


def shuffle(x, groups):
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


def conv_bn_relu(i, o, k=1, stride=1, groups=1, relu=True):
    layers = [nn.Conv2d(i, o, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(o)]
    return nn.Sequential(*layers, *([nn.ReLU()] if relu else []))


class Unit(nn.Module):
    """ShuffleNetV2's unit: stride 1 splits the channels in halves (chunk: two Slices), one half
    through 1x1 - depthwise 3x3 - 1x1, joined and shuffled; stride 2 runs both branches on the input."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride == 2:
            self.branch1 = nn.Sequential(conv_bn_relu(cin, cin, 3, 2, cin, relu=False), conv_bn_relu(cin, half))
        self.branch2 = nn.Sequential(conv_bn_relu(cin if stride == 2 else half, half), conv_bn_relu(half, half, 3, stride, half, relu=False),
                                     conv_bn_relu(half, half))

    def forward(self, x):
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat((a, self.branch2(b)), 1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), 1)
        return shuffle(out, 2)


class Stage(nn.Module):
    """A stem conv, a stride-2 unit, stride-1 units, then a 1x1 conv (which takes the last shuffle into its weights)."""

    def __init__(self, channels, units=2, head=True):
        super().__init__()
        self.stem = conv_bn_relu(3, 24, 3, 2)
        self.units = nn.Sequential(Unit(24, channels, 2), *[Unit(channels, channels, 1) for _ in range(units)])
        self.head = conv_bn_relu(channels, 64) if head else nn.Identity()

    def forward(self, x):
        return self.head(self.units(self.stem(x)))


def _transforms(exe):
    return sum(g["ops"].split("+").count("kiln.LayoutTransform") for g in exe.groups())


def _ops(exe):
    return [op for g in exe.groups() for op in g["ops"].split("+")]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("channels,batch", [(116, 1), (116, 3), (64, 1), (26, 3)])
def test_shuffle_units_stay_blocked(target, channels, batch):
    # 116: halves of 58, padded to whole vectors; 64: whole blocks; 26: halves of 13 (odd).
    torch.manual_seed(channels + batch)
    net = Stage(channels)
    randomize_batch_norms(net, channels)
    exe = check_against_torch(net.eval(), torch.randn(batch, 3, 20, 18), target)
    ops = _ops(exe)
    # Only the model's input into the blocks and its output out of them: no relayout around a shuffle, join or half.
    assert _transforms(exe) == 2, [g["ops"] for g in exe.groups()]
    assert "Transpose" not in ops and "Reshape" not in ops, ops
    assert "kiln.ChannelPermuteNCHWc" in ops


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("channels,groups", [(96, 3), (58, 2), (60, 4)])
def test_shuffle_read_by_a_conv_folds_into_its_weights(target, channels, groups):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(8, channels, 3, padding=1)
            self.b = nn.Conv2d(channels, 40, 1)

        def forward(self, x):
            return self.b(shuffle(torch.relu(self.a(x)), groups))

    torch.manual_seed(channels)
    exe = check_against_torch(Net(), torch.randn(2, 8, 9, 7), target)
    ops = _ops(exe)
    assert _transforms(exe) == 2, [g["ops"] for g in exe.groups()]
    assert "kiln.ChannelPermuteNCHWc" not in ops and "Transpose" not in ops, ops


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("channels,groups", [(64, 2), (58, 2), (45, 3)])
def test_shuffle_read_by_other_ops_is_a_blocked_index_map(target, channels, groups):
    # Read by a pool and an add: no conv to fold into, the shuffle runs on the blocks.
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(8, channels, 3, padding=1)
            self.b = nn.Conv2d(channels, 16, 1)

        def forward(self, x):
            y = self.a(x)
            s = shuffle(y, groups)
            return self.b(nn.functional.max_pool2d(s, 2) + nn.functional.max_pool2d(y, 2))

    torch.manual_seed(channels + groups)
    exe = check_against_torch(Net(), torch.randn(3, 8, 10, 10), target)
    assert _transforms(exe) == 2, [g["ops"] for g in exe.groups()]
    assert "kiln.ChannelPermuteNCHWc" in _ops(exe)


class PaddedJoin(nn.Module):
    """Two conv branches of e1 and e3 channels joined, a part-block slice of the join added, then a 1x1 conv."""

    def __init__(self, e1, e3, lo, hi):
        super().__init__()
        self.lo, self.hi = lo, hi
        self.a = nn.Conv2d(16, e1, 1)
        self.b = nn.Conv2d(16, e3, 3, padding=1)
        self.c = nn.Conv2d(hi - lo, e1 + e3, 1)
        self.out = nn.Conv2d(e1 + e3, 24, 1)

    def forward(self, x):
        y = torch.cat([self.a(x), torch.relu(self.b(x))], 1)
        return self.out(y + self.c(y[:, self.lo:self.hi]))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("e1,e3,lo,hi,batch", [(58, 58, 0, 58, 1), (20, 44, 4, 36, 3), (3, 5, 1, 6, 1), (32, 29, 16, 61, 3)])
def test_joins_and_slices_of_part_blocks_stay_blocked(target, e1, e3, lo, hi, batch):
    torch.manual_seed(e1 + e3 + lo)
    exe = check_against_torch(PaddedJoin(e1, e3, lo, hi), torch.randn(batch, 16, 7, 9), target)
    assert _transforms(exe) == 2, [g["ops"] for g in exe.groups()]
    assert "kiln.ChannelConcatNCHWc" in _ops(exe)


def test_shuffle_units_with_a_symbolic_batch_match_pytorch():
    torch.manual_seed(5)
    net = Stage(116, units=1).eval()
    randomize_batch_norms(net, 5)
    g = kiln.graph.from_torch(net, torch.randn(2, 3, 20, 18), shapes={"input0": ("batch", 3, 20, 18)})
    exe = kiln.compile(g)
    assert _transforms(exe) == 2, [g["ops"] for g in exe.groups()]
    for b in (1, 3):
        x = torch.randn(b, 3, 20, 18)
        with torch.no_grad():
            ref = net(x).numpy()
        (y,) = exe.run([x.numpy()])
        assert np.max(np.abs(y - ref)) / np.max(np.abs(ref)) <= 1e-4
