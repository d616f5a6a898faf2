"""kiln.train under a memory budget: step.memory(), segments=K (activations recomputed from segment
boundaries) and memory_limit=... (the fewest segments that fit, or an error naming the least memory)."""
import numpy as np
import pytest

import kiln

pytestmark = pytest.mark.skipif(not hasattr(kiln, "dist"), reason="recomputation uses the distribution pass's balanced cut")


def mlp(batch=256, width=64, layers=8, classes=10):
    """Activations (batch x width) outweigh the weights (width x width): what recomputation saves."""
    rng = np.random.default_rng(0)
    b = kiln.graph.Builder()
    h = b.input("x", (batch, width))
    for i in range(layers):
        h = b.op("Tanh", b.op("MatMul", h, b.constant(f"w{i}", (rng.standard_normal((width, width)) / 8).astype("float32"))))
    return b.build(b.op("MatMul", h, b.constant("out", rng.standard_normal((width, classes)).astype("float32"))))


def batches(n, batch=256, width=64, classes=10):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((batch, width)).astype("float32"), rng.integers(0, classes, batch)) for _ in range(n)]


def follow(a, b, steps=4, rtol=1e-4):
    for x, y in batches(steps):
        assert a(x, y) == pytest.approx(b(x, y), rel=rtol / 10)
    for n in a.parameters:
        np.testing.assert_allclose(a.parameters[n], b.parameters[n], rtol=rtol, atol=1e-6)


def opt():
    return kiln.train.SGD(lr=0.05, momentum=0.9)


def test_memory_report_of_the_plain_step():
    step = kiln.train.compile(mlp(), optimizer=opt())
    m = step.memory()
    assert m["segments"] == 1
    assert m["parameters"] == sum(a.nbytes for a in step.parameters.values())
    assert m["optimizer_state"] == m["parameters"]  # one momentum buffer per parameter
    assert m["total"] == m["parameters"] + m["optimizer_state"] + m["inputs"] + m["running_graph"]
    # The plain step keeps the activations of all 8 layers for the backward pass.
    assert m["running_graph"] > 8 * 256 * 64 * 4


@pytest.mark.parametrize("segments", [2, 3, 5])
def test_segments_recompute_and_follow_the_plain_step(segments):
    plain = kiln.train.compile(mlp(), optimizer=opt())
    ck = kiln.train.compile(mlp(), optimizer=opt(), segments=segments)
    assert ck.memory()["segments"] == segments
    assert ck.memory()["total"] < plain.memory()["total"]
    follow(ck, plain)


def float32_products(exe):
    """The fused groups of an executor that hold a MatMul or Gemm of float32 products (not bfloat16 pairs)."""
    return [g["name"] for g in exe.groups() if {"MatMul", "Gemm"} & set(g["name"].split(" @ ")[0].split("+"))]


@pytest.mark.parametrize("bf16_dot", [False, True])
def test_segments_with_bfloat16_follow_the_plain_bfloat16_step(monkeypatch, bf16_dot):
    # The recomputed forward is the rounded one (autocast comes before the cut), so the losses and
    # parameters are those of the plain mixed-precision step. With the bfloat16 dot products, a value
    # holding bfloat16 values that crosses a segment boundary is rounded again where it arrives, and
    # so is a gradient coming back rounded: every product of every segment takes the dot products, as
    # in the plain step (True forces them; without AVX-512 BF16 they are emulated).
    native = kiln._ffi._kiln.graph.compile  # what kiln.graph.compile and the segments' compiles call

    def compile_with_choice(*a, **k):
        k.pop("bf16_dot", None)
        return native(*a[:7], bf16_dot=int(bf16_dot), **k)
    monkeypatch.setattr(kiln._ffi._kiln.graph, "compile", compile_with_choice)
    plain = kiln.train.compile(mlp(), optimizer=opt(), precision="bfloat16")
    ck = kiln.train.compile(mlp(), optimizer=opt(), precision="bfloat16", segments=3)
    assert ck.memory()["segments"] == 3 and ck.memory()["total"] < plain.memory()["total"]
    for c in ck._fwds + ck._bwds + [plain]:
        exe = c._exe if c is plain else c.exe if c is not None else None
        if exe is not None:
            assert bool(float32_products(exe)) != bf16_dot, float32_products(exe)
    follow(ck, plain, rtol=1e-4)


def test_segments_with_dropout_follow_the_plain_step():
    # Each segment's recomputed forward gets the step's seed again: the masks of its first forward.
    rng = np.random.default_rng(0)
    b = kiln.graph.Builder()
    h = b.input("x", (256, 64))
    for i in range(4):
        h = b.op("Tanh", b.op("MatMul", h, b.constant(f"w{i}", (rng.standard_normal((64, 64)) / 8).astype("float32"))))
        h = b.op("Dropout", h, b.constant(f"ratio{i}", np.array(0.3, "float32")))
    model = b.build(b.op("MatMul", h, b.constant("out", rng.standard_normal((64, 10)).astype("float32"))))
    plain = kiln.train.compile(model, optimizer=opt(), seed=3)
    ck = kiln.train.compile(model, optimizer=opt(), seed=3, segments=3)
    assert ck.memory()["segments"] == 3
    follow(ck, plain)


def test_memory_limit_picks_the_fewest_segments_that_fit():
    plain = kiln.train.compile(mlp(), optimizer=opt())
    totals = {k: kiln.train.compile(mlp(), optimizer=opt(), segments=k).memory()["total"] for k in (2, 3, 4)}
    limit = (totals[3] + totals[2]) // 2 if totals[3] < totals[2] else totals[3]
    assert limit < plain.memory()["total"]
    ck = kiln.train.compile(mlp(), optimizer=opt(), memory_limit=limit)
    assert ck.memory()["total"] <= limit
    assert ck.memory()["segments"] == min(k for k, t in totals.items() if t <= limit)
    follow(ck, plain)
    # A limit the plain step meets keeps it.
    assert kiln.train.compile(mlp(), optimizer=opt(), memory_limit=plain.memory()["total"]).memory()["segments"] == 1


def test_a_limit_no_segmentation_meets_says_the_least():
    with pytest.raises(kiln.KilnError, match=r"memory_limit=1000 bytes cannot be met: the least a step needs is \d+ bytes"):
        kiln.train.compile(mlp(), optimizer=opt(), memory_limit=1000)


def bn_cnn():
    rng = np.random.default_rng(0)
    b = kiln.graph.Builder()
    x = b.input("x", (8, 3, 6, 6))
    h = b.op("Conv", x, b.constant("w", rng.standard_normal((4, 3, 3, 3)).astype("float32")), pads=[1, 1, 1, 1])
    h = b.op("BatchNormalization", h, b.constant("g", np.ones(4, "float32")), b.constant("bb", np.zeros(4, "float32")),
             b.constant("m", np.zeros(4, "float32")), b.constant("v", np.ones(4, "float32")))
    h = b.op("Conv", b.op("Relu", h), b.constant("w2", rng.standard_normal((4, 4, 3, 3)).astype("float32") / 4), pads=[1, 1, 1, 1])
    h = b.op("Flatten", b.op("GlobalAveragePool", h))
    return b.build(b.op("MatMul", h, b.constant("fc", rng.standard_normal((4, 3)).astype("float32"))))


def test_batch_norm_running_statistics_advance_once_a_step_under_recomputation():
    # The buffers' new values come from each segment's first forward; its recomputation's are not read.
    plain = kiln.train.compile(bn_cnn(), optimizer=opt())
    ck = kiln.train.compile(bn_cnn(), optimizer=opt(), segments=3)
    assert ck.memory()["segments"] == 3 and set(ck.buffers) == set(plain.buffers) == {"m", "v"}
    rng = np.random.default_rng(2)
    for _ in range(4):
        x, y = rng.standard_normal((8, 3, 6, 6)).astype("float32"), rng.integers(0, 3, 8)
        assert ck(x, y) == pytest.approx(plain(x, y), rel=1e-5)
    # Four momentum-0.1 updates from (0, 1) toward the batch statistics: moved, and equal to the plain step's.
    assert np.abs(plain.buffers["m"]).max() > 1e-3 and np.abs(plain.buffers["v"] - 1).max() > 1e-3
    for n in plain.buffers:
        np.testing.assert_allclose(ck.buffers[n], plain.buffers[n], rtol=1e-5, atol=1e-6)
    for n in plain.parameters:
        np.testing.assert_allclose(ck.parameters[n], plain.parameters[n], rtol=1e-4, atol=1e-6)


def test_float16_loss_scaling_under_recomputation_follows_the_plain_step():
    # Each segment differentiates loss * scale; the update divides by it and skips a step that overflowed.
    plain = kiln.train.compile(mlp(), optimizer=opt(), precision="float16")
    ck = kiln.train.compile(mlp(), optimizer=opt(), precision="float16", segments=3)
    assert ck.scaler is not None and ck.memory()["segments"] == 3
    follow(ck, plain, rtol=1e-5)
    assert ck.scaler.scale == plain.scaler.scale and ck.steps == plain.steps == 4
    # 2^40 times the gradients overflows float16: the step changes nothing and halves the scale.
    scaler = kiln.train.LossScaler(init_scale=2.0 ** 40)
    ck = kiln.train.compile(mlp(), optimizer=opt(), precision="float16", loss_scale=scaler, memory_limit=ck.memory()["total"])
    assert ck.memory()["segments"] > 1
    before = {n: v.copy() for n, v in ck.parameters.items()}
    x, y = batches(1)[0]
    assert np.isfinite(ck(x, y))
    assert scaler.skipped == 1 and scaler.scale == 2.0 ** 39 and ck.steps == 0
    for n, v in ck.parameters.items():
        np.testing.assert_array_equal(v, before[n])
