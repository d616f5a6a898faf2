"""Grouped convolutions (ResNeXt's 3x3 convs of 32 groups, RegNet's) through
the graph compiler against PyTorch: alter_conv_layout runs them blocked
(kiln.ConvNCHWc with group_blocks), a block inside one group or spanning
several groups with block-diagonal weights, so between blocked neighbours
no LayoutTransform is left around them. On the host target and, on an
AVX-512 host, an AVX2 one (8 lanes: other blocks)."""
import io

import numpy as np
import pytest

import kiln
from kiln_helpers import check_against_torch, cpu_targets, host_has_avx512

torch = pytest.importorskip("torch")


TARGETS = cpu_targets()




def _relayouts_around_grouped_conv(target, channels, per_group):
    # Where the neighbours' block is two vectors and the groups are narrower, the grouped conv takes
    # one vector (fewer zero products between groups) at any stride. It reads its input in the
    # neighbours' block where that holds the channels without padding (no relayout in), and the 1x1
    # conv after it reads its one-vector blocks as they come (no relayout out); with padded channels
    # it relayouts in and out.
    lanes = 16 if target == "llvm" and host_has_avx512() else 8
    if not (-(-channels // lanes) * lanes % (2 * lanes) == 0 and per_group < 2 * lanes):
        return 0
    return 0 if channels % (2 * lanes) == 0 else 2


def _bottleneck(channels, groups, stride):
    # ResNeXt's middle: 1x1 conv + relu, grouped 3x3 conv + bias + relu, 1x1 conv.
    return torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 1), torch.nn.ReLU(),
                               torch.nn.Conv2d(channels, channels, 3, stride, 1, groups=groups), torch.nn.ReLU(),
                               torch.nn.Conv2d(channels, channels, 1))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("groups", [2, 4, 32])
@pytest.mark.parametrize("per_group", [4, 8, 16])
@pytest.mark.parametrize("stride", [1, 2])
def test_grouped_conv_stays_blocked_between_blocked_convs(target, groups, per_group, stride):
    torch.manual_seed(groups * 100 + per_group * 10 + stride)
    channels = groups * per_group
    exe = check_against_torch(_bottleneck(channels, groups, stride), torch.randn(1, channels, 9, 10), target)
    ops = [g["ops"] for g in exe.groups()]
    # Blocked from the model's input to its output: one transform at each edge, none around the grouped
    # conv unless it pads its channels to a smaller block that spares it zero products (then one before it and one after).
    assert sum(o.count("kiln.LayoutTransform") for o in ops) == 2 + _relayouts_around_grouped_conv(target, channels, per_group), ops
    # All three convs blocked, the grouped one with its bias and relu fused.
    assert sum(o.startswith("kiln.ConvNCHWc") for o in ops) == 3, ops
    assert sum(o.startswith("kiln.ConvNCHWc") and o.endswith("Relu") for o in ops) == 2, ops
    assert not any(o.startswith("Conv") for o in ops), ops


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("groups", [2, 4, 32])
@pytest.mark.parametrize("stride", [1, 2])
def test_groups_of_24_channels_run_blocked_in_a_block_that_divides_them(target, groups, stride):
    # 24 channels a group: no block of whole vectors divides them (16 or 32 on AVX-512, 16 on AVX2), nor
    # do they divide one, so the grouped conv takes the largest block up to one vector that divides 24,
    # inside one group (12 lanes of AVX-512's 16, 8 on AVX2); its neighbours keep their blocks of whole
    # vectors, with one relayout out beside the model's own two unless its block is whole vectors (8 on
    # AVX2), and one in unless it reads the neighbours' block as it is (a multiple of its own: 16 over 8).
    torch.manual_seed(groups * 10 + stride)
    channels = groups * 24
    exe = check_against_torch(_bottleneck(channels, groups, stride), torch.randn(1, channels, 9, 10), target)
    ops = [g["ops"] for g in exe.groups()]
    assert sum(o.startswith("kiln.ConvNCHWc") for o in ops) == 3 and not any(o.startswith("Conv") for o in ops), ops
    lanes = 16 if target == "llvm" and host_has_avx512() else 8
    block, neighbours = (12 if lanes == 16 else 8), (2 * lanes if channels % (2 * lanes) == 0 else lanes)
    # Out: none where its block is whole vectors (the 1x1 conv after it reads them as they come).
    relayout_in, relayout_out = (0 if neighbours % block == 0 else 1), (0 if block % lanes == 0 else 1)
    assert sum(o.count("kiln.LayoutTransform") for o in ops) == 2 + relayout_in + relayout_out, ops


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("groups", [13, 55])
def test_regnet_widths_stay_blocked_with_a_padded_last_block(target, groups):
    # RegNetY-400MF: 104 and 440 channels in groups of 8; on AVX-512 their 1x1 convs pad them to
    # whole vectors (112 in blocks of 16; 448 in blocks of 32, where the grouped conv takes 16),
    # and the grouped conv takes a padded block of 16, spanning two groups.
    torch.manual_seed(groups)
    channels = groups * 8
    exe = check_against_torch(_bottleneck(channels, groups, 1), torch.randn(1, channels, 7, 7), target)
    ops = [g["ops"] for g in exe.groups()]
    assert sum(o.count("kiln.LayoutTransform") for o in ops) == 2 + _relayouts_around_grouped_conv(target, channels, 8), ops
    assert sum(o.startswith("kiln.ConvNCHWc") for o in ops) == 3, ops


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("cin,cout,groups", [(64, 128, 4), (128, 64, 8), (24, 48, 3)])
def test_grouped_conv_with_other_channel_counts_matches_pytorch(target, cin, cout, groups):
    # Input and output channels per group differ; 24 / 3 = 8 input channels per group.
    torch.manual_seed(cin + cout + groups)
    net = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, 1, 1, groups=groups), torch.nn.ReLU())
    check_against_torch(net, torch.randn(2, cin, 7, 8), target)


@pytest.mark.parametrize("target", TARGETS)
def test_grouped_conv_no_block_fits_stays_correct(target):
    # 3 input and 2 output channels per group: no block fits both, the conv stays in NCHW.
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(15, 10, 3, 1, 1, groups=5), torch.nn.ReLU())
    exe = check_against_torch(net, torch.randn(1, 15, 6, 6), target)
    assert not any(g["ops"].startswith("kiln.ConvNCHWc") for g in exe.groups())


def test_grouped_conv_is_tuned_under_each_cap_and_runs_its_record(tmp_path, monkeypatch):
    # The tuner's layout variants reach the grouped conv too: under cap 8 its block of 8 is one
    # group, under 16 a block spans two groups; compiled with the records it runs them, correctly.
    # Its default is the grouped conv's hand schedule (cpu_grouped_conv.h), which tune_model passes
    # over (hand_default: the search cannot express it); with the rules' default it is searched.
    monkeypatch.setenv("KILN_GROUPED_CONV", "0")
    tuner = pytest.importorskip("kiln.tuner")
    db, target = str(tmp_path / "grouped.db"), "llvm -mcpu=znver3 -num-cores=2"
    torch.manual_seed(8)
    net, x = _bottleneck(32, 4, 1), torch.randn(1, 32, 10, 10)
    buf = io.BytesIO()
    torch.onnx.export(net.eval(), x, buf, input_names=["input"], output_names=["output"], opset_version=13)
    model = kiln.graph.from_onnx(buf.getvalue(), shapes={"input": tuple(x.shape)})
    tasks, _ = tuner.extract_tasks(model, target=target, db=db)
    grouped = [t for t in tasks if t["groups"] == ["/2/Conv"]]
    # (and, in the default plan (cap 0), one vector reading its input in the 1x1 conv's block of 16: a task of its own)
    assert sorted(t["layout_cap"] for t in grouped) == [0, 8, 16] and all(t["ops"].startswith("kiln.ConvNCHWc") for t in grouped), grouped
    r = kiln.tune_model(model, target=target, trials=16, batch=8, db=db, progress=False)
    assert not any(t["hand_default"] for t in r["tasks"] if t["groups"] == ["/2/Conv"])
    exe = kiln.compile(model, target=target, db=db, quiet=True)
    assert any(g["name"].endswith("/2/Conv") and g["schedule"] == "database" for g in exe.groups()), exe.groups()
    monkeypatch.delenv("KILN_GROUPED_CONV")
    hand = kiln.tune_model(model, target=target, trials=8, batch=8, db=str(tmp_path / "hand.db"), progress=False, graph_share=0)
    assert all(t["hand_default"] for t in hand["tasks"] if t["groups"] == ["/2/Conv"]), hand["tasks"]
    (y,) = exe(x.numpy())
    with torch.no_grad():
        ref = net(x).numpy()
    assert np.max(np.abs(y - ref)) <= 1e-4 * np.max(np.abs(ref))
