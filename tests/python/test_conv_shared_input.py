"""A blocked 1x1 conv whose input outgrows L2 and whose weights do not runs its
output-channel blocks inside the pixel tiles by default (ops/src/search_space_seeds.cpp,
share_input_tiles): the tile's input is read once for every block. Checked on the
default's decisions for AVX-512 and AVX2 targets, and against PyTorch."""
import io
import re

import numpy as np
import pytest
import torch

import kiln
from kiln import te
from kiln._ffi import _kiln

TARGETS = {"llvm -mcpu=znver4 -num-cores=2": 32, "llvm -mcpu=znver3 -num-cores=2": 16}


def default_fo(C, K, hw, stride, target, block):
    X = te.placeholder((1, C // block, hw, hw, block), name="X")
    W = te.placeholder((K // block, C // block, 1, 1, block, block), name="W")
    Y, _ = kiln.ops.conv2d_nchwc(X, W, stride, 0)
    R = te.compute(Y.shape, lambda n, f, y, x, c: te.max(Y[n, f, y, x, c], 0.0), name="Relu")
    desc = _kiln.tuner.default_description(_kiln.tuner.make_task([X, W, R], target, "", {}))
    return [int(v) for v in re.search(r"conv\.fo=([\dx]+)", desc).group(1).split("x")]


@pytest.mark.parametrize("target", TARGETS)
def test_blocks_inside_pixel_tiles_where_the_input_outgrows_l2(target):
    b = TARGETS[target]
    fo = default_fo(256, 256, 56, 1, target, b)  # 3.2 MB of input, 256 KB of weights
    assert fo[0] == 1 and fo[1] == 256 // b, fo


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(128, 256, 56), (2048, 512, 7), (1024, 256, 14)])
def test_blocks_stay_outermost_elsewhere(target, shape):
    # More outputs than inputs; weights of 4 MB; an input that fits L2.
    C, K, hw = shape
    b = TARGETS[target]
    assert default_fo(C, K, hw, 1, target, b)[0] == K // b


@pytest.mark.parametrize("threads", [1, 2])
def test_shared_input_conv_equals_pytorch(threads):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(256, 256, 1), torch.nn.ReLU()).eval()
    x = torch.randn(1, 256, 40, 40)  # 1.6 MB of input
    f = io.BytesIO()
    torch.onnx.export(m, x, f, input_names=["input"], opset_version=17)
    exe = kiln.compile(kiln.graph.from_onnx(f.getvalue()), target=f"llvm -num-cores={threads}", quiet=True)
    (conv,) = [g for g in exe.groups() if "Conv" in g["name"]]
    assert re.search(r"conv\.fo=1x", conv["schedule_detail"]), conv["schedule_detail"]
    with torch.no_grad():
        ref = m(x).numpy()
    np.testing.assert_allclose(exe(x.numpy())[0], ref, rtol=1e-4, atol=1e-4)
