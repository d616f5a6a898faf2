"""A squeeze-excitation block (EfficientNet's, MobileNetV3's: global pool,
two 1x1 convs, a sigmoid, the product of the block's input with that
per-channel scale) stays in the blocked NCHWc layout: the [N, C, 1, 1]
scale is blocked like the activations and broadcast over the pixels, with
no relayout of the activations to NCHW and back around the product. Equal
to PyTorch at channel counts a block divides and ones it pads (24, 40, 58),
batch 1 and 2, on the host target and, on an AVX-512 host, an AVX2 one."""

import pytest

from kiln_helpers import check_against_torch, cpu_targets

torch = pytest.importorskip("torch")
nn = torch.nn


TARGETS = cpu_targets()


class SEBlock(nn.Module):
    """1x1 expansion + SiLU, depthwise 3x3 + SiLU, squeeze-excitation, 1x1 projection."""

    def __init__(self, cin, mid, squeeze, cout, scale_first=False):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1), nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, 3, padding=1, groups=mid), nn.SiLU())
        self.fc1, self.fc2 = nn.Conv2d(mid, squeeze, 1), nn.Conv2d(squeeze, mid, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)  # torchvision's: ONNX GlobalAveragePool
        self.project = nn.Conv2d(mid, cout, 1)
        self.scale_first = scale_first

    def forward(self, x):
        h = self.dw(self.expand(x))
        s = torch.sigmoid(self.fc2(torch.nn.functional.silu(self.fc1(self.pool(h)))))
        return self.project(s * h if self.scale_first else h * s)


def _transforms(exe):
    return sum(g["ops"].count("kiln.LayoutTransform") for g in exe.groups())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("cin,mid,squeeze,cout", [(16, 64, 8, 32), (24, 96, 6, 40), (40, 240, 10, 80), (24, 58, 4, 24)])
def test_se_block_stays_blocked(target, cin, mid, squeeze, cout):
    torch.manual_seed(mid + squeeze)
    exe = check_against_torch(SEBlock(cin, mid, squeeze, cout), torch.randn(1, cin, 14, 12), target)
    # Only the model's boundaries: the input into the blocks, the output out of them.
    assert _transforms(exe) == 2, [g["ops"] for g in exe.groups()]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("batch", [1, 2])
def test_se_scale_on_either_side_and_batches_match_pytorch(target, batch):
    # s * h (the scale first) and a batch of 2 (one scale per image: [2, C, 1, 1] against [2, C, H, W]).
    torch.manual_seed(5 + batch)
    exe = check_against_torch(SEBlock(32, 128, 8, 32, scale_first=True), torch.randn(batch, 32, 9, 11), target)
    assert _transforms(exe) == 2, [g["ops"] for g in exe.groups()]


@pytest.mark.parametrize("target", TARGETS)
def test_scale_broadcast_from_one_image_matches_pytorch(target):
    # A [1, C, 1, 1] scale (a learned per-channel parameter computed from the first image) against a batch of 3.
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(16, 32, 3, padding=1), nn.Conv2d(32, 16, 1)

        def forward(self, x):
            h = self.a(x)
            return self.b(h * torch.sigmoid(torch.nn.functional.adaptive_avg_pool2d(h[:1], 1)))

    torch.manual_seed(12)
    check_against_torch(Net(), torch.randn(3, 16, 8, 8), target)


@pytest.mark.parametrize("target", TARGETS)
def test_blocked_scale_of_a_plain_tensor_matches_pytorch(target):
    # The scale comes out of a blocked conv, the large operand is the model's input in NCHW: the product stays in NCHW.
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Conv2d(32, 32, 1)

        def forward(self, x):
            return torch.relu(x) * torch.sigmoid(self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1)))

    torch.manual_seed(13)
    exe = check_against_torch(Net(), torch.randn(1, 32, 10, 10), target)
    # No relayout of the 32 x 10 x 10 operand: only the [1, 32, 1, 1] values cross layouts.
    assert not any("Mul" in g["ops"] and g["ops"].count("kiln.LayoutTransform") > 1 for g in exe.groups()), [g["ops"] for g in exe.groups()]
