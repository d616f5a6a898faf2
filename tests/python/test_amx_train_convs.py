"""A training step's bfloat16 convolutions on AMX tiles (use_amx_convs): on a target with AMX-BF16 a Conv of
computed weights and both of its gradients become an im2col and one kiln.MatMulBF16Pairs, which runs on
tdpbf16ps ("amx tiles"); against PyTorch's float64 convolutions of the bfloat16-rounded operands. Targets
without AMX, and shapes the tiles do not take, keep use_bf16_dot's pair convolutions (vdpbf16ps). Compiled
for sapphirerapids on every host; runs need AMX-BF16 (skipped otherwise, after compiling)."""
import numpy as np
import pytest

import kiln
from kiln.graph import Builder

AMX = "llvm -mcpu=sapphirerapids"
NO_AMX = AMX + " -mattr=-amx-tile"  # AVX-512 BF16 without the tiles: the vdpbf16ps pair forms
PAIR_CONVS = ("kiln.ConvBF16Pairs", "kiln.ConvGradInputBF16Pairs", "kiln.ConvGradWeightBF16Pairs")


def host_has(feature):
    return kiln.Target("llvm").has_feature(feature)


def rounded(b, v):
    """autocast's form of a bfloat16 operand: float32 of its bfloat16 rounding."""
    return b.op("Cast", b.op("Cast", v, to=16), to=1)


def conv_and_grads(xs, ws, ys, stride, pad, dil):
    """y = Conv(x, w), dx and dw from dy: the three ops of a training step's convolution."""
    k = list(ws[2:])
    win = dict(kernel_shape=k, strides=[stride] * 2, dilations=[dil] * 2, pads=[pad] * 4)
    b = Builder()
    x, w, dy = b.input("x", xs), b.input("w", ws), b.input("dy", ys)
    return b.build(b.op("Conv", rounded(b, x), rounded(b, w), strides=[stride] * 2, pads=[pad] * 4, dilations=[dil] * 2),
                   b.op("kiln.ConvGradInput", rounded(b, dy), rounded(b, w), input_shape=list(xs), **win),
                   b.op("kiln.ConvGradWeight", rounded(b, x), rounded(b, dy), **win))


def torch_reference(x, w, dy, stride, pad, dil):
    """y, dx, dw in float64 of the bfloat16-rounded operands, and the same of their magnitudes (the error's scale)."""
    torch = pytest.importorskip("torch")
    out = []
    for f in (lambda a: a, np.abs):
        t = [torch.tensor(f(a)).to(torch.bfloat16).to(torch.float64) for a in (x, w, dy)]
        t[0].requires_grad_(), t[1].requires_grad_()
        y = torch.nn.functional.conv2d(t[0], t[1], stride=stride, padding=pad, dilation=dil)
        y.backward(t[2])
        out.append([y.detach().numpy(), t[0].grad.numpy(), t[1].grad.numpy()])
    return out


def ops_of(exe):
    return " ".join(g["ops"] for g in exe.groups())


def case(N, C, H, K, k, stride, pad, dil, seed=3):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((N, C, H, H)).astype("float32"), rng.standard_normal((K, C, k, k)).astype("float32")
    oh = (H + 2 * pad - dil * (k - 1) - 1) // stride + 1
    dy = rng.standard_normal((N, K, oh, oh)).astype("float32")
    return x, w, dy, conv_and_grads(x.shape, w.shape, dy.shape, stride, pad, dil)


def check(exe, x, w, dy, stride, pad, dil):
    (want, scale) = torch_reference(x, w, dy, stride, pad, dil)
    for name, got, r, s in zip(("y", "dx", "dw"), exe(x, w, dy), want, scale):
        assert got.shape == r.shape, (name, got.shape, r.shape)
        err = np.abs(got - r)  # float32 sums of exact bfloat16 products
        assert np.all(err <= 1e-5 * s + 1e-6), (name, float(np.max(err / (s + 1e-30))))


# ResNet's kinds: 3x3 stride 1, 3x3 stride 2, the 1x1 stride-2 shortcut, a 7x7 stride-2 one of 16 channels
# (392 words of reduction, padded to whole tiles), a dilated one, a 7x7 map whose pixels (98) pad to 128 for dW,
# and two with fewer pixels than weights' rows (ResNet's last stage), whose Y and dX come transposed.
SHAPES = [(1, 32, 4, 64, 3, 1, 1, 1), (2, 64, 4, 64, 3, 2, 1, 1), (2, 32, 9, 32, 3, 1, 1, 1), (2, 16, 10, 32, 3, 2, 1, 1), (2, 32, 8, 16, 1, 2, 0, 1), (1, 16, 16, 16, 7, 2, 3, 1),
          (2, 16, 9, 32, 3, 1, 2, 2), (2, 32, 7, 32, 3, 1, 1, 1)]


@pytest.mark.parametrize("N,C,H,K,k,stride,pad,dil", SHAPES)
def test_training_convs_and_their_gradients_run_on_amx_tiles(N, C, H, K, k, stride, pad, dil):
    x, w, dy, g = case(N, C, H, K, k, stride, pad, dil)
    exe = kiln.compile(g, target=AMX)
    tiles = [gr.get("schedule_detail", "") for gr in exe.groups() if "kiln.MatMulBF16Pairs" in gr["ops"]]
    assert tiles == ["amx tiles"] * 3, exe.groups()
    assert not any(p in ops_of(exe) for p in PAIR_CONVS), ops_of(exe)
    if not (host_has("amx-tile") and host_has("amx-bf16")):
        pytest.skip("this host has no AMX-BF16: compiled for sapphirerapids, not run")
    check(exe, x, w, dy, stride, pad, dil)


def test_targets_without_amx_keep_the_pair_convolutions():
    x, w, dy, g = case(2, 32, 9, 32, 3, 2, 1, 1)
    exe = kiln.compile(g, target=NO_AMX, bf16_dot=True)
    assert all(p in ops_of(exe) for p in PAIR_CONVS), ops_of(exe)
    assert "amx" not in " ".join(gr.get("schedule_detail", "") for gr in exe.groups())
    if host_has("avx512bf16"):
        check(exe, x, w, dy, 2, 1, 1)


def test_sapphire_rapids_without_amx_convolves_the_rounded_operands_in_float32():
    """By default an Intel target without AMX multiplies the rounded operands with FMAs (its vdpbf16ps runs at half
    their multiply-adds per second): no pair form, no tiles, the same convolution and gradients."""
    x, w, dy, g = case(2, 32, 9, 32, 3, 1, 1, 1)
    exe = kiln.compile(g, target=NO_AMX)
    assert "BF16Pairs" not in ops_of(exe), ops_of(exe)
    assert "amx" not in " ".join(gr.get("schedule_detail", "") for gr in exe.groups())
    if host_has("avx512f") and host_has("avx512bw"):
        check(exe, x, w, dy, 1, 1, 1)


def test_the_host_target_as_an_object_takes_tiles_only_where_the_host_has_amx():
    """kiln.Target("llvm") passes through its string (llvm -mcpu=<host cpu>): a host whose CPU name implies AMX but
    that lacks it (a VM) must not get tiles back from the name, or the step dies on its first tile instruction."""
    host = kiln.Target("llvm -num-cores=2")
    assert all(kiln.Target(str(host)).has_feature(f) == host.has_feature(f) for f in ("amx-tile", "amx-bf16", "avx512bf16"))
    if not host.has_feature("avx512bf16"):
        pytest.skip("this host has no AVX-512 BF16: no bfloat16 pair forms to compare")
    step = kiln.train.compile(small_cnn(), optimizer=kiln.train.SGD(lr=0.1, momentum=0.9), precision="bfloat16", target=host)
    tiles = "amx tiles" in " ".join(gr.get("schedule_detail", "") for gr in step._exe.groups())
    assert tiles == (host_has("amx-tile") and host_has("amx-bf16")), ops_of(step._exe)
    rng = np.random.default_rng(1)
    loss = float(np.asarray(step(rng.standard_normal((4, 16, 8, 8)).astype("float32"), rng.integers(0, 5, 4))).ravel()[0])
    assert np.isfinite(loss) and 0 < loss < 10, loss


def test_pixels_the_tiles_cannot_take_keep_the_pair_convolutions():
    """37 output pixels (a prime over 32: no row block from 4 to 32): the forward conv keeps its pair form."""
    b = Builder()
    x, w = b.input("x", (1, 32, 1, 37)), b.input("w", (32, 32, 1, 3))
    g = b.build(b.op("Conv", rounded(b, x), rounded(b, w), pads=[0, 1, 0, 1]))
    exe = kiln.compile(g, target=AMX)
    assert "kiln.ConvBF16Pairs" in ops_of(exe) and "kiln.MatMulBF16Pairs" not in ops_of(exe), ops_of(exe)


def test_a_stem_of_three_channels_keeps_the_pair_convolutions():
    """Windows of 3 channels are too short to gather well: the stem's conv and weight gradient keep their pair forms
    (its dX, 3 channels, is not a pair form at all), and still compute the convolution."""
    x, w, dy, g = case(2, 3, 16, 16, 7, 2, 3, 1)
    exe = kiln.compile(g, target=AMX)
    assert "kiln.MatMulBF16Pairs" not in ops_of(exe), ops_of(exe)
    assert "kiln.ConvBF16Pairs" in ops_of(exe) and "kiln.ConvGradWeightBF16Pairs" in ops_of(exe), ops_of(exe)
    if host_has("avx512bf16"):
        check(exe, x, w, dy, 2, 3, 1)


def small_cnn(batch=4, channels=16, size=8, classes=5):
    rng = np.random.default_rng(2)
    b = Builder()
    w = lambda name, *shape: b.constant(name, (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype("float32"))  # noqa: E731
    h = b.op("Relu", b.op("Conv", b.input("x", (batch, channels, size, size)), w("c1", 32, channels, 3, 3), pads=[1, 1, 1, 1]))
    h = b.op("Relu", b.op("Conv", h, w("c2", 32, 32, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]))
    h = b.op("Flatten", b.op("GlobalAveragePool", h))
    return b.build(b.op("MatMul", h, b.constant("fc", (rng.standard_normal((32, classes)) / 4).astype("float32"))))


def test_a_bfloat16_training_step_on_tiles_follows_the_vector_one():
    """kiln.train with precision bfloat16: the same losses and weights, step by step, on tiles as without AMX (FMAs)."""
    rng = np.random.default_rng(6)
    data = [(rng.standard_normal((4, 16, 8, 8)).astype("float32"), rng.integers(0, 5, 4)) for _ in range(4)]
    steps = {t: kiln.train.compile(small_cnn(), optimizer=kiln.train.SGD(lr=0.1, momentum=0.9), precision="bfloat16", target=t)
             for t in (AMX, NO_AMX)}
    assert "kiln.ConvGradWeightBF16Pairs" not in ops_of(steps[AMX]._exe), ops_of(steps[AMX]._exe)
    assert "amx tiles" in " ".join(gr.get("schedule_detail", "") for gr in steps[AMX]._exe.groups())
    if not (host_has("amx-tile") and host_has("amx-bf16")):
        pytest.skip("this host has no AMX-BF16: compiled for sapphirerapids, not run")
    losses = {t: [float(np.asarray(s(*d)).ravel()[0]) for d in data] for t, s in steps.items()}
    np.testing.assert_allclose(losses[AMX], losses[NO_AMX], rtol=1e-3)
    np.testing.assert_allclose(steps[AMX].parameters["c1"], steps[NO_AMX].parameters["c1"], rtol=1e-2, atol=1e-3)
