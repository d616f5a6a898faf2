"""kiln.compile(model, precision="bfloat16"): MatMul/Gemm/Conv on bfloat16 weights and products with
float32 accumulation, the blocked convolutions and packed matmul panels in their bfloat16-pair forms;
against PyTorch on operands rounded to bfloat16 (in float64), and the errors of bad requests."""
import numpy as np
import pytest
import torch

import kiln

HAS_BF16 = kiln.Target("llvm").has_feature("avx512bf16")
# Where the host has no AVX-512 BF16 the same graph runs with emulated pair products (bf16_dot=True).
EMULATE = {} if HAS_BF16 else {"bf16_dot": True}


def bf16(a):
    return torch.from_numpy(np.ascontiguousarray(a, np.float32)).bfloat16().double()


def cnn(rng):
    w1 = rng.standard_normal((32, 16, 3, 3)).astype("float32") * 0.1
    b1 = rng.standard_normal(32).astype("float32") * 0.1
    w2 = rng.standard_normal((32, 32, 1, 1)).astype("float32") * 0.2
    fc = rng.standard_normal((32, 64)).astype("float32") * 0.2
    b = kiln.graph.Builder()
    x = b.input("x", (2, 16, 10, 10))
    y = b.op("Relu", b.op("Conv", x, b.constant("w1", w1), b.constant("b1", b1), pads=[1, 1, 1, 1]))
    y = b.op("Relu", b.op("Conv", y, b.constant("w2", w2)))
    y = b.op("Flatten", b.op("GlobalAveragePool", y))
    return b.build(b.op("MatMul", y, b.constant("fc", fc))), (w1, b1, w2, fc)


def reference(x, w1, b1, w2, fc):
    """The bfloat16 numerics in float64: each conv/matmul operand rounded to bfloat16, sums exact."""
    F = torch.nn.functional
    y = torch.relu(F.conv2d(bf16(x), bf16(w1), torch.from_numpy(b1).double(), padding=1))
    y = torch.relu(F.conv2d(bf16(y.float().numpy()), bf16(w2)))
    y = y.mean(dim=(2, 3))
    return (bf16(y.float().numpy()) @ bf16(fc)).numpy()


def test_bf16_cnn_matches_rounded_reference_and_uses_pair_kernels():
    rng = np.random.default_rng(0)
    model, weights = cnn(rng)
    x = rng.standard_normal((2, 16, 10, 10)).astype("float32")
    exe = kiln.compile(model, precision="bfloat16", winograd=False, **EMULATE)
    ops = " ".join(g["ops"] for g in exe.groups())
    assert "kiln.ConvNCHWcBF16Pairs" in ops, ops  # the blocked conv, bfloat16 weights
    got = exe(x)[0]
    want = reference(x, *weights)
    # float32 sums in another order, and an intermediate near a bfloat16 rounding boundary may round either way
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * np.abs(want).max())
    f32 = kiln.compile(model, winograd=False)(x)[0]
    err = np.abs(got - f32).max() / np.abs(f32).max()
    assert 1e-5 < err < 2e-2, err  # it rounded, and no more than bfloat16 does


def test_bf16_matmul_panels_match_rounded_reference():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((96, 128)).astype("float32")
    bias = rng.standard_normal(128).astype("float32")
    b = kiln.graph.Builder()
    x = b.input("x", (128, 96))
    model = b.build(b.op("Gemm", x, b.constant("w", w), b.constant("c", bias)))
    exe = kiln.compile(model, precision="bfloat16", **EMULATE)
    assert "kiln.MatMulPackedBBF16Pairs" in " ".join(g["ops"] for g in exe.groups())
    xv = rng.standard_normal((128, 96)).astype("float32")
    want = (bf16(xv) @ bf16(w) + bf16(bias)).numpy()  # autocast rounds Gemm's C too, as torch.autocast does addmm's
    np.testing.assert_allclose(exe(xv)[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_precision_errors():
    b = kiln.graph.Builder()
    x = b.input("x", (4, 8))
    model = b.build(b.op("MatMul", x, b.constant("w", np.ones((8, 8), "float32"))))
    with pytest.raises(kiln.KilnError, match="precision must be 'float32' or 'bfloat16', got 'float16'"):
        kiln.compile(model, precision="float16")
    with pytest.raises(kiln.KilnError, match="drop bf16_dot=False"):
        kiln.compile(model, precision="bfloat16", bf16_dot=False)
    with pytest.raises(kiln.KilnError, match="needs a target with AVX-512 BF16.*bf16_dot=True"):
        kiln.compile(model, target="llvm -mcpu=znver3", precision="bfloat16")
    # float32 is the default and stays as it was
    np.testing.assert_array_equal(kiln.compile(model, precision="float32")(np.ones((4, 8), "float32"))[0], np.full((4, 8), 8, "float32"))


def test_emulated_bf16_matches_the_native_path():
    # bf16_dot=True on a target without AVX-512 BF16 (Skylake-X code runs on any AVX-512 host): the pair
    # products unpacked to float32 FMAs, the same numerics as vdpbf16ps.
    if not kiln.Target("llvm").has_feature("avx512f"):
        pytest.skip("the host has no AVX-512 to run Skylake-X code")
    rng = np.random.default_rng(2)
    model, weights = cnn(rng)
    x = rng.standard_normal((2, 16, 10, 10)).astype("float32")
    emulated = kiln.compile(model, target="llvm -mcpu=skylake-avx512", precision="bfloat16", bf16_dot=True, winograd=False)
    assert "kiln.ConvNCHWcBF16Pairs" in " ".join(g["ops"] for g in emulated.groups())
    want = reference(x, *weights)
    np.testing.assert_allclose(emulated(x)[0], want, rtol=0, atol=2e-3 * np.abs(want).max())
