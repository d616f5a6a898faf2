"""The mesh's levels: calibrate() on the two-host test bed measures a host's link (shared memory) and
the network's (TCP) apart, and the auto-sharding search costs each mesh axis at its level's link, so
that with a fast host and a slow network it splits the weights inside a host (tensor parallel) and
the batch across hosts (data parallel), and the other way round when the rates say so."""
import numpy as np
import pytest

import kiln
from hostbed import Launcher
from test_dist import expect_ok

pytestmark = pytest.mark.skipif(not hasattr(kiln, "dist"), reason="kiln was built without the distribution pass")


def test_calibrate_on_the_bed_gives_two_levels_the_host_faster(host_bed):
    out = expect_ok("levels.py", 4, timeout=240, launcher=Launcher(host_bed))
    assert "levels:" in out


def chain(batch=64, width=256, layers=3):
    rng = np.random.default_rng(0)
    b = kiln.graph.Builder()
    h = b.input("x", (batch, width))
    for i in range(layers):
        h = b.op("Relu", b.op("MatMul", h, b.constant(f"w{i}", rng.standard_normal((width, width)).astype("float32"))))
    return b.build(h)


def calibration(host_rate, net_rate):
    """2 hosts x 2 ranks, as calibrate() would describe them, with the links given."""
    from kiln.dist.topology import Calibration, Level
    cost = {"flops_per_s": 50e9, "memory_bytes_per_s": 10e9, "link_bytes_per_s": min(host_rate, net_rate), "latency_s": 20e-6,
            "kernel_s": 5e-6, "run_s": 50e-6, "collective_s": 10e-6}
    levels = [Level("host", 2, host_rate, 2e-6), Level("net", 2, net_rate, 50e-6)]
    return Calibration(cost, levels, hosts=[0, 0, 1, 1])


def split_axes(specs):
    """{value name: the mesh axes its spec splits over}."""
    return {n: set(a for tok in s.split() if tok.startswith("S(") for a in tok[2:-1].split(",")) for n, s in specs.items()}


@pytest.mark.parametrize("fast", ["host", "net"])
def test_the_search_splits_weights_over_the_fast_level_and_the_batch_over_the_slow(fast):
    g = chain()
    weights = 3 * 256 * 256 * 4
    mesh = kiln.dist.Mesh(("data", 2), ("model", 2))  # ranks 0,1 on host 0: "model" runs inside a host
    rates = (20e9, 0.2e9) if fast == "host" else (0.2e9, 20e9)
    cost = calibration(*rates)
    assert cost.axis_level(mesh, "model") == "host" and cost.axis_level(mesh, "data") == "net"
    # Weights whole on every rank do not fit: they must split over one axis or both.
    plan = kiln.dist.shard(g, mesh, strategy="auto", memory_limit=int(weights * 0.7), cost=cost)
    axes = split_axes(plan.specs)
    tensor_axis, data_axis = ("model", "data") if fast == "host" else ("data", "model")
    assert all(axes[w] <= {tensor_axis} for w in ("w0", "w1", "w2")), f"a weight split over {data_axis}: {plan.report}"
    assert sum(axes[w] == {tensor_axis} for w in ("w0", "w1", "w2")) >= 2, plan.report
    assert axes["x"] == {data_axis}, plan.report
    # The per-level costs decide it: with one link for both axes the estimate cannot tell them apart.
    flat = kiln.dist.shard(g, mesh, strategy="auto", memory_limit=int(weights * 0.7), cost=dict(cost))
    assert plan.estimate(**cost.for_mesh(mesh))["total_s"] < flat.estimate(**cost.for_mesh(mesh))["total_s"], (plan.report, flat.report)


def test_a_calibration_of_other_ranks_is_refused():
    cost = calibration(20e9, 0.2e9)
    with pytest.raises(kiln.KilnError, match="calibrate on the ranks that run the plan"):
        cost.for_mesh(kiln.dist.Mesh(("data", 2)))
