"""Mixed precision: kiln.graph.autocast rounds MatMul/Gemm/Conv operands and results to bfloat16 /
float16 (checked against numpy's rounding); kiln.train with precision= trains to the float32
loss within 2%; float16's dynamic loss scale skips overflowing steps and lowers the scale."""
import numpy as np
import pytest

import kiln


def round_to(a, dtype):
    """numpy's rounding of float32 to bfloat16 (nearest even, kept in float32) or float16."""
    a = np.asarray(a, np.float32)
    if dtype == "float16":
        return a.astype(np.float16).astype(np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return r.view(np.float32)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_autocast_rounds_operands_and_results(dtype):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 8)).astype("float32")
    b = kiln.graph.Builder()
    g = b.build(b.op("Relu", b.op("MatMul", b.input("x", (4, 32)), b.constant("w", w))))
    ac = kiln.graph.autocast(g, dtype)
    text = str(ac)
    assert text.count("Cast") == 6 and ("bfloat16" if dtype == "bfloat16" else "float16") in text
    x = rng.standard_normal((4, 32)).astype("float32")
    got = kiln.compile(ac)(x)[0]
    want = np.maximum(round_to(round_to(x, dtype).astype(np.float64) @ round_to(w, dtype), dtype), 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert not np.allclose(got, np.maximum(x @ w, 0), rtol=1e-6, atol=0)  # it did round
    with pytest.raises(kiln.KilnError, match="'bfloat16' or 'float16'"):
        kiln.graph.autocast(g, "int8")


def teacher_task(steps, batch=32, width=24, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((width, classes)).astype("float32")
    data = []
    for _ in range(steps):
        x = rng.standard_normal((batch, width)).astype("float32")
        data.append((x, np.argmax(x @ teacher, axis=1)))
    return data


def mlp(batch=32, width=24, hidden=48, classes=4):
    rng = np.random.default_rng(1)
    b = kiln.graph.Builder()
    h = b.op("Tanh", b.op("MatMul", b.input("x", (batch, width)), b.constant("w1", (rng.standard_normal((width, hidden)) / 5).astype("float32"))))
    return b.build(b.op("MatMul", h, b.constant("w2", (rng.standard_normal((hidden, classes)) / 7).astype("float32"))))


def train(step, data):
    return [step(x, y) for x, y in data]


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_mixed_precision_trains_to_the_float32_loss(precision):
    data = teacher_task(120)
    ref = train(kiln.train.compile(mlp(), optimizer=kiln.train.SGD(lr=0.2, momentum=0.9)), data)
    low_step = kiln.train.compile(mlp(), optimizer=kiln.train.SGD(lr=0.2, momentum=0.9), precision=precision)
    low = train(low_step, data)
    assert np.mean(ref[-20:]) < 0.6 * ref[0]  # it learned
    assert abs(np.mean(low[-20:]) - np.mean(ref[-20:])) <= 0.02 * np.mean(ref[-20:]), (np.mean(low[-20:]), np.mean(ref[-20:]))
    assert low != ref  # the rounding changed the arithmetic
    assert (low_step.scaler is not None) == (precision == "float16")  # float16 scales the loss by default
    for p in low_step.parameters.values():
        assert p.dtype == np.float32  # master weights


def test_dynamic_loss_scale_skips_overflowing_steps():
    data = teacher_task(40)
    scaler = kiln.train.LossScaler(init_scale=2.0 ** 40, growth_interval=10)
    step = kiln.train.compile(mlp(), optimizer=kiln.train.Adam(lr=0.01), precision="float16", loss_scale=scaler)
    before = {n: v.copy() for n, v in step.parameters.items()}
    step(*data[0])
    # 2^40 times the gradients overflows float16: the step changed nothing and halved the scale.
    assert scaler.skipped == 1 and scaler.scale == 2.0 ** 39 and step.steps == 0
    for n, v in step.parameters.items():
        np.testing.assert_array_equal(v, before[n])
    losses = train(step, data[1:])
    assert scaler.scale < 2.0 ** 28, scaler.scale  # it came down to where the gradients fit
    assert scaler.skipped >= 5 and step.steps == 40 - scaler.skipped
    assert np.mean(losses[-5:]) < losses[0]  # and then it trained


def test_precision_errors():
    with pytest.raises(kiln.KilnError, match="precision must be"):
        kiln.train.compile(mlp(), precision="int8")
    with pytest.raises(kiln.KilnError, match="loss_scale must be"):
        kiln.train.compile(mlp(), loss_scale="often")
    with pytest.raises(kiln.KilnError, match="init_scale"):
        kiln.train.compile(mlp(), loss_scale=-1.0)


def bf16_products(shapes, ta=False, tb=False, alpha=1.0, with_c=False, batched=False):
    """A MatMul (or a Gemm with transA/transB/alpha/C) of two inputs, autocast to bfloat16, and its
    numpy reference: the rounded operands multiplied in float64, the result rounded."""
    rng = np.random.default_rng(3)
    (a_shape, b_shape) = shapes
    b = kiln.graph.Builder()
    x, w = b.input("x", a_shape), b.input("w", b_shape)
    feeds = [rng.standard_normal(a_shape).astype("float32"), rng.standard_normal(b_shape).astype("float32")]
    if batched or not (ta or tb or alpha != 1.0 or with_c):
        y = b.op("MatMul", x, w)
        want = round_to(round_to(feeds[0], "bfloat16").astype(np.float64) @ round_to(feeds[1], "bfloat16"), "bfloat16")
    else:
        c = rng.standard_normal((b_shape[0] if tb else b_shape[1],)).astype("float32")
        y = b.op("Gemm", x, w, *([b.constant("c", c)] if with_c else []), transA=int(ta), transB=int(tb), alpha=alpha)
        A = round_to(feeds[0], "bfloat16").astype(np.float64)
        B = round_to(feeds[1], "bfloat16").astype(np.float64)
        prod = alpha * ((A.T if ta else A) @ (B.T if tb else B)) + (round_to(c, "bfloat16") if with_c else 0)
        want = round_to(prod, "bfloat16")
    return kiln.graph.autocast(b.build(y), "bfloat16"), feeds, want


@pytest.mark.parametrize("bf16_dot", [True, False])
@pytest.mark.parametrize("case", [
    dict(shapes=((16, 64), (64, 48))),
    dict(shapes=((9, 37), (37, 33))),                      # odd K pads a zero, odd N
    dict(shapes=((3, 8, 40), (40, 32)), batched=True),     # batch dims
    dict(shapes=((40, 12), (40, 32)), ta=True),            # a weight gradient's A^T
    dict(shapes=((12, 40), (32, 40)), tb=True, alpha=0.5, with_c=True),
])
def test_bf16_dot_products_compute_the_rounded_matmul(bf16_dot, case):
    g, feeds, want = bf16_products(**case)
    exe = kiln.compile(g, bf16_dot=bf16_dot)
    ops = " ".join(gr["ops"] for gr in exe.groups())
    assert ("kiln.MatMulBF16Pairs" in ops) == bf16_dot, ops
    got = exe(*feeds)[0]
    # One bfloat16 ulp where the float32 sums of the two paths round to either side.
    np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-6)  # one bfloat16 ulp
    assert np.mean(got == want) > 0.97


def test_the_default_takes_pair_dot_products_only_where_they_beat_fma():
    """By default (bf16_dot=None) the rounded products run as pair dot products on Zen 4 and on AMX Xeons, but on an
    Intel core without AMX, whose vdpbf16ps issues at a quarter of the FMA rate, as float32 FMAs of the rounded
    operands: the same products, so the same rounded result, on every target that runs here."""
    g, feeds, want = bf16_products(((40, 64), (64, 48)))
    for target, pairs in (("llvm -mcpu=znver4", True), ("llvm -mcpu=sapphirerapids", True),
                          ("llvm -mcpu=sapphirerapids -mattr=-amx-tile,-amx-bf16,-amx-int8", False),
                          ("llvm -mcpu=emeraldrapids -mattr=-amx-tile", False), ("llvm -mcpu=znver3", False)):
        exe = kiln.compile(g, target=target)
        assert ("kiln.MatMulBF16Pairs" in " ".join(gr["ops"] for gr in exe.groups())) == pairs, target
        t = kiln.Target(target)
        if all(f in kiln.Target("llvm").features for f in t.features if f.startswith("avx") or f.startswith("amx")):
            got = exe(*feeds)[0]
            np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-6)  # one bfloat16 ulp
            assert np.mean(got == want) > 0.97, target


def test_bf16_dot_leaves_float32_matmuls_alone():
    rng = np.random.default_rng(0)
    b = kiln.graph.Builder()
    g = b.build(b.op("MatMul", b.input("x", (8, 16)), b.constant("w", rng.standard_normal((16, 8)).astype("float32"))))
    exe = kiln.compile(g, bf16_dot=True)
    assert "BF16" not in " ".join(gr["ops"] for gr in exe.groups())


def test_bf16_dot_products_train_as_the_rounded_matmuls(monkeypatch):
    """The whole bfloat16 step (forward, the gradients' transposed products, the update) with dot
    products follows the same step with the products emulated in float32."""
    data = teacher_task(60)
    real = kiln.graph.compile
    runs = {}
    for dot in (True, False):
        monkeypatch.setattr(kiln.graph, "compile", lambda *a, dot=dot, **k: real(*a, bf16_dot=dot, **k))
        step = kiln.train.compile(mlp(), optimizer=kiln.train.SGD(lr=0.2, momentum=0.9), precision="bfloat16")
        ops = [gr["ops"] for gr in step._exe.groups()]
        assert (sum("kiln.MatMulBF16Pairs" in o for o in ops) == 5) == dot, ops  # 2 forward, 3 gradient products
        runs[dot] = (train(step, data), step.parameters["w1"].copy())
    # Identical at first; then a result rounded to the other side of a bfloat16 step (0.4%)
    # now and then lets the two drift apart a little, as two bfloat16 runs on different hardware do.
    np.testing.assert_allclose(runs[True][0][:5], runs[False][0][:5], rtol=1e-4)
    np.testing.assert_allclose(runs[True][0], runs[False][0], rtol=3e-2)
    assert abs(np.mean(runs[True][0][-20:]) - np.mean(runs[False][0][-20:])) <= 0.01 * np.mean(runs[False][0][-20:])
    w_dot, w_emul = runs[True][1], runs[False][1]
    assert np.abs(w_dot - w_emul).max() <= 0.02 * np.abs(w_emul).max(), np.abs(w_dot - w_emul).max()


def host_without_amx():
    """The host's target less its AMX tiles: the pair convolutions below (vdpbf16ps, or emulated without AVX-512 BF16)
    on every host, where AMX hosts would take use_amx_convs' tiles instead (test_amx_train_convs.py)."""
    t = kiln.Target("llvm")
    keep = [f for f in t.features if not f.startswith("amx")]
    return f"llvm -mcpu={t.mcpu} -mattr=" + ",".join(["+" + f for f in keep] + ["-amx-tile", "-amx-bf16", "-amx-int8"])


@pytest.mark.parametrize("bf16_dot", [True, False])
@pytest.mark.parametrize("N,C,H,K,k,stride,pad,bias", [(2, 7, 9, 16, 3, 1, 1, True), (2, 32, 12, 32, 3, 1, 1, False),
                                                      (1, 16, 15, 32, 3, 2, 1, False), (2, 16, 8, 24, 1, 1, 0, True)])
def test_bf16_dot_convolutions_compute_the_rounded_conv(bf16_dot, N, C, H, K, k, stride, pad, bias):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    b = kiln.graph.Builder()
    xv, wv = rng.standard_normal((N, C, H, H)).astype("float32"), rng.standard_normal((K, C, k, k)).astype("float32")
    bv = rng.standard_normal(K).astype("float32")
    ins = [b.input("x", xv.shape), b.input("w", wv.shape)] + ([b.input("b", bv.shape)] if bias else [])
    g = kiln.graph.autocast(b.build(b.op("Conv", *ins, strides=[stride, stride], pads=[pad] * 4)), "bfloat16")
    exe = kiln.compile(g, bf16_dot=bf16_dot, target=host_without_amx())
    assert ("kiln.ConvBF16Pairs" in " ".join(gr["ops"] for gr in exe.groups())) == bf16_dot  # odd C pads a zero channel
    got = exe(xv, wv, *([bv] if bias else []))[0]
    t = lambda a: torch.tensor(round_to(a, "bfloat16"), dtype=torch.float64)  # noqa: E731
    want = round_to(torch.nn.functional.conv2d(t(xv), t(wv), t(bv) if bias else None, stride=stride, padding=pad).numpy(), "bfloat16")
    np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-6)  # one bfloat16 ulp
    assert np.mean(got == want) > 0.97


def small_cnn(batch=4, channels=16, size=10, classes=5):
    rng = np.random.default_rng(2)
    b = kiln.graph.Builder()
    w = lambda name, *shape: b.constant(name, (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype("float32"))  # noqa: E731
    h = b.op("Relu", b.op("Conv", b.input("x", (batch, channels, size, size)), w("c1", 16, channels, 3, 3), pads=[1, 1, 1, 1]))
    h = b.op("Relu", b.op("Conv", h, w("c2", 24, 16, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]))
    h = b.op("Relu", b.op("Conv", h, w("c3", 16, 24, 3, 3), pads=[1, 1, 1, 1]))
    h = b.op("Flatten", b.op("GlobalAveragePool", h))
    return b.build(b.op("MatMul", h, b.constant("fc", (rng.standard_normal((16, classes)) / 4).astype("float32"))))


def test_bf16_dot_convolutions_train_as_the_rounded_convolutions(monkeypatch):
    """Forward convolutions and both their gradients as bfloat16 dot products follow the same step
    with the products emulated in float32."""
    rng = np.random.default_rng(5)
    data = [(rng.standard_normal((4, 16, 10, 10)).astype("float32"), rng.integers(0, 5, 4)) for _ in range(12)]
    real = kiln.graph.compile
    runs = {}
    for dot in (True, False):
        monkeypatch.setattr(kiln.graph, "compile", lambda *a, dot=dot, **k: real(*a, bf16_dot=dot, **k))
        step = kiln.train.compile(small_cnn(), optimizer=kiln.train.SGD(lr=0.1, momentum=0.9), precision="bfloat16", target=host_without_amx())
        ops = " ".join(gr["ops"] for gr in step._exe.groups())
        assert (ops.count("kiln.ConvBF16Pairs"), ops.count("kiln.ConvGradInputBF16Pairs")) == ((3, 2) if dot else (0, 0)), ops
        assert ops.count("kiln.ConvGradWeightBF16Pairs") == (3 if dot else 0), ops
        c1_init = step.parameters["c1"].copy()
        first = step(*data[0])
        c1 = step.parameters["c1"] - c1_init  # the first update: a weight gradient through both input gradients
        runs[dot] = (first, c1, train(step, data[1:]))
    (l_dot, c1_dot, curve_dot), (l_emul, c1_emul, curve_emul) = runs[True], runs[False]
    # The two sum the products in another order, and a conv output near a bfloat16 rounding boundary
    # then rounds to either neighbour (2^-8 apart): the first losses agree to about 1e-4, not to float32.
    assert l_dot == pytest.approx(l_emul, rel=3e-4)
    assert np.abs(c1_emul).max() > 0 and np.abs(c1_dot - c1_emul).max() <= 0.02 * np.abs(c1_emul).max(), np.abs(c1_dot - c1_emul).max()
    np.testing.assert_allclose(curve_dot, curve_emul, rtol=3e-2)
    assert curve_dot[-1] < first
