"""A blocked conv over small images (ResNet-18's layer4 at 4 x 4) takes images into its register tile, so
consecutive tiles reuse one output-channel block's weights; larger images keep their columns first."""
import numpy as np
import pytest

import kiln
from kiln import te

AVX512 = "llvm -mcpu=skylake-avx512 -num-cores=2"
AVX2 = "llvm -mcpu=znver3 -num-cores=2"


def conv(C, K, HW, cb, kb, N=8):
    X = te.placeholder((N, C // cb, HW, HW, cb), name="X")
    W = te.placeholder((K // kb, C // cb, 3, 3, cb, kb), name="W")
    Y, _ = kiln.ops.conv2d_nchwc(X, W, 1, 1, "conv")
    return X, W, Y


def tile(text, axis):
    word = next(w for w in text.split() if w.startswith(f"conv.{axis}="))
    return int(word.split("x")[-1])


@pytest.mark.parametrize("target,block,images", [(AVX512, 32, 8), (AVX2, 16, 4)])
def test_small_images_tile_over_images(target, block, images):
    text = kiln.tuner.default_decisions(list(conv(64, 64, 4, block, block)), target=target)
    assert (tile(text, "n"), tile(text, "y"), tile(text, "x")) == (images, 1, 1), text


def test_seven_by_seven_keeps_its_columns():
    text = kiln.tuner.default_decisions(list(conv(64, 64, 7, 32, 32)), target=AVX512)
    assert tile(text, "x") == 7, text


def test_images_first_tile_computes_the_conv():
    X, W, Y = conv(16, 32, 4, 16, 32, N=4)
    sch = te.Schedule.from_trace(Y, kiln.tuner.candidate_trace([X, W, Y], kiln.tuner.default_decisions([X, W, Y])))
    mod = kiln.build(sch, [X, W, Y])
    rng = np.random.default_rng(0)
    x = rng.standard_normal([int(d) for d in X.shape]).astype("float32")
    w = rng.standard_normal([int(d) for d in W.shape]).astype("float32")
    y = kiln.nd.array(np.zeros([int(d) for d in Y.shape], "float32"))
    mod(kiln.nd.array(x), kiln.nd.array(w), y)
    import torch
    xn = torch.tensor(x).permute(0, 1, 4, 2, 3).reshape(4, 16, 4, 4)
    wn = torch.tensor(w).permute(0, 5, 1, 4, 2, 3).reshape(32, 16, 3, 3)
    ref = torch.nn.functional.conv2d(xn, wn, padding=1).reshape(4, 1, 32, 4, 4).permute(0, 1, 3, 4, 2).numpy()
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-4)
