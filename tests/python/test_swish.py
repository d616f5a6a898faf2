"""Sigmoid and the swish epilogue x * sigmoid(x) (EfficientNet's convolutions):
kiln's float32 sigmoid (its own exp of -|x|, codegen_vector_math.cpp) against
numpy over the whole float range and its special values, and a convolution
with the swish fused in against PyTorch, on an AVX2 and an AVX-512 target."""
import numpy as np
import pytest
import torch

import kiln
from kiln.graph import Builder

from test_awkward_rows import TARGETS


@pytest.mark.parametrize("target", TARGETS)
def test_sigmoid_matches_numpy_everywhere(target):
    edges = [np.inf, -np.inf, np.nan, 0.0, -0.0, -87.5, -87.49, -87.7, -88.0, -104.0, 1e-30, 88.7, 89.0]
    x = np.concatenate([np.linspace(-110, 110, 20001), edges]).astype(np.float32)
    b = Builder()
    got = kiln.compile(b.build(b.op("Sigmoid", b.input("x", x.shape))), target=target)(x)[0].astype(np.float64)
    with np.errstate(over="ignore"):
        ref = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert (np.isnan(got) == np.isnan(ref)).all()
    keep = ~np.isnan(ref)
    err, ref = np.abs(got - ref)[keep], ref[keep]
    assert (err <= 5e-7 * ref + 1e-38).all(), err.max()
    assert got[-2] == 1.0 and got[np.isneginf(x)][0] == 0.0


@pytest.mark.parametrize("target", TARGETS)
def test_conv_with_swish_epilogue_matches_torch(rng, target):
    x = rng.standard_normal((1, 24, 20, 20)).astype(np.float32)
    w, bias = (rng.standard_normal((144, 24, 1, 1)) * 0.3).astype(np.float32), rng.standard_normal(144).astype(np.float32)
    b = Builder()
    y = b.op("Conv", b.input("x", x.shape), b.constant("w", w), b.constant("b", bias))
    exe = kiln.compile(b.build(b.op("Mul", y, b.op("Sigmoid", y))), target=target)
    ref = torch.nn.functional.silu(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias))).numpy()
    np.testing.assert_allclose(exe(x)[0], ref, rtol=1e-4, atol=1e-4)
    assert any("Sigmoid+Mul" in g["name"] and "Conv" in g["name"] for g in exe.groups()), [g["name"] for g in exe.groups()]
