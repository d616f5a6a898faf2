"""Whole models, generated at test time with torch + torchvision (random
weights), exported to ONNX, compiled by kiln and compared with PyTorch's own
output (fp32, relative error <= 1e-4). Small inputs keep CI fast; the full
sizes run in bench/model_bench.py."""
import io

import numpy as np
import pytest

import kiln
from kiln_helpers import randomize_batch_norms

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")


def _export(net, x, opset=13):
    buf = io.BytesIO()
    # Not under no_grad: there torch 1.13 runs TransformerEncoderLayer as one fused op ONNX cannot express.
    torch.onnx.export(net, x, buf, input_names=["input"], output_names=["output"], opset_version=opset)
    return buf.getvalue()


def _check(net, x, opset=13, **compile_args):
    net = net.eval()
    model = kiln.graph.from_onnx(_export(net, x, opset), shapes={"input": tuple(x.shape)})
    exe = kiln.compile(model, **compile_args)
    (y,) = exe(x.numpy())
    with torch.no_grad():
        ref = net(x).numpy()
    err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
    assert y.shape == ref.shape
    assert err <= 1e-4, f"relative error {err:.2e}"
    return model, exe


def test_resnet18_matches_pytorch():
    torch.manual_seed(0)
    net = randomize_batch_norms(torchvision.models.resnet18(weights=None))
    model, exe = _check(net, torch.randn(1, 3, 64, 64))
    groups = [g["ops"] for g in exe.groups()]
    # Every conv takes its bias, residual add and relu: no standalone elementwise kernel is left.
    assert not any(g in ("Relu", "Add", "Add+Relu") for g in groups), groups
    m = exe.memory()
    assert m["arena_bytes"] <= 0.5 * m["naive_bytes"], m


def test_mobilenet_v2_matches_pytorch():
    torch.manual_seed(1)
    net = randomize_batch_norms(torchvision.models.mobilenet_v2(weights=None))
    _check(net, torch.randn(1, 3, 64, 64))


def test_transformer_encoder_layer_matches_pytorch():
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True)
    _check(layer, torch.randn(1, 16, 64))


def test_unfused_and_nchw_paths_agree():
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16),
                              torch.nn.Hardswish(), torch.nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
                              torch.nn.Conv2d(16, 16, 1), torch.nn.MaxPool2d(2, ceil_mode=True))
    x = torch.randn(1, 8, 12, 12)
    _, exe = _check(net, x)
    ops = [g["ops"] for g in exe.groups()]
    # The pools run blocked between the convolutions: transforms only at the model's edges.
    assert sum(o.count("kiln.LayoutTransform") for o in ops) == 2, ops
    _check(net, x, fuse=False)
    _check(net, x, plain=True)


def test_winograd_convs_match_pytorch_and_can_be_turned_off():
    # ResNet's basic block at 15x15 on a batch of 2: its 3x3 convs have 2 x 8 x 8
    # tiles of 2x2 outputs (half tiles at the edges), enough to run as Winograd F(2x2, 3x3).
    torch.manual_seed(2)
    block = randomize_batch_norms(torchvision.models.resnet.BasicBlock(32, 32))
    x = torch.randn(2, 32, 15, 15)
    _, exe = _check(block, x)
    groups = [g["ops"] for g in exe.groups()]
    assert sum(g.startswith("kiln.WinogradMatMul") for g in groups) == 2, groups
    # The epilogues (the folded BatchNorm's shift, the residual add, relu) fuse into the output transform.
    assert any(g.startswith("kiln.WinogradOutputNCHWc") and "Relu" in g for g in groups), groups
    _, direct = _check(block, x, winograd=False)
    assert not any("Winograd" in g["ops"] for g in direct.groups())


def test_winograd_f4x4_runs_where_the_output_has_many_4x4_tiles():
    # At 28x28 a 3x3 conv has 7 x 7 tiles of 4x4 outputs: Winograd F(4x4, 3x3),
    # 36 products over 49 tiles; winograd=2 asks for F(2x2, 3x3), 16 over 196.
    torch.manual_seed(3)
    block = randomize_batch_norms(torchvision.models.resnet.BasicBlock(16, 16))
    x = torch.randn(1, 16, 28, 28)

    def product_flops(exe):
        return sorted(g["flop"] for g in exe.groups() if g["ops"].startswith("kiln.WinogradMatMul"))

    model, f4 = _check(block, x)
    assert product_flops(f4) == [2 * 36 * 49 * 16 * 16] * 2
    _, f2 = _check(block, x, winograd=2)
    assert product_flops(f2) == [2 * 16 * 196 * 16 * 16] * 2
    with pytest.raises(kiln.KilnError, match="winograd= takes True, False, 2"):
        kiln.compile(model, winograd=3)
