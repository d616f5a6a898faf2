"""A Concat of conv branches along the channels (Inception's and SqueezeNet
Fire's joins) stays in the blocked NCHWc layout: where one input block
divides every branch's channels, the blocked inputs join along the block
axis with no relayout to NCHW and back. Where none does (channels padded to
whole vectors, part-vector blocks), the join falls back to NCHW. Either way
equal to PyTorch, on the host target and, on an AVX-512 host, an AVX2 one."""

import pytest

from kiln_helpers import check_against_torch, cpu_targets, randomize_batch_norms

torch = pytest.importorskip("torch")
nn = torch.nn


TARGETS = cpu_targets()


class Fire(nn.Module):
    """SqueezeNet's Fire module, then a 1x1 conv that reads the join."""

    def __init__(self, cin, squeeze, e1, e3, cout):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
        self.e1 = nn.Sequential(nn.Conv2d(squeeze, e1, 1), nn.ReLU())
        self.e3 = nn.Sequential(nn.Conv2d(squeeze, e3, 3, padding=1), nn.ReLU())
        self.out = nn.Conv2d(e1 + e3, cout, 1)

    def forward(self, x):
        s = self.squeeze(x)
        return self.out(torch.cat([self.e1(s), self.e3(s)], 1))


class Inception(nn.Module):
    """A 1x1 stem (so the block's input is blocked), GoogLeNet's Inception block
    (1x1; 1x1-3x3; 1x1-3x3; maxpool-1x1), then a max pool of the join."""

    def __init__(self, cin, c1, r3, c3, r5, c5, cp):
        super().__init__()
        conv = lambda i, o, k: nn.Sequential(nn.Conv2d(i, o, k, padding=k // 2), nn.ReLU())  # noqa: E731
        self.stem = conv(16, cin, 1)
        self.b1 = conv(cin, c1, 1)
        self.b2 = nn.Sequential(conv(cin, r3, 1), conv(r3, c3, 3))
        self.b3 = nn.Sequential(conv(cin, r5, 1), conv(r5, c5, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), conv(cin, cp, 1))
        self.pool = nn.MaxPool2d(2, 2)

    def forward(self, x):
        x = self.stem(x)
        return self.pool(torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1))


def _transforms(exe):
    """LayoutTransform nodes in the fused groups the executor runs."""
    return sum(g["ops"].count("kiln.LayoutTransform") for g in exe.groups())


def _blocked_concat(exe):
    """No join relayouts: it runs blocked, or its branches write into its bytes (a batch of 1: no Concat group)."""
    return not any("Concat" in g["ops"] and "kiln.LayoutTransform" in g["ops"] for g in exe.groups())


def _concat_groups(exe):
    return sum(g["ops"].split("+").count("Concat") for g in exe.groups())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("squeeze,e1,e3", [(16, 64, 64), (32, 128, 128), (48, 32, 96)])
def test_fire_concat_stays_blocked(target, squeeze, e1, e3):
    torch.manual_seed(squeeze + e1)
    exe = check_against_torch(Fire(24, squeeze, e1, e3, 64), torch.randn(1, 24, 13, 13), target)
    # Only the model's boundaries: the input into the blocks, the output out of them.
    assert _transforms(exe) == 2, [g["ops"] for g in exe.groups()]
    assert _blocked_concat(exe)


@pytest.mark.parametrize("target", TARGETS)
def test_inception_concat_stays_blocked(target):
    torch.manual_seed(3)
    exe = check_against_torch(Inception(64, 64, 96, 128, 16, 32, 32), torch.randn(1, 16, 14, 14), target)
    assert _transforms(exe) == 2, [g["ops"] for g in exe.groups()]
    assert _blocked_concat(exe)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("batch", [1, 3])
def test_fire_branches_write_into_their_join(target, batch):
    # The join is read by a conv (no fusion): at a batch of 1 each branch's blocks are one run of the join's
    # bytes, so its kernel writes there and the join needs no kernel. A batch of 3 interleaves the images: it copies.
    torch.manual_seed(4 + batch)
    exe = check_against_torch(Fire(24, 16, 64, 64, 64), torch.randn(batch, 24, 13, 13), target)
    assert _concat_groups(exe) == (0 if batch == 1 else 1), [g["ops"] for g in exe.groups()]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("squeeze,e1,e3", [(16, 58, 58), (16, 24, 40), (8, 3, 5)])
def test_concat_of_channels_no_block_divides_matches_pytorch(target, squeeze, e1, e3):
    # Padded (58) or part-vector blocks (24, 3, 5): the join runs in NCHW, still right.
    torch.manual_seed(e1 + e3)
    check_against_torch(Fire(24, squeeze, e1, e3, 32), torch.randn(1, 24, 11, 9), target)


@pytest.mark.parametrize("target", TARGETS)
def test_concat_with_a_plain_input_matches_pytorch(target):
    # One branch is not a conv (the block input itself): it is relayouted into the join's block.
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(32, 32, 3, padding=1)
            self.out = nn.Conv2d(64, 32, 1)

        def forward(self, x):
            return self.out(torch.cat([self.a(x), torch.relu(x)], 1))

    torch.manual_seed(11)
    exe = check_against_torch(Net(), torch.randn(1, 32, 10, 10), target)
    # The input's, the Relu's into the join's block, the output's; none around the join.
    assert _transforms(exe) == 3, [g["ops"] for g in exe.groups()]


class SplitJoin(nn.Module):
    """A conv's channels split in two (Split), each half through its own conv, joined and read by a 1x1 conv;
    beside it a Slice of the first conv's channels [lo, hi) added to the join."""

    def __init__(self, c, lo, hi):
        super().__init__()
        self.lo, self.hi = lo, hi
        self.first = nn.Sequential(nn.Conv2d(16, c, 1), nn.ReLU())
        half = c // 2
        self.halves = [half, c - half]
        self.a = nn.Conv2d(half, hi - lo, 3, padding=1)
        self.b = nn.Conv2d(c - half, hi - lo, 1)
        self.out = nn.Conv2d(2 * (hi - lo), 32, 1)

    def forward(self, x):
        y = self.first(x)
        p, q = torch.split(y, self.halves, 1)  # ONNX Split
        s = y[:, self.lo:self.hi]
        return self.out(torch.cat([self.a(p) + s, self.b(q)], 1))


@pytest.mark.parametrize("target", TARGETS)
def test_split_and_slice_of_whole_blocks_stay_blocked(target):
    torch.manual_seed(13)
    exe = check_against_torch(SplitJoin(128, 32, 96), torch.randn(1, 16, 12, 12), target)
    assert _transforms(exe) == 2, [g["ops"] for g in exe.groups()]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("c,lo,hi", [(116, 0, 58), (64, 8, 40), (96, 5, 37)])
def test_split_and_slice_of_part_blocks_match_pytorch(target, c, lo, hi):
    # Pieces that are not whole blocks (ShuffleNetV2's 58-channel halves, an offset slice): NCHW, still right.
    torch.manual_seed(c + lo)
    check_against_torch(SplitJoin(c, lo, hi), torch.randn(1, 16, 9, 11), target)


class DenseLayers(nn.Module):
    """DenseNet's layers: each joins every feature before it, then BatchNorm, ReLU, 1x1 conv, 3x3 conv;
    a transition's average pool (exported as a Pad of zeros and the pool) at the end."""

    def __init__(self, c0, growth, layers):
        super().__init__()
        self.stem = nn.Conv2d(8, c0, 3, padding=1)
        self.layers = nn.ModuleList()
        for k in range(layers):
            c = c0 + k * growth
            self.layers.append(nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, 2 * growth, 1), nn.Conv2d(2 * growth, growth, 3, padding=1)))
        self.head = nn.Sequential(nn.BatchNorm2d(c0 + layers * growth), nn.ReLU(), nn.AvgPool2d(2, 2))

    def forward(self, x):
        feats = [self.stem(x)]
        for layer in self.layers:
            feats.append(layer(torch.cat(feats, 1)))
        return self.head(torch.cat(feats, 1))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("c0,growth", [(64, 32), (24, 20)])
def test_dense_joins_and_their_batch_norms_match_pytorch(target, c0, growth):
    torch.manual_seed(c0)
    net = DenseLayers(c0, growth, 3)
    randomize_batch_norms(net, c0)
    exe = check_against_torch(net, torch.randn(1, 8, 10, 10), target)
    if c0 % 32 == 0:  # whole blocks on AVX2 and AVX-512: the joins and the BatchNorms stay blocked
        assert _transforms(exe) == 2, [g["ops"] for g in exe.groups()]
