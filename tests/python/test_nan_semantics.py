"""NaN and +-inf through every elementwise, reduction and pooling operator,
against PyTorch: ONNX and PyTorch propagate NaN through min, max, relu and clip
(relu(NaN) is NaN, and a NaN in a max-pool window or a row's max stays), so a
model fed NaN must not print ordinary numbers. Each operator runs three ways:
plain kernels (run_op), fused with default schedules (kiln.compile), and the
GPU kernels in the simulator (the interpreter)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import graph as G

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0, 0.25, -0.5, 3.0, -7.0, 100.0]


def special(shape, seed=0):
    """Values of `shape` drawn from SPECIAL, with at least one NaN, +inf and -inf."""
    rng = np.random.default_rng(seed)
    x = rng.choice(np.array(SPECIAL, np.float32), size=int(np.prod(shape)))
    x[:3] = [np.nan, np.inf, -np.inf]
    rng.shuffle(x)
    return x.reshape(shape)


def graph_of(op, x, consts=(), **attrs):
    b = G.Builder()
    ins = [b.input("x", x.shape, "float32")] + [G.make_constant(f"c{i}", np.asarray(c, np.float32)) for i, c in enumerate(consts)]
    return b.build(b.op(op, *ins, **attrs))


def run_three_ways(op, x, consts=(), **attrs):
    """(plain, fused, simulated GPU) outputs of `op` on x."""
    plain = G.run_op(op, [x, *consts], **attrs)[0]
    fused = kiln.compile(graph_of(op, x, consts, **attrs))(x)[0]
    gpu = kiln.compile(graph_of(op, x, consts, **attrs), target="cuda -arch=sm_90").simulate(x)[0]
    return plain, fused, gpu


def same(got, want, what):
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    assert (nan_got == nan_want).all(), f"{what}: NaN at {np.argwhere(nan_got != nan_want)[:5].tolist()}: got {got[nan_got != nan_want][:5]}"
    np.testing.assert_allclose(got[~nan_got], want[~nan_want], rtol=1e-5, atol=1e-6, err_msg=what)


def onnx_hard_sigmoid(x):
    return torch.clamp(0.2 * x + 0.5, 0, 1)


UNARY = {
    "Relu": torch.relu,
    "Sigmoid": torch.sigmoid,
    "Tanh": torch.tanh,
    "Abs": torch.abs,
    "Neg": torch.neg,
    "Exp": torch.exp,
    "Log": torch.log,
    "Sqrt": torch.sqrt,
    "Floor": torch.floor,
    "Ceil": torch.ceil,
    "Reciprocal": torch.reciprocal,
    "Erf": torch.erf,
    "LeakyRelu": lambda x: F.leaky_relu(x, 0.01),
    "HardSigmoid": onnx_hard_sigmoid,
    "HardSwish": lambda x: x * onnx_hard_sigmoid_swish(x),
    "Elu": F.elu,
    "Identity": lambda x: x,
}


def onnx_hard_sigmoid_swish(x):
    # ONNX HardSwish = x * max(0, min(1, x / 6 + 1 / 2)).
    return torch.clamp(x / 6 + 0.5, 0, 1)


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op):
    x = special((3, 20))
    want = UNARY[op](torch.from_numpy(x.astype(np.float64))).float()
    for how, got in zip(("plain", "fused", "gpu-sim"), run_three_ways(op, x)):
        same(got, want, f"{op} {how}")


def test_relu_of_nan_is_nan():
    # The reported case: Relu(NaN) gave 0, so an all-NaN input printed ordinary logits.
    x = np.full((1, 16), np.nan, np.float32)
    for got in run_three_ways("Relu", x):
        assert np.isnan(got).all(), got


@pytest.mark.parametrize("lo,hi", [(-1.0, 1.0), (0.0, 6.0)])
def test_clip(lo, hi):
    x = special((4, 16), seed=1)
    want = torch.clamp(torch.from_numpy(x), lo, hi)
    for how, got in zip(("plain", "fused", "gpu-sim"), run_three_ways("Clip", x, consts=(np.float32(lo), np.float32(hi)))):
        same(got, want, f"Clip {how}")


@pytest.mark.parametrize("op,ref", [("Max", torch.maximum), ("Min", torch.minimum)])
def test_binary_min_max_propagate_nan_from_either_side(op, ref):
    a, b = special((5, 12), seed=2), special((5, 12), seed=3)
    bb = G.Builder()
    ya = bb.input("a", a.shape, "float32")
    yb = bb.input("b", b.shape, "float32")
    g = bb.build(bb.op(op, ya, yb))
    want = ref(torch.from_numpy(a), torch.from_numpy(b))
    same(G.run_op(op, [a, b])[0], want, f"{op} plain")
    same(kiln.compile(g)(a, b)[0], want, f"{op} fused")
    same(kiln.compile(g, target="cuda -arch=sm_90").simulate(a, b)[0], want, f"{op} gpu-sim")


REDUCE = {
    "ReduceMax": lambda x, axis: torch.amax(x, dim=axis, keepdim=True),
    "ReduceMin": lambda x, axis: torch.amin(x, dim=axis, keepdim=True),
    "ReduceSum": lambda x, axis: torch.sum(x, dim=axis, keepdim=True),
    "ReduceMean": lambda x, axis: torch.mean(x, dim=axis, keepdim=True),
}


@pytest.mark.parametrize("op", sorted(REDUCE))
def test_reductions(op):
    # Rows of: one NaN among finite values, +inf and -inf together, only finite values, a NaN at the end.
    x = np.array([[1.0, np.nan, 3.0, -2.0, 0.5, 4.0, -1.0, 2.0],
                  [np.inf, -np.inf, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                  [np.inf, 1.0, 2.0, 3.0, -4.0, 5.0, 6.0, 7.0],
                  [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, np.nan]], np.float32)
    for axis in (0, 1):
        attrs = {"axes": [axis]} if op != "ReduceSum" else {}
        consts = (np.array([axis], np.int64),) if op == "ReduceSum" else ()
        want = REDUCE[op](torch.from_numpy(x), axis)
        if op == "ReduceSum":
            plain = G.run_op(op, [x, *consts], **attrs)[0]
            same(plain, want, f"{op} axis {axis} plain")
            continue
        for how, got in zip(("plain", "fused", "gpu-sim"), run_three_ways(op, x, **attrs)):
            same(got, want, f"{op} axis {axis} {how}")


def test_softmax():
    x = np.array([[1.0, np.nan, 3.0, -2.0], [np.inf, 1.0, 2.0, 3.0], [-np.inf, 0.0, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0]], np.float32)
    want = torch.softmax(torch.from_numpy(x), dim=-1)
    for how, got in zip(("plain", "fused", "gpu-sim"), run_three_ways("Softmax", x, axis=-1)):
        same(got, want, f"Softmax {how}")


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
def test_pools(op):
    x = special((1, 3, 6, 6), seed=4)
    xt = torch.from_numpy(x)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]} if op in ("MaxPool", "AveragePool") else {}
    want = {"MaxPool": lambda: F.max_pool2d(xt, 2, 2), "AveragePool": lambda: F.avg_pool2d(xt, 2, 2),
            "GlobalAveragePool": lambda: xt.mean(dim=(2, 3), keepdim=True),
            "GlobalMaxPool": lambda: xt.amax(dim=(2, 3), keepdim=True)}[op]()
    for how, got in zip(("plain", "fused", "gpu-sim"), run_three_ways(op, x, **attrs)):
        same(got, want, f"{op} {how}")


def test_nan_image_through_a_cnn_gives_nan_logits():
    # The reported model: conv, relu, max-pool, global average pool, a linear layer.
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(16, 10)).eval()
    x = torch.full((1, 3, 16, 16), float("nan"))
    exe = kiln.compile(kiln.graph.from_torch(net, (x,)))
    logits = exe(x.numpy())[0]
    assert np.isnan(logits).all(), logits
    # One NaN pixel reaches every logit in PyTorch too (through the global pool).
    y = torch.randn(1, 3, 16, 16)
    y[0, 1, 5, 7] = float("nan")
    with torch.no_grad():
        want = net(y).numpy()
    same(exe(y.numpy())[0], want, "one NaN pixel")
