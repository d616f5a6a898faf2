"""Convolutions whose channels no vector divides (ShuffleNetV2's 58, 116,
232; MobileNet's 24; the 3-channel stem) through the graph compiler against
PyTorch: the blocked layout pads such channels to whole vectors (zero
weights, a zero-padded input block, sliced outputs), and what runs over the
padding must never leak into the true channels. On the host target and, on
an AVX-512 host, an AVX2 one (8 lanes: other blocks and other padding)."""

import numpy as np
import pytest

from kiln_helpers import check_against_torch, compile_torch, cpu_targets, host_has_avx512

torch = pytest.importorskip("torch")


TARGETS = cpu_targets()




@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("cin,cout", [(3, 24), (24, 58), (58, 58), (58, 116), (116, 116), (232, 232), (3, 58)])
@pytest.mark.parametrize("kernel,stride", [(1, 1), (3, 1), (3, 2)])
def test_conv_bias_relu_matches_pytorch(target, cin, cout, kernel, stride):
    torch.manual_seed(cin * 1000 + cout)
    net = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, kernel, stride, kernel // 2), torch.nn.ReLU())
    exe = check_against_torch(net, torch.randn(1, cin, 9, 10), target)
    # The bias and relu fuse into the conv even over padded channels.
    assert any(g["ops"].startswith("kiln.ConvNCHWc") and g["ops"].endswith("Relu") for g in exe.groups())


@pytest.mark.parametrize("target", TARGETS)
def test_stem_7x7_stride_2_matches_pytorch(target):
    torch.manual_seed(7)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, 2, 3), torch.nn.ReLU())
    check_against_torch(net, torch.randn(1, 3, 30, 30), target)


@pytest.mark.parametrize("target", TARGETS)
def test_padded_channels_stay_blocked_through_a_shufflenet_branch(target):
    # ShuffleNetV2's branch: 1x1 conv + BN + ReLU, 3x3 depthwise + BN, 1x1 conv + BN + ReLU,
    # 58 channels throughout, then a Winograd-sized 3x3 conv (16x16 output) and a Sigmoid gate.
    torch.manual_seed(5)
    bn = lambda c: torch.nn.BatchNorm2d(c)  # noqa: E731
    net = torch.nn.Sequential(torch.nn.Conv2d(58, 58, 1, bias=False), bn(58), torch.nn.ReLU(),
                              torch.nn.Conv2d(58, 58, 3, 1, 1, groups=58, bias=False), bn(58),
                              torch.nn.Conv2d(58, 58, 1, bias=False), bn(58), torch.nn.ReLU(),
                              torch.nn.Conv2d(58, 116, 3, 1, 1), torch.nn.Sigmoid(), torch.nn.Conv2d(116, 116, 1))
    g = torch.Generator().manual_seed(0)
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    exe = check_against_torch(net, torch.randn(1, 58, 16, 16), target)
    ops = [g["ops"] for g in exe.groups()]
    # Blocked from the model's input to its output: one transform at each edge.
    assert sum(o.count("kiln.LayoutTransform") for o in ops) == 2, ops
    # The 58 -> 58 1x1 convs run as 64 -> 64 in whole vectors (8 or 16 lanes), not in blocks of 2.
    one_by_one = sorted(g["flop"] for g in exe.groups() if g["ops"].startswith("kiln.ConvNCHWc"))[:2]
    conv_flop = 2 * 64 * 64 * 16 * 16  # the epilogue (bias, relu) adds a few per output
    assert all(conv_flop <= f < 1.05 * conv_flop for f in one_by_one), one_by_one


class _ReciprocalBetweenConvs(torch.nn.Module):
    # 1 / y is inf where y is 0, as a padded channel of a conv without bias is: run over
    # the padding, the next conv's zero weights would make it 0 * inf = NaN in every true channel.
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(58, 58, 1, bias=False), torch.nn.Conv2d(58, 58, 1)

    def forward(self, x):
        return self.b(1.0 / self.a(x))


@pytest.mark.parametrize("target", TARGETS)
def test_an_op_that_makes_inf_of_zero_never_runs_over_padding(target):
    torch.manual_seed(6)
    net = _ReciprocalBetweenConvs()
    x = torch.randn(1, 58, 6, 6)
    exe = compile_torch(net, x, target)
    (y,) = exe(x.numpy())
    assert np.isfinite(y).all()
    with torch.no_grad():
        ref = net(x).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-3 * np.max(np.abs(ref)))


class _InvertedResidual(torch.nn.Module):
    # MobileNetV2's block at 24 channels: 1x1 expansion to 144 + ReLU6, 3x3 depthwise + ReLU6,
    # 1x1 projection back to 24, plus the input.
    def __init__(self):
        super().__init__()
        self.expand = torch.nn.Conv2d(24, 144, 1)
        self.dw = torch.nn.Conv2d(144, 144, 3, 1, 1, groups=144)
        self.project = torch.nn.Conv2d(144, 24, 1)

    def forward(self, x):
        return x + self.project(torch.clamp(self.dw(torch.clamp(self.expand(x), 0, 6)), 0, 6))


@pytest.mark.parametrize("target", TARGETS)
def test_24_channels_run_as_whole_vectors(target):
    # 24 channels on AVX-512 take 32 (two whole vectors, 8 of them padding), not blocks of 12: the
    # projection's tile shares each broadcast input between two vectors. On AVX2 8 lanes divide 24.
    torch.manual_seed(24)
    exe = check_against_torch(_InvertedResidual().eval(), torch.randn(1, 24, 12, 12), target)
    groups = exe.groups()
    assert sum(g["ops"].count("kiln.LayoutTransform") for g in groups) == 2, [g["ops"] for g in groups]
    (project,) = [g for g in groups if g["name"].endswith("/project/Conv")]
    out_channels = 32 if target == "llvm" and host_has_avx512() else 24
    conv_flop = 2 * 144 * out_channels * 12 * 12  # the epilogue (bias, residual) adds a few per output
    assert conv_flop <= project["flop"] < 1.05 * conv_flop, project["flop"]
