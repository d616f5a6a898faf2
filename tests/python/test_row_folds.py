"""Row reductions of the row-wise rule (softmax, a row max, layer norm) whose
vector lanes are folded in halves (vector steps) before the last few lanes
fold one at a time, and a softmax whose exponentials are stored per row:
numpy's results for rows of 5 to 300 keys (whole vectors, a peeled rest, one
vector or less), on an AVX2 and an AVX-512 target. The softmax input puts a
spike of 200 at a different key in every row: a fold that lost the lane
holding it would subtract too small a maximum and overflow exp to inf."""
import numpy as np
import pytest

import kiln
from kiln.graph import Builder
from kiln_helpers import host_has

AVX2 = "llvm -mcpu=znver3 -num-cores=2"
AVX512 = "llvm -mcpu=skylake-avx512 -num-cores=2"


TARGETS = [
    pytest.param(AVX2, marks=pytest.mark.skipif(not host_has("avx2") or not host_has("fma"), reason="the host has no AVX2/FMA")),
    pytest.param(AVX512, marks=pytest.mark.skipif(not host_has("avx512f"), reason="the host has no AVX-512")),
]
KEYS = [5, 16, 50, 64, 77, 128, 197, 300]


def spiked_rows(rows, keys, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, keys)).astype(np.float32)
    x[np.arange(rows), np.arange(rows) % keys] = 200.0  # the spike walks through every lane position
    return x


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("keys", KEYS)
def test_softmax_rows(target, keys):
    x = spiked_rows(3 * keys, keys, keys).reshape(3, keys, keys)
    b = Builder()
    exe = kiln.compile(b.build(b.op("Softmax", b.input("x", x.shape), axis=-1)), target=target, quiet=True)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(exe(x)[0], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("keys", KEYS)
def test_row_max_is_exact(target, keys):
    x = spiked_rows(2 * keys + 1, keys, keys + 1) * np.float32(-1)  # the maximum is no spike: every lane counts
    b = Builder()
    xi = b.input("x", x.shape)
    exe = kiln.compile(b.build(b.op("Sub", xi, b.op("ReduceMax", xi, axes=[-1], keepdims=1))), target=target, quiet=True)
    np.testing.assert_array_equal(exe(x)[0], x - x.max(-1, keepdims=True))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("keys", [50, 128, 197, 768])
def test_layer_norm_rows(target, keys):
    rng = np.random.default_rng(keys)
    x = (rng.standard_normal((37, keys)) * 3 + 5).astype(np.float32)
    scale, bias = rng.standard_normal(keys).astype(np.float32), rng.standard_normal(keys).astype(np.float32)
    b = Builder()
    y = b.op("LayerNormalization", b.input("x", x.shape), b.constant("s", scale), b.constant("b", bias), axis=-1, epsilon=1e-5)
    exe = kiln.compile(b.build(y), target=target, quiet=True)
    xd = x.astype(np.float64)
    mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    np.testing.assert_allclose(exe(x)[0], (xd - mu) / np.sqrt(var + 1e-5) * scale + bias, rtol=1e-4, atol=1e-4)
