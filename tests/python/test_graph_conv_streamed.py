"""3x3 convolutions whose weights for one block of output channels outgrow
L2's share (ResNet-18's last stage: 512 -> 512 at 7 x 7, beside the
256 -> 512 stride-2 one, which stays below the bar) through the graph
compiler against PyTorch. On a target of 32 vector registers (AVX-512) the
512 -> 512 conv's default schedule streams the channel blocks (the
accumulator outside the reduction's channel blocks, every row of tiles
inside each step: search_space_seeds.cpp, default_streams_windows); an AVX2
target keeps the register tile that runs the whole reduction."""

import re

import pytest

import kiln
from kiln_helpers import check_against_torch, cpu_targets

torch = pytest.importorskip("torch")


class _Tail(torch.nn.Module):
    """A basic block of ResNet's last stage, its shortcut a 1x1 stride-2 conv."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(256, 512, 3, 2, 1)
        self.conv2 = torch.nn.Conv2d(512, 512, 3, 1, 1)
        self.down = torch.nn.Conv2d(256, 512, 1, 2, 0)

    def forward(self, x):
        return torch.relu(self.conv2(torch.relu(self.conv1(x))) + self.down(x))


@pytest.mark.parametrize("target", cpu_targets())
def test_wide_3x3_convs_match_pytorch(target):
    torch.manual_seed(18)
    exe = check_against_torch(_Tail(), torch.randn(1, 256, 14, 14), target)
    convs = {g["name"].split(" @ ")[-1]: g["schedule_detail"] for g in exe.groups() if g["ops"].startswith("kiln.ConvNCHWc")}
    wide = [d for name, d in convs.items() if "conv2" in name]
    narrow = [d for name, d in convs.items() if d not in wide]
    assert len(wide) == 1 and len(narrow) == 2, list(convs)
    streams = kiln.Target(target).num_vector_registers > 16
    assert ("conv.location=1" in wide[0]) == streams, wide[0]
    assert all("conv.location=0" in d for d in narrow), narrow


class _Bottleneck(torch.nn.Module):
    """ResNet-50's layer4 bottleneck without its 3x3: 2048 -> 512 -> 2048 at 7 x 7 (4 MiB of weights each),
    with the residual; beside it a 512 -> 512 1x1 whose 1 MiB stays in L2."""

    def __init__(self):
        super().__init__()
        self.reduce = torch.nn.Conv2d(2048, 512, 1)
        self.mid = torch.nn.Conv2d(512, 512, 1)
        self.expand = torch.nn.Conv2d(512, 2048, 1)

    def forward(self, x):
        return torch.relu(self.expand(torch.relu(self.mid(torch.relu(self.reduce(x))))) + x)


@pytest.mark.parametrize("target", cpu_targets())
def test_large_1x1_convs_stream_their_weights_and_match_pytorch(target):
    """On a target of 32 vector registers (AVX-512), 1x1 convs whose weights outgrow every target's L2 over a
    7 x 7 image stream their channel blocks by default (search_space_seeds.cpp, streams_from_l3): each
    weight fetched once for the image's 49 pixels; the 1 MiB conv keeps the plain register tile. An AVX2
    target keeps its own rule (default_streams: blocks of 32 KiB of weights and more stream, here the
    2048 -> 512 one's 64 KiB blocks of 8 channels; the others' 16 KiB do not). The streamed AVX-512 convs
    take one-vector channel blocks; the output is checked against PyTorch across the relayouts between."""
    torch.manual_seed(50)
    exe = check_against_torch(_Bottleneck(), torch.randn(1, 2048, 7, 7), target)
    convs = {g["name"].split(" @ ")[-1].split("/")[1]: g["schedule_detail"] for g in exe.groups() if g["ops"].startswith("kiln.ConvNCHWc")}
    assert sorted(convs) == ["expand", "mid", "reduce"], list(convs)
    streamed = {name for name, d in convs.items() if "conv.location=1" in d}
    avx512 = kiln.Target(target).num_vector_registers > 16
    assert streamed == ({"reduce", "expand"} if avx512 else {"reduce"}), convs
    # The AVX-512 streamed ones run in one-vector channel blocks (layout_defaults.cpp,
    # streams_weights_from_l3), the 1 MiB conv between them in two; AVX2 in one throughout
    # (7 x 7 outputs: default_conv_cap). A block is the innermost factor of conv.fi.
    lanes = kiln.Target(target).natural_lanes()
    blocks = {name: int(re.search(r"conv\.fi=(?:\d+x)*(\d+)", d).group(1)) for name, d in convs.items()}
    assert blocks == ({"reduce": lanes, "mid": 2 * lanes, "expand": lanes} if avx512 else dict.fromkeys(convs, lanes)), blocks
