"""kiln.dist.shard(strategy="auto"): the search's choice in one process, and the chosen plan run
under mpirun on 2 and 4 ranks against numpy (tests/python/dist/auto_chain.py), and for a CNN's
convolution weights on 2 ranks against the one-process result (auto_cnn.py)."""
import numpy as np
import pytest

import kiln

pytestmark = pytest.mark.skipif(not hasattr(kiln, "dist"), reason="kiln was built without the distribution pass")

from test_dist import expect_ok  # noqa: E402  (the mpirun launcher and its skips)


def chain(width=512, layers=4, batch=32):
    rng = np.random.default_rng(0)
    b = kiln.graph.Builder()
    h = b.input("x", (batch, width))
    for i in range(layers):
        h = b.op("Relu", b.op("MatMul", h, b.constant(f"w{i}", rng.standard_normal((width, width)).astype("float32"))))
    return b.build(h)


def test_auto_without_a_limit_splits_the_batch_and_with_one_splits_the_weights():
    model, mesh = chain(), kiln.dist.Mesh(("data", 2), ("model", 2))
    free = kiln.dist.shard(model, mesh, strategy="auto")
    assert free.specs["x"].startswith("S(data,model)"), free.report
    assert all(free.specs[f"w{i}"] == "R R" for i in range(4)), free.report
    limit = 3 << 20  # 4 MB of weights
    tight = kiln.dist.shard(model, mesh, strategy="auto", memory_limit=limit)
    assert any(tight.specs[f"w{i}"] != "R R" for i in range(4)), tight.report
    assert tight.estimate()["memory_bytes"] <= limit
    assert tight.baselines["data"]["memory_bytes"] > limit
    assert "over the limit" in tight.report and "# estimate:" in tight.report
    # A slower link makes communication dearer: the estimate of the same plan grows.
    assert tight.estimate(link_bytes_per_s=1e8)["comm_s"] > tight.estimate()["comm_s"]


def test_link_rates_take_large_messages_apart():
    # A ring over 2 ranks: 10 us of latency a step, 2 GB/s up to 64 KB; 4 MB at a tenth of the rate.
    sizes = [1 << 10, 1 << 16, 1 << 18, 1 << 20, 1 << 22]
    model = lambda b: 2 * 10e-6 + b / 2e9
    times = [model(b) for b in sizes[:3]] + [10 * b / 2e9 for b in sizes[3:]]
    r = kiln.dist.calibration._link_rates(2, sizes, times)
    assert r["link_bytes_per_s"] == pytest.approx(2e9, rel=1e-6) and r["latency_s"] == pytest.approx(10e-6, rel=1e-6)
    assert r["large_message_bytes"] == 1 << 18  # the last size the small model still predicts within 2x
    assert r["large_link_bytes_per_s"] == pytest.approx(2e8, rel=0.01)
    # One rate for every size: no large rate.
    assert "large_message_bytes" not in kiln.dist.calibration._link_rates(2, sizes, [model(b) for b in sizes])


def test_auto_errors():
    model, mesh = chain(), kiln.dist.Mesh(("data", 2), ("model", 2))
    with pytest.raises(kiln.KilnError, match="the least any plan needs is"):
        kiln.dist.shard(model, mesh, strategy="auto", memory_limit=1 << 20)
    with pytest.raises(kiln.KilnError, match="chooses every spec itself"):
        kiln.dist.shard(model, mesh, strategy="auto", specs={"x": "R R"})
    with pytest.raises(kiln.KilnError, match="unknown key 'flops'"):
        kiln.dist.shard(model, mesh, strategy="auto", cost={"flops": 1})


@pytest.mark.parametrize("np_,launcher", [(2, "local"), (4, "local"), (2, "hosts")], indirect=["launcher"])
def test_auto_plan_runs_on_ranks(np_, launcher):
    out = expect_ok("auto_chain.py", np_, timeout=120, launcher=launcher)
    assert "estimate" in out and "measured" in out


def test_auto_splits_conv_weights_under_a_limit():
    out = expect_ok("auto_cnn.py", 2, timeout=120)
    assert "auto cnn: ['" in out


def attention_block(B=2, S=16, E=256, H=8):
    rng = np.random.default_rng(3)
    D = E // H
    b = kiln.graph.Builder()
    x = b.input("x", (B, S, E))

    def heads(name, perm):
        p = b.op("MatMul", x, b.constant(name, (rng.standard_normal((E, E)) * 0.05).astype("float32")))
        return b.op("Transpose", b.op("Reshape", p, b.constant(name + ".shape", np.array([B, S, H, D], "int64"))), perm=perm)

    q, k, v = heads("wq", [0, 2, 1, 3]), heads("wk", [0, 2, 3, 1]), heads("wv", [0, 2, 1, 3])
    s = b.op("Softmax", b.op("Mul", b.op("MatMul", q, k), b.constant("scale", np.array(D ** -0.5, "float32"))), axis=-1)
    o = b.op("Reshape", b.op("Transpose", b.op("MatMul", s, v), perm=[0, 2, 1, 3]), b.constant("merge", np.array([B, S, E], "int64")))
    wo = b.constant("wo", (rng.standard_normal((E, E)) * 0.05).astype("float32"))
    return b.build(b.op("Add", b.op("MatMul", o, wo), x)), 4 * E * E * 4


def test_auto_splits_attention_by_heads_under_a_limit():
    # No head rule of its own: Q/K/V column splits carry through the reshape to
    # the heads, and the search finds Megatron's plan (one all-reduce) itself.
    model, weight_bytes = attention_block()
    plan = kiln.dist.shard(model, kiln.dist.Mesh(("model", 2)), strategy="auto", memory_limit=int(weight_bytes * 0.7))
    assert [plan.specs[w] for w in ("wq", "wk", "wv", "wo")] == ["R S(model)"] * 3 + ["S(model) R"], plan.report
    assert [c[0] for c in plan.collectives()] == ["kiln.AllReduce"], plan.collectives()
