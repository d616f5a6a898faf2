"""What a dynamic model's calls cost beside their kernels (Executor.run_stats): one plan per new shape,
no planning and no arena allocation at a shape seen lately, the arena allocated at its bound when every
shape variable has a range, and grown geometrically (a few allocations for a growing decoder cache) when not."""
import numpy as np
import torch

import kiln

RNG = np.random.default_rng(4949)


def mlp_model(**compile_args):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16), torch.nn.LayerNorm(16)).eval()
    graph = kiln.graph.from_torch(net, (torch.randn(2, 16),), shapes={"input0": ("batch", 16)})
    return net, kiln.compile(graph, **compile_args)


def run_checked(net, exe, b):
    x = RNG.standard_normal((b, 16)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(exe.run([x])[0], want, rtol=1e-4, atol=1e-5)


def test_one_plan_per_new_shape_and_none_once_seen():
    net, exe = mlp_model()
    start = exe.run_stats()
    assert start["runs"] == 0 and start["plans"] == 0
    for b in (3, 5, 3, 5, 3):
        run_checked(net, exe, b)
    seen = exe.run_stats()
    assert seen["runs"] == 5 and seen["plans"] == 2
    assert seen["plan_seconds"] > 0 and 0 < seen["last_plan_seconds"] < 1
    for _ in range(20):  # the hot path: shapes seen lately plan nothing and allocate no arena
        run_checked(net, exe, 3)
        run_checked(net, exe, 5)
    hot = exe.run_stats()
    assert hot["plans"] == 2 and hot["arena_allocations"] == seen["arena_allocations"] and hot["arena_bytes"] == seen["arena_bytes"]
    assert hot["plan_seconds"] == seen["plan_seconds"] and hot["arena_seconds"] == seen["arena_seconds"]


def test_a_shape_evicted_from_the_cache_is_planned_again():
    net, exe = mlp_model()
    for b in range(1, 18):  # 17 shapes: the first goes out of the 16 cached
        run_checked(net, exe, b)
    assert exe.run_stats()["plans"] == 17
    run_checked(net, exe, 17)  # still cached
    assert exe.run_stats()["plans"] == 17
    run_checked(net, exe, 1)
    assert exe.run_stats()["plans"] == 18


def test_the_arena_is_allocated_at_its_bound_once_when_every_variable_has_a_range():
    net, exe = mlp_model(dims={"batch": (1, 96)})
    made = exe.run_stats()
    assert made["arena_allocations"] == 1 and made["arena_bytes"] >= exe.memory_bound()["arena_bytes"] > 0
    for b in (1, 7, 96, 50, 2):
        run_checked(net, exe, b)
    assert exe.run_stats()["arena_allocations"] == 1 and exe.run_stats()["plans"] == 5


def test_without_ranges_the_arena_grows_geometrically():
    net, exe = mlp_model()
    for b in range(1, 301, 3):  # a growing size, as a decoder's cache grows a position a step
        run_checked(net, exe, b)
    st = exe.run_stats()
    assert st["plans"] == 100
    assert st["arena_bytes"] >= exe.memory({"batch": 298})["arena_bytes"]
    # each growth is by half at least: from the first size to the last a handful of allocations, not one per size
    need = [exe.memory({"batch": b})["arena_bytes"] for b in range(1, 301, 3)]
    assert len(set(need)) > 30 and st["arena_allocations"] <= 16
