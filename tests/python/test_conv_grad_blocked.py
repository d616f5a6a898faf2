"""kiln.ConvGradInputNCHWc and kiln.ConvGradWeightNCHWc, the gradients of a
blocked convolution (graph/src/ops/conv_grad_blocked.cpp), against PyTorch's
autograd: strides 1 and 2, padding, dilation 2, 1x1 / 3x3 / 7x7 kernels, and
channel counts no block divides (the last block padded, as
kiln.LayoutTransform pads it: the padded channels hold garbage here, which
must not reach a true channel's gradient). On the host target and, on an
AVX-512 host, an AVX2 one."""
import numpy as np
import pytest

import kiln
from kiln import graph as kg
from kiln_helpers import cpu_targets

torch = pytest.importorskip("torch")

TARGETS = cpu_targets()
RNG = np.random.default_rng(5)


def blocked(a, b, garbage=False):
    """NCHW -> [N, ceil(C/b), H, W, b]; the padded tail channels random (garbage) or zero."""
    n, c, h, w = a.shape
    cp = -(-c // b) * b
    pad = RNG.standard_normal((n, cp - c, h, w)).astype(a.dtype) if garbage else np.zeros((n, cp - c, h, w), a.dtype)
    full = np.concatenate([a, pad], axis=1)
    return np.ascontiguousarray(full.reshape(n, cp // b, b, h, w).transpose(0, 1, 3, 4, 2))


def unblocked(a, c):
    n, cb, h, w, b = a.shape
    return a.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)[:, :c]


def packed(w, cb, kb):
    """[K, C, KH, KW] -> [ceil(K/kb), ceil(C/cb), KH, KW, cb, kb], zeros in the padded channels."""
    k, c, r, s = w.shape
    full = np.zeros((-(-k // kb) * kb, -(-c // cb) * cb, r, s), w.dtype)
    full[:k, :c] = w
    return full.reshape(-1, kb, full.shape[1] // cb, cb, r, s).transpose(0, 2, 4, 5, 3, 1)


def torch_grads(x, w, dy, stride, pad, dilation):
    """dX and dW of conv2d(x, w) (symmetric pads [ph, pw]) by autograd, for output gradient dy."""
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    y = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=pad, dilation=dilation)
    y.backward(torch.tensor(dy))
    return xt.grad.numpy(), wt.grad.numpy()


def case(n, c, k, hw, kernel, stride, pad, dilation):
    x = RNG.standard_normal((n, c, hw[0], hw[1])).astype("float32")
    w = RNG.standard_normal((k, c, kernel, kernel)).astype("float32")
    oh = (hw[0] + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    ow = (hw[1] + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    dy = RNG.standard_normal((n, k, oh, ow)).astype("float32")
    return x, w, dy


def attrs(stride, pad, dilation):
    return dict(strides=[stride, stride], pads=[pad, pad, pad, pad], dilations=[dilation, dilation])


def grad_input(dyb, w, x_shape, cb, target, **a):
    b = kg.Builder()
    dy_v, w_v = b.input("dy", dyb.shape), b.input("w", w.shape)
    out = b.op("kiln.ConvGradInputNCHWc", dy_v, w_v, input_shape=list(x_shape), block=cb, **a)
    return kiln.compile(b.build(out), target=target)(dyb, w)[0]


def grad_weight(xb, dyb, w_shape, target, **a):
    b = kg.Builder()
    x_v, dy_v = b.input("x", xb.shape), b.input("dy", dyb.shape)
    out = b.op("kiln.ConvGradWeightNCHWc", x_v, dy_v, weight_shape=list(w_shape), **a)
    return kiln.compile(b.build(out), target=target)(xb, dyb)[0]


# (N, C, K, H x W, kernel, stride, pad, dilation, cb, kb)
CASES = [
    (2, 32, 32, (9, 9), 3, 1, 1, 1, 16, 16),  # 3x3 stride 1
    (2, 16, 32, (10, 9), 3, 2, 1, 1, 16, 32),  # 3x3 stride 2, odd width
    (1, 16, 16, (8, 8), 1, 2, 0, 1, 8, 16),  # 1x1 stride 2 (a downsample: 3 of 4 phases get no tap)
    (1, 8, 16, (11, 11), 7, 2, 3, 1, 8, 8),  # 7x7 stride 2 (a stem)
    (1, 16, 16, (9, 9), 3, 1, 2, 2, 16, 16),  # dilation 2
    (1, 16, 8, (9, 9), 3, 2, 2, 2, 8, 8),  # dilation 2 with stride 2
    (2, 12, 20, (7, 7), 3, 1, 1, 1, 8, 16),  # channels no block divides
    (1, 3, 24, (10, 10), 3, 2, 0, 1, 8, 16),  # 3 channels, unpadded stride 2
    (2, 16, 16, (32, 32), 3, 1, 1, 1, 16, 16),  # 1024 pixels an image: the weight gradient sums two batch groups
    (2, 3, 16, (64, 64), 7, 2, 3, 1, 16, 16),  # a stem: 3 channels in a block of 16, two batch groups
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,c,k,hw,kernel,stride,pad,dilation,cb,kb", CASES)
def test_grad_input_matches_autograd(target, n, c, k, hw, kernel, stride, pad, dilation, cb, kb):
    x, w, dy = case(n, c, k, hw, kernel, stride, pad, dilation)
    dx_ref, _ = torch_grads(x, w, dy, stride, pad, dilation)
    dxb = grad_input(blocked(dy, kb, garbage=True), w, x.shape, cb, target, **attrs(stride, pad, dilation))
    assert dxb.shape == (n, -(-c // cb), hw[0], hw[1], cb)
    np.testing.assert_allclose(unblocked(dxb, c), dx_ref, rtol=1e-4, atol=1e-4)
    assert not dxb.transpose(0, 1, 4, 2, 3).reshape(n, -1, hw[0], hw[1])[:, c:].any()  # the padded channels are zero
    # W as kiln.ConvNCHWc's packed weights [K/kb, C/cb, KH, KW, cb, kb].
    dxp = grad_input(blocked(dy, kb, garbage=True), np.ascontiguousarray(packed(w, cb, kb)), x.shape, cb, target, **attrs(stride, pad, dilation))
    np.testing.assert_allclose(dxp, dxb, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,c,k,hw,kernel,stride,pad,dilation,cb,kb", CASES)
def test_grad_weight_matches_autograd(target, n, c, k, hw, kernel, stride, pad, dilation, cb, kb):
    x, w, dy = case(n, c, k, hw, kernel, stride, pad, dilation)
    _, dw_ref = torch_grads(x, w, dy, stride, pad, dilation)
    dw = grad_weight(blocked(x, cb, garbage=True), blocked(dy, kb, garbage=True), w.shape, target, **attrs(stride, pad, dilation))
    assert dw.shape == w.shape
    np.testing.assert_allclose(dw, dw_ref, rtol=1e-4, atol=1e-3)
    # packed=1: kiln.ConvNCHWc's weight layout [K/kb, C/cb, KH, KW, cb, kb], the padded channels zero.
    dwp = grad_weight(blocked(x, cb, garbage=True), blocked(dy, kb, garbage=True), w.shape, target, packed=1, **attrs(stride, pad, dilation))
    np.testing.assert_allclose(dwp, packed(dw_ref, cb, kb), rtol=1e-4, atol=1e-3)


def test_asymmetric_pads():
    # pads [top, left, bottom, right] as ONNX resolves SAME_UPPER for an even input and stride 2.
    x, w, dy = case(1, 16, 16, (8, 8), 3, 2, 0, 1)
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    y = torch.nn.functional.conv2d(torch.nn.functional.pad(xt, (0, 1, 0, 1)), wt, stride=2)
    dy = RNG.standard_normal(tuple(y.shape)).astype("float32")
    y.backward(torch.tensor(dy))
    a = dict(strides=[2, 2], pads=[0, 0, 1, 1], dilations=[1, 1])
    dxb = grad_input(blocked(dy, 16), w, x.shape, 16, "llvm", **a)
    np.testing.assert_allclose(unblocked(dxb, 16), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    dw = grad_weight(blocked(x, 16), blocked(dy, 16), w.shape, "llvm", **a)
    np.testing.assert_allclose(dw, wt.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_bad_operands_are_named():
    b = kg.Builder()
    dy, w = b.input("dy", (1, 2, 4, 4, 8)), b.input("w", (16, 8, 3, 3))
    with pytest.raises(kiln.KilnError, match="not the output"):
        b.op("kiln.ConvGradInputNCHWc", dy, w, input_shape=[1, 8, 9, 9], block=8, strides=[1, 1], pads=[1, 1, 1, 1])
    with pytest.raises(kiln.KilnError, match="group 2 is supported in the blocked layout only as a depthwise"):
        b.op("kiln.ConvGradInputNCHWc", dy, w, input_shape=[1, 8, 4, 4], group=2, pads=[1, 1, 1, 1])
    with pytest.raises(kiln.KilnError, match="does not hold 24 channels"):
        b.op("kiln.ConvGradInputNCHWc", b.input("dy3", (1, 2, 4, 4, 8)), b.input("w3", (24, 8, 3, 3)), input_shape=[1, 8, 4, 4], pads=[1, 1, 1, 1])
    x = b.input("x", (1, 1, 4, 4, 8))
    with pytest.raises(kiln.KilnError, match="weight_shape"):
        b.op("kiln.ConvGradWeightNCHWc", x, dy, weight_shape=[16, 8, 3])
    with pytest.raises(kiln.KilnError, match="packed must be 0"):
        b.op("kiln.ConvGradWeightNCHWc", x, dy, weight_shape=[16, 8, 3, 3], pads=[1, 1, 1, 1], packed=2)
    with pytest.raises(kiln.KilnError, match="does not hold 9 channels"):
        b.op("kiln.ConvGradWeightNCHWc", x, dy, weight_shape=[16, 9, 3, 3], pads=[1, 1, 1, 1])
