"""3x3 convolutions whose weights for one block of output channels outgrow
L2's share (ResNet-18's last stage: 256 -> 512 at stride 2, 512 -> 512 at
7 x 7) through the graph compiler against PyTorch. On a target of 32 vector
registers (AVX-512) their default schedule streams the channel blocks (the
accumulator outside the reduction's channel blocks, every row of tiles
inside each step: search_space_seeds.cpp, default_streams_windows); an AVX2
target keeps the register tile that runs the whole reduction."""

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
    details = [g["schedule_detail"] for g in exe.groups() if g["ops"].startswith("kiln.ConvNCHWc") and "Relu" in g["ops"]]
    assert len(details) == 2, [g["ops"] for g in exe.groups()]
    streams = kiln.Target(target).num_vector_registers > 16
    for d in details:
        assert ("conv.location=1" in d) == streams, d
