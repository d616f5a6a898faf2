"""The grouped conv's hand schedule (ops/src/cpu_grouped_conv.cpp: the padding computed per row of
register tiles, a tile of one group's output blocks) against PyTorch: ResNeXt's 32 groups of 4, 8, 16
and 32 channels at stride 1 and 2 on odd image sizes, a batch of images, RegNet's padded groups of 8;
on the host target and, on an AVX-512 host, an AVX2 one. Each test also checks that the grouped conv's
group took the hand schedule (its schedule_detail), and KILN_GROUPED_CONV=0 the rules' default."""
import pytest

from kiln_helpers import check_against_torch, cpu_targets

torch = pytest.importorskip("torch")

TARGETS = cpu_targets()
HAND = "grouped conv rows:"


def _bottleneck(channels, groups, stride, out_channels=None):
    # ResNeXt's middle: 1x1 conv + relu, grouped 3x3 conv + bias + relu, 1x1 conv.
    return torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 1), torch.nn.ReLU(),
                               torch.nn.Conv2d(channels, channels, 3, stride, 1, groups=groups), torch.nn.ReLU(),
                               torch.nn.Conv2d(channels, out_channels or channels, 1))


def _grouped_detail(exe):
    (group,) = [g for g in exe.groups() if g["name"].endswith("/2/Conv")]
    assert group["ops"].startswith("kiln.ConvNCHWc"), group["ops"]
    return group["schedule_detail"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("per_group", [4, 8, 16, 32])
@pytest.mark.parametrize("stride", [1, 2])
def test_resnext_grouped_convs_match_pytorch(target, per_group, stride):
    torch.manual_seed(per_group * 10 + stride)
    channels = 32 * per_group
    # Odd sizes: 13 x 11 gives 7 x 6 at stride 2 (prime widths, tiles with a tail).
    exe = check_against_torch(_bottleneck(channels, 32, stride, out_channels=32), torch.randn(1, channels, 13, 11), target)
    assert _grouped_detail(exe).startswith(HAND), _grouped_detail(exe)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("stride", [1, 2])
def test_a_batch_of_images_matches_pytorch(target, stride):
    # Images x groups x rows of tiles in one parallel loop.
    torch.manual_seed(3 + stride)
    exe = check_against_torch(_bottleneck(256, 32, stride), torch.randn(3, 256, 9, 10), target)
    assert _grouped_detail(exe).startswith(HAND), _grouped_detail(exe)


@pytest.mark.parametrize("target", TARGETS)
def test_regnet_padded_groups_match_pytorch(target):
    # RegNetY-400MF's 104 channels in 13 groups of 8: blocks spanning two groups, the last one padded on AVX-512.
    torch.manual_seed(13)
    exe = check_against_torch(_bottleneck(104, 13, 2), torch.randn(1, 104, 15, 15), target)
    assert _grouped_detail(exe).startswith(HAND), _grouped_detail(exe)


@pytest.mark.parametrize("target", TARGETS)
def test_resnext_stride2_tile_comes_from_the_target(target):
    # ResNeXt-50's layer3 stride-2 conv (512 channels, 16 a group, 28 x 28 -> 14 x 14): one vector a block
    # on AVX-512 takes 2 rows of 14 pixels (28 accumulators of 32); AVX2's two-vector blocks 2 x 2.
    from kiln_helpers import host_has_avx512
    torch.manual_seed(5)
    exe = check_against_torch(_bottleneck(512, 32, 2, out_channels=16), torch.randn(1, 512, 28, 28), target)
    avx512 = target == "llvm" and host_has_avx512()
    assert _grouped_detail(exe) == HAND + (" 1 blocks x 2 x 14 pixels" if avx512 else " 1 blocks x 2 x 2 pixels"), _grouped_detail(exe)


def test_the_switch_keeps_the_rules_default(monkeypatch):
    # KILN_GROUPED_CONV=0 (A/B runs): the search space's default candidate, the same result.
    monkeypatch.setenv("KILN_GROUPED_CONV", "0")
    torch.manual_seed(7)
    exe = check_against_torch(_bottleneck(128, 32, 2), torch.randn(1, 128, 12, 12), "llvm")
    assert "sketch" in _grouped_detail(exe) and HAND not in _grouped_detail(exe), _grouped_detail(exe)
    # A dense conv never takes the grouped schedule.
    monkeypatch.delenv("KILN_GROUPED_CONV")
    exe = check_against_torch(_bottleneck(128, 1, 2), torch.randn(1, 128, 12, 12), "llvm")
    assert HAND not in _grouped_detail(exe), _grouped_detail(exe)
