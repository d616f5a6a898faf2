"""A 3x3 stride-2 conv whose padded input outgrows 1 MiB (ResNet-50's layer2 entry: 128 -> 128 at 56 x 56)
reads its input with the padding inlined by default, where a smaller one (256 -> 256 at 28 x 28) or a
stride-1 one stores the padded copy first (kInlinePadBytes, ops/src/search_space.cpp); all against PyTorch,
on the host and an AVX2 target."""
import pytest

from kiln_helpers import check_against_torch, cpu_targets

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("target", cpu_targets())
@pytest.mark.parametrize("channels,side,kernel,stride,inlined", [(128, 56, 3, 2, True), (256, 28, 3, 2, False), (96, 56, 5, 1, False)])
def test_large_padded_input_is_inlined_and_matches_pytorch(target, channels, side, kernel, stride, inlined):
    """(A stride-1 3x3 conv runs as Winograd: the stride-1 case is a 5x5, 96 channels padded to 1.3 MiB.)"""
    torch.manual_seed(channels)
    net = torch.nn.Sequential(torch.nn.Conv2d(channels, channels, kernel, stride, kernel // 2), torch.nn.ReLU())
    exe = check_against_torch(net, torch.randn(1, channels, side, side), target)
    (conv,) = [g["schedule_detail"] for g in exe.groups() if g["ops"].startswith("kiln.ConvNCHWc")]
    assert ("conv.pad: inline" in conv) == inlined, conv
