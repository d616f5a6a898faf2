"""MobileNetV2's inverted residual blocks with the depthwise conv fused into the
1x1 projection after it (fuse_depthwise_pointwise, kiln/ops/cpu_dwpw.h): one
group, its schedule the fused one, PyTorch's results, on the host target and,
on an AVX-512 host, an AVX2 one (other channel blocks). Channel counts that
are no multiple of the vector width (24, 120, 144, 960) pad their last block.
KILN_FUSE_DWPW=1 fuses every size (the default only depthwise outputs of
1 MiB or more), =0 none."""
import numpy as np
import pytest

from kiln_helpers import compile_torch, cpu_targets

torch = pytest.importorskip("torch")
mobilenetv2 = pytest.importorskip("torchvision.models.mobilenetv2")

TARGETS = cpu_targets()


def _block(cin, cout, stride, expand, side, seed):
    """An inverted residual block with random batch-norm statistics, and an input of side x side."""
    torch.manual_seed(seed)
    net = mobilenetv2.InvertedResidual(cin, cout, stride, expand).eval()
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return net, torch.randn(1, cin, side, side)


def _fused_groups(exe):
    return [g for g in exe.groups() if "DepthwiseConvNCHWc" in g["ops"] and "+kiln.ConvNCHWc" in g["ops"]]


def _check(net, x, exe):
    (y,) = exe(x.numpy())
    with torch.no_grad():
        ref = net(x).numpy()
    err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
    assert err <= 1e-4, f"relative error {err:.2e}"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("cin,cout,stride,expand,side", [
    (24, 24, 1, 6, 12),   # 144 hidden channels, residual add in the epilogue
    (16, 24, 2, 6, 14),   # stride 2, 96 hidden
    (20, 20, 1, 6, 9),    # 120 hidden: a padded last block; 9 columns (odd tiles)
    (160, 160, 1, 6, 7),  # 960 hidden, MobileNetV2's last blocks
    (32, 16, 1, 1, 10),   # expand 1: the depthwise conv reads the block's input
])
def test_fused_block_matches_pytorch(monkeypatch, target, cin, cout, stride, expand, side):
    monkeypatch.setenv("KILN_FUSE_DWPW", "1")
    net, x = _block(cin, cout, stride, expand, side, seed=cin + side)
    exe = compile_torch(net, x, target)
    fused = _fused_groups(exe)
    assert len(fused) == 1, [g["ops"] for g in exe.groups()]
    assert fused[0]["schedule_detail"].startswith("depthwise+pointwise rows"), fused[0]["schedule_detail"]
    _check(net, x, exe)


def test_switch_off_keeps_two_groups(monkeypatch):
    monkeypatch.setenv("KILN_FUSE_DWPW", "0")
    net, x = _block(24, 24, 1, 6, 12, seed=3)
    exe = compile_torch(net, x, "llvm")
    assert _fused_groups(exe) == []
    assert sum("DepthwiseConvNCHWc" in g["ops"] for g in exe.groups()) == 1
    _check(net, x, exe)


def test_default_fuses_only_large_depthwise_outputs(monkeypatch):
    """144 x 56 x 56 floats (1.8 MB) fuse by default (at any core count); 144 x 14 x 14 (0.1 MB) stay apart."""
    monkeypatch.delenv("KILN_FUSE_DWPW", raising=False)
    net, x = _block(24, 24, 1, 6, 56, seed=4)
    exe = compile_torch(net, x, "llvm")
    assert len(_fused_groups(exe)) == 1, [g["ops"] for g in exe.groups()]
    _check(net, x, exe)
    net, x = _block(24, 24, 1, 6, 14, seed=5)
    assert _fused_groups(compile_torch(net, x, "llvm")) == []


def test_default_on_several_cores_weighs_the_output(monkeypatch):
    """A stride-2 block reading 144 x 56 x 56 floats (1.8 MB) and writing 144 x 28 x 28 (0.44 MB):
    fused for a 1-core target (its input counts), apart for a 2-core one (its output alone counts)."""
    monkeypatch.delenv("KILN_FUSE_DWPW", raising=False)
    net, x = _block(24, 32, 2, 6, 56, seed=8)
    one = compile_torch(net, x, "llvm -num-cores=1")
    assert len(_fused_groups(one)) == 1, [g["ops"] for g in one.groups()]
    _check(net, x, one)
    assert _fused_groups(compile_torch(net, x, "llvm -num-cores=2")) == []


def test_two_blocks_fuse_each(monkeypatch):
    """Two blocks in a row: each depthwise conv joins its own projection (the pass counts two groups)."""
    monkeypatch.setenv("KILN_FUSE_DWPW", "1")
    torch.manual_seed(6)
    net = torch.nn.Sequential(mobilenetv2.InvertedResidual(16, 24, 2, 6), mobilenetv2.InvertedResidual(24, 24, 1, 6)).eval()
    x = torch.randn(1, 16, 16, 16)
    exe = compile_torch(net, x, "llvm")
    assert len(_fused_groups(exe)) == 2, [g["ops"] for g in exe.groups()]
    _check(net, x, exe)


def test_symbolic_image_stays_unfused(monkeypatch):
    """The fused schedule needs static sizes: a symbolic height and width keep the two groups (and the right result)."""
    import io

    import kiln
    monkeypatch.setenv("KILN_FUSE_DWPW", "1")
    net, x = _block(24, 24, 1, 6, 12, seed=7)
    buf = io.BytesIO()
    torch.onnx.export(net, x, buf, input_names=["input"], output_names=["output"], opset_version=13,
                      dynamic_axes={"input": {2: "h", 3: "w"}, "output": {2: "h", 3: "w"}})
    model = kiln.graph.from_onnx(buf.getvalue(), shapes={"input": (1, 24, "h", "w")})
    exe = kiln.compile(model, target="llvm")
    assert _fused_groups(exe) == []
    _check(net, x, exe)
