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
    scaler = kiln.train_precision.LossScaler(init_scale=2.0 ** 40, growth_interval=10)
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
    with pytest.raises(kiln.KilnError, match="loss scaling do not combine yet.*precision='bfloat16'"):
        kiln.train.compile(mlp(), precision="float16", segments=2)
