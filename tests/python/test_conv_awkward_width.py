"""Blocked convolutions whose output width has no good divisor for the
register tile (SqueezeNet's 7x7 stride-2 stem: 109, prime; 27 and 13 on
AVX2): the default schedule tiles the padded width, full tiles of as many
pixels as fit the registers plus a guarded remainder that lowering peels,
and must give PyTorch's results with the bias and ReLU fused, on the host
target and, on an AVX-512 host, an AVX2 one. Widths with a good divisor
keep their tile."""
import re

import numpy as np
import pytest

from kiln_helpers import compile_torch, cpu_targets, host_has_avx512

torch = pytest.importorskip("torch")

TARGETS = cpu_targets()



def _conv(cin, cout, kernel, stride, padding, out_h, out_w, target, seed):
    """Conv2d + bias + ReLU whose output is out_h x out_w; its executable, output and PyTorch's."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, kernel, stride, padding), torch.nn.ReLU())
    side = lambda out: (out - 1) * stride + kernel - 2 * padding  # noqa: E731
    x = torch.randn(1, cin, side(out_h), side(out_w))
    exe = compile_torch(net, x, target)
    (y,) = exe(x.numpy())
    with torch.no_grad():
        ref = net(x).numpy()
    assert ref.shape == (1, cout, out_h, out_w)
    return exe, y, ref


def _conv_tile(exe, axis):
    """The factors of the conv's `axis` in its group's schedule ('conv.x=8x1x1x14' -> [8, 1, 1, 14])."""
    for g in exe.groups():
        m = re.search(rf"\bconv\.{axis}=(\S+)", g["schedule_detail"])
        if m:
            return [int(f) for f in m.group(1).split("x")]
    raise AssertionError(f"no conv.{axis} tile in {[g['schedule_detail'] for g in exe.groups()]}")


def _isa(target):
    """'avx512' or 'avx2': the host target is the host's (these tests assume an x86 host with AVX2 at least)."""
    return "avx512" if target == "llvm" and host_has_avx512() else "avx2"


def _fit(target):
    """Pixels of the register tile beside two vectors of output channels: 32 or 16 vector registers."""
    return {"avx512": 14, "avx2": 6}[_isa(target)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("width", [109, 55, 27, 13, 7])
@pytest.mark.parametrize("kernel,stride", [(1, 1), (3, 1), (3, 2), (7, 2)])
def test_conv_bias_relu_matches_pytorch(target, width, kernel, stride):
    exe, y, ref = _conv(8, 64, kernel, stride, kernel // 2, 3, width, target, seed=width * 10 + kernel)
    err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
    assert err <= 1e-4, f"relative error {err:.2e}"
    # The bias and ReLU fuse into the conv (or a 3x3 stride-1 Winograd conv's output transform).
    assert any(g["ops"].endswith("Relu") and ("Conv" in g["ops"] or "Winograd" in g["ops"]) for g in exe.groups()), [g["ops"] for g in exe.groups()]


@pytest.mark.parametrize("target", TARGETS)
def test_squeezenet_stem_matches_pytorch(target):
    """3 -> 96, 7x7 stride 2, unpadded: 109 x 109 out of 224 x 224 (the padded
    tile reads past the input's last column only in its guarded remainder)."""
    exe, y, ref = _conv(3, 96, 7, 2, 0, 109, 109, target, seed=1)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_prime_width_gets_a_register_tile(target):
    """109 columns (prime): the default's register tile is as many pixels as
    fit (14 on AVX-512, 6 on AVX2), not the one pixel that 109's divisors
    allow; its last tile is partial and the padded axis is not fused into
    the parallel loop (so the remainder can be peeled)."""
    exe, y, ref = _conv(3, 32, 7, 2, 0, 109, 109, target, seed=2)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    x, fit = _conv_tile(exe, "x"), _fit(target)
    assert x[-1] == fit and x[0] * x[-1] == -(-109 // fit) * fit, x
    # Parallel: the S0 loops before the padded column axis (3 of n, fo, fi, y), not all five fused.
    detail = next(g["schedule_detail"] for g in exe.groups() if "conv.x=" in g["schedule_detail"])
    assert re.search(r"\bconv\.parallel=3\b", detail), detail


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("width,tile", [(56, {"avx512": 14, "avx2": 4}), (55, {"avx512": 11, "avx2": 5}), (14, {"avx512": 14, "avx2": 2}),
                                        (27, {"avx512": 9})])
def test_good_divisors_keep_their_tile(target, width, tile):
    """Widths with a good divisor (or a good 2-D tile: 14 x 14 on AVX2 takes
    2 x 2; 27 on AVX-512 takes 9 of 14, near enough) tile their own extent, as before."""
    if _isa(target) not in tile:
        pytest.skip("padded on this target (test_poor_divisors_are_padded)")
    exe, _, _ = _conv(32, 64, 1, 1, 0, width, width, target, seed=3)
    x = _conv_tile(exe, "x")
    assert x[-1] == tile[_isa(target)] and x[0] * x[-1] == width, x


@pytest.mark.parametrize("target", TARGETS)
def test_poor_divisors_are_padded(target):
    """27 x 27 on AVX2: 3 columns of the 6 that fit (80% of the FMAs per load) -> 5 tiles of 6, the last partial."""
    if _isa(target) != "avx2":
        pytest.skip("27 keeps its 9 of 14 on AVX-512")
    exe, y, ref = _conv(32, 64, 1, 1, 0, 27, 27, target, seed=4)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    assert _conv_tile(exe, "x") == [5, 1, 1, 6]
