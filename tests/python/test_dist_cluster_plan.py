"""kiln.dist.plan(graph, cluster) (python/kiln/dist/cluster.py): on a small cluster its pick equals a brute
force over every mesh and every sharding of every weight and input, scored by the same estimate with each
mesh axis at its level's link; the levels' rates steer it (tensor parallel inside a host when the network
is slow); a GPT's step graph is built from shapes alone."""
import itertools

import pytest

import kiln
from kiln.dist.cluster import Cluster, plan
from kiln.dist.gpt import gpt_training_graph, training_graph

pytestmark = pytest.mark.skipif(not hasattr(kiln, "dist"), reason="kiln was built without the distribution pass")
_d = kiln._ffi._kiln.dist


def small_cluster(inter_bytes_per_s=1e9):
    return Cluster(hosts=2, devices_per_host=2, flops_per_s=1e12, memory_bytes=1e12, intra_bytes_per_s=50e9,
                   intra_latency_s=2e-6, inter_bytes_per_s=inter_bytes_per_s, inter_latency_s=20e-6)


def mlp_step(batch=32, width=256, hidden=1024, classes=64):
    g = kiln.graph
    x, labels = g.make_input("x", [batch, width], "float32"), g.make_input("labels", [batch], "int64")
    w1, w2 = g.make_input("w1", [width, hidden], "float32"), g.make_input("w2", [hidden, classes], "float32")
    h = g.make_op("Relu", [g.make_op("MatMul", [x, w1])[0]])[0]
    loss = g.make_op("kiln.SoftmaxCrossEntropy", [g.make_op("MatMul", [h, w2])[0], labels])[0]
    return training_graph([x, labels], loss, [w1, w2], kiln.train.SGD(lr=0.1))


def spec(ndim, dim, split):
    return " ".join(split if d == dim else "R" for d in range(ndim))


def brute_force(graph, cluster):
    """The lowest estimate over every mesh and every combination of specs (independent of the search's code)."""
    best = None
    for data, model in cluster.meshes():
        mesh, cost = kiln.dist.Mesh(("data", data), ("model", model)), cluster.cost(data, model)
        splits = ["S(data)", "S(model)", "S(data,model)"]
        weight_opts = ["R R"] + [spec(2, d, s) for s in splits for d in (0, 1)]
        options = {"w1": weight_opts, "w2": weight_opts, "x": ["R R"] + [spec(2, 0, s) for s in splits],
                   "labels": ["R"] + splits}
        names = list(options)
        for combo in itertools.product(*(options[n] for n in names)):
            try:
                sg = _d.shard_graph(graph, mesh, dict(zip(names, combo)), False)
            except kiln.KilnError:
                continue  # a split that does not divide
            t = _d.estimate_plan(sg, cost)["total_s"]
            if best is None or t < best[0]:
                best = (t, (data, model), dict(zip(names, combo)))
    return best


@pytest.mark.parametrize("inter", [1e9, 1e12])
def test_the_plan_equals_brute_force_over_all_plans(inter):
    graph, cluster = mlp_step(), small_cluster(inter)
    got = plan(graph, cluster, max_plans=100000)  # every combination: the search's exhaustive mode
    want_s, want_mesh, want_specs = brute_force(graph, cluster)
    assert got.step_s == pytest.approx(want_s, rel=1e-9), (got, want_mesh, want_specs, got.plan.specs)
    assert got.fits and got.peak_share > 0


def test_a_slow_network_keeps_tensor_parallel_inside_a_host():
    graph = mlp_step(batch=512, width=1024, hidden=4096)
    slow, fast = plan(graph, small_cluster(1e8), max_plans=100000), plan(graph, small_cluster(1e13), max_plans=100000)
    assert slow.mesh == (2, 2) and any("S(model)" in s for n, s in slow.plan.specs.items() if n.startswith("w")), slow.plan.specs
    assert not any("data" in s for s in slow.plan.specs.values()), slow.plan.specs  # nothing crosses the slow network
    # A fast network carries splits across hosts (data parallel, or tensor parallel over every device: with
    # launches free the two are within 2%, the second ahead on the links' latency).
    assert any("data" in s for s in fast.plan.specs.values()) and fast.step_s < slow.step_s, fast.plan.specs


def test_a_gpt_step_graph_is_shapes_only():
    g, params = gpt_training_graph(layers=2, hidden=64, heads=4, batch=2, seq=16, vocab=128)
    assert params == 2 * 12 * 64 * 64 + 64 * 128
    w = [n for n in g.input_names if n.startswith("h1.")]
    assert sorted(w)[:3] == ["h1.fc_in", "h1.fc_in.exp_avg", "h1.fc_in.exp_avg_sq"]
    assert len(g.output_names) == 1 + 3 * (2 * 6 + 1)  # the loss, new weights, new Adam state
