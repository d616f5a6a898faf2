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


def test_auto_errors():
    model, mesh = chain(), kiln.dist.Mesh(("data", 2), ("model", 2))
    with pytest.raises(kiln.KilnError, match="the least any plan needs is"):
        kiln.dist.shard(model, mesh, strategy="auto", memory_limit=1 << 20)
    with pytest.raises(kiln.KilnError, match="chooses every spec itself"):
        kiln.dist.shard(model, mesh, strategy="auto", specs={"x": "R R"})
    with pytest.raises(kiln.KilnError, match="unknown key 'flops'"):
        kiln.dist.shard(model, mesh, strategy="auto", cost={"flops": 1})


@pytest.mark.parametrize("np_", [2, 4])
def test_auto_plan_runs_on_ranks(np_):
    out = expect_ok("auto_chain.py", np_, timeout=120)
    assert "estimate" in out and "measured" in out


def test_auto_splits_conv_weights_under_a_limit():
    out = expect_ok("auto_cnn.py", 2, timeout=120)
    assert "auto cnn: ['" in out
