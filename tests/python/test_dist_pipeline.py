"""kiln.dist.pipeline: the balanced cut (its stages run one after another in one process give the
model's result) and the pipeline run under mpirun on 2 and 4 ranks (tests/python/dist/pipeline_mlp.py)."""
import numpy as np
import pytest

import kiln

pytestmark = pytest.mark.skipif(not hasattr(kiln, "dist"), reason="kiln was built without the distribution pass")

from test_dist import expect_ok  # noqa: E402  (the mpirun launcher and its skips)


def residual_mlp(widths=(32, 64, 64, 128, 32), batch=4):
    """Layers of different cost, a skip connection over two layers, and a second input read at the end."""
    rng = np.random.default_rng(2)
    b = kiln.graph.Builder()
    x = b.input("x", (batch, widths[0]))
    bias = b.input("bias", (widths[-1],))
    h, skip = x, None
    for i, (a, c) in enumerate(zip(widths, widths[1:])):
        h = b.op("Tanh", b.op("MatMul", h, b.constant(f"w{i}", (rng.standard_normal((a, c)) / np.sqrt(a)).astype("float32"))))
        if i == 1:
            skip = h
        if i == 2:
            h = b.op("Add", h, b.op("MatMul", skip, b.constant("ws", np.eye(widths[2], widths[3], dtype="float32"))))
    return b.build(b.op("Add", h, bias)), rng


def run_stages(plan, feeds):
    """The stages in order in this process, boundary values passed by name as the ranks would send them."""
    carried = {}
    for st in plan.stages:
        exe = kiln.compile(st["graph"])
        outs = exe.run([carried[n] for n in st["recv"]] + [feeds[n] for n in st["model_inputs"]])
        carried = dict(zip(st["send"], outs)) if st["send"] else None
    return outs


@pytest.mark.parametrize("stages", [1, 2, 3, 5])
def test_stages_in_order_give_the_model(stages):
    model, rng = residual_mlp()
    plan = kiln.dist.pipeline(model, micro_batches=2, num_stages=stages)
    assert len(plan.stages) == stages and all(s["num_ops"] >= 1 for s in plan.stages)
    feeds = {"x": rng.standard_normal((4, 32)).astype("float32"), "bias": rng.standard_normal(32).astype("float32")}
    want = kiln.compile(model)(feeds["x"], feeds["bias"])[0]
    got = run_stages(plan, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    text = str(plan)
    assert f"pipeline of {stages} stages" in text and "bubble" in text
    if stages > 1:
        assert plan.stages[-1]["model_inputs"][-1] == "bias"  # read where it is used, not sent along


def test_the_cut_balances_the_estimated_time():
    b = kiln.graph.Builder()
    h = b.input("x", (8, 256))
    for i in range(8):
        h = b.op("Relu", b.op("MatMul", h, b.constant(f"w{i}", np.ones((256, 256), "float32"))))
    plan = kiln.dist.pipeline(b.build(h), num_stages=4)
    times = [s["estimated_s"] for s in plan.stages]
    # Eight equal layers in four stages: two layers each.
    assert max(times) / min(times) < 1.3, times
    assert all(s["num_ops"] >= 2 for s in plan.stages)


def test_pipeline_errors():
    model, _ = residual_mlp()
    with pytest.raises(kiln.KilnError, match="fewer than the 500 stages"):
        kiln.dist.pipeline(model, num_stages=500)
    with pytest.raises(kiln.KilnError, match="num_stages must be at least 1"):
        kiln.dist.pipeline(model, num_stages=0)
    with pytest.raises(kiln.KilnError, match="micro_batches must be at least 1"):
        kiln.dist.pipeline(model, micro_batches=0)
    with pytest.raises(kiln.KilnError, match="3 stages but 1 process"):
        kiln.dist.pipeline(model, num_stages=3).compile()


@pytest.mark.parametrize("np_", [2, 4])
def test_pipeline_runs_on_ranks(np_):
    out = expect_ok("pipeline_mlp.py", np_, timeout=120)
    assert "bubble" in out


def test_one_stage_training_in_one_process_follows_kiln_train():
    """num_stages=1 runs without mpirun: micro-batched GPipe on one rank is gradient accumulation."""
    def model(batch):
        rng = np.random.default_rng(1)
        b = kiln.graph.Builder()
        h = b.op("Relu", b.op("MatMul", b.input("x", (batch, 8)), b.constant("w0", rng.standard_normal((8, 16)).astype("float32"))))
        return b.build(b.op("MatMul", h, b.constant("w1", rng.standard_normal((16, 3)).astype("float32"))))
    plan = kiln.dist.pipeline_train(model(2), loss="mse", optimizer=kiln.train.Adam(lr=0.01), micro_batches=3, num_stages=1)
    step, ref = plan.compile(), kiln.train.compile(model(6), loss="mse", optimizer=kiln.train.Adam(lr=0.01))
    rng = np.random.default_rng(0)
    for _ in range(4):
        x, y = rng.standard_normal((6, 8)).astype("float32"), rng.standard_normal((6, 3)).astype("float32")
        assert step(x, y) == pytest.approx(ref(x, y), rel=1e-5)
    for n, v in step.all_parameters().items():
        np.testing.assert_allclose(v, ref.parameters[n], rtol=1e-4, atol=1e-6)
    with pytest.raises(kiln.KilnError, match=r"must have shape \(6, 8\) \(3 micro-batches of \(2, 8\)\)"):
        step(x[:4], y[:4])


@pytest.mark.parametrize("np_", [2, 4])
def test_a_weight_shared_across_stages_trains_as_one(np_):
    out = expect_ok("pipeline_shared.py", np_, timeout=120)
    assert "shared weight: losses match" in out


@pytest.mark.parametrize("np_,launcher", [(2, "local"), (4, "local"), (2, "hosts")], indirect=["launcher"])
def test_pipeline_training_on_ranks_follows_one_process(np_, launcher):
    out = expect_ok("pipeline_train.py", np_, timeout=120, launcher=launcher)
    assert "1f1b: losses match" in out and "gpipe: losses match" in out
