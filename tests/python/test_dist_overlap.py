"""Overlapping the gradient all-reduces with the backward pass (kiln.dist bucket_mb): bitwise the results of
the runner that all-reduces in turn, on 2 and 4 ranks (tests/python/dist/dp_overlap.py), and on a mesh of one."""
import os
import re

import numpy as np
import pytest

import kiln

from test_dist import expect_ok, mlp_model, mpi

pytestmark = pytest.mark.skipif(not hasattr(kiln, "dist"), reason="kiln was built without the distribution pass")


def test_one_process_buckets_are_plain_copies():
    model, rng = mlp_model()
    mesh = kiln.dist.Mesh(("data", 1))
    one = kiln.train.compile(model, loss="cross_entropy", optimizer=kiln.train.SGD(lr=0.1))
    dp = kiln.dist.train(model, mesh, bucket_mb=0.0001, loss="cross_entropy", optimizer=kiln.train.SGD(lr=0.1))
    assert dp.runner.stats()["buckets"] >= 2
    for _ in range(3):
        x, y = rng.standard_normal((8, 16)).astype("float32"), rng.integers(0, 8, 8)
        a, b = one(x, y), dp(x, y)
        assert abs(a - b) <= 1e-6 * max(1.0, abs(a))
    for k in one.parameters:
        np.testing.assert_allclose(dp.parameters[k], one.parameters[k], rtol=1e-5, atol=1e-6)
    with pytest.raises(kiln.KilnError, match="bucket_mb"):
        kiln.dist.shard(model, mesh, strategy="data").compile(bucket_mb=-1)


def test_overlapped_buckets_match_all_reduces_in_turn():
    expect_ok("dp_overlap.py", 2, timeout=120)


def test_overlapped_buckets_on_four_ranks():
    p, _ = mpi("dp_overlap.py", 4, timeout=120, env={"DP_OVERLAP_MLP_ONLY": "1"})  # the MLP only: 4 ranks share 2 cores
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert sorted(int(r) for r in re.findall(r"OK rank (\d+)", p.stdout)) == [0, 1, 2, 3], (p.stdout + p.stderr)[-4000:]


def test_dist_bench_runs_and_counts_ring_bytes():
    """bench/dist_bench.py drives mpirun itself; on 2 ranks any all-reduce sends exactly a ring's 2(N-1)/N = 1x the payload."""
    import subprocess
    import sys

    from test_dist import MPIRUN
    if MPIRUN is None or not kiln.dist.mpi_built():
        pytest.skip("needs mpirun and kiln built with MPI")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, os.path.join(root, "bench", "dist_bench.py"), "--ranks", "2", "--models", "cnn",
                        "--steps", "2", "--warmup", "1", "--bucket-mb", "0.02", "--no-probe"], env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert "CPU:" in p.stdout and "## cnn" in p.stdout and "## overlap" in p.stdout, p.stdout
    two = re.search(r"^\s+2\s+32\s.*$", p.stdout, re.M)
    assert two and " 1.00 " in two.group(0), p.stdout  # sent/ideal on 2 ranks


def test_bf16_gradients_on_a_mesh_of_one_round_and_refuse_bad_options():
    model, rng = mlp_model()
    mesh = kiln.dist.Mesh(("data", 1))
    f32 = kiln.dist.train(model, mesh, bucket_mb=0.001, loss="cross_entropy", optimizer=kiln.train.SGD(lr=0.1))
    b16 = kiln.dist.train(model, mesh, grad_dtype="bfloat16", loss="cross_entropy", optimizer=kiln.train.SGD(lr=0.1))
    assert b16.runner.stats()["buckets"] >= 1  # bucket_mb None takes 25 MiB with bfloat16
    x, y = rng.standard_normal((8, 16)).astype("float32"), rng.integers(0, 8, 8)
    for _ in range(3):
        a, b = f32(x, y), b16(x, y)
        assert b == pytest.approx(a, rel=2e-2)
    diff = max(np.abs(f32.parameters[k] - b16.parameters[k]).max() for k in f32.parameters)
    assert 0 < diff < 1e-2, diff  # rounded, yet close
    with pytest.raises(kiln.KilnError, match="grad_dtype must be"):
        kiln.dist.shard(model, mesh, strategy="data").compile(grad_dtype="float16")
    with pytest.raises(kiln.KilnError, match="bucket_mb > 0"):
        kiln.dist.shard(model, mesh, strategy="data").compile(bucket_mb=0, grad_dtype="bfloat16")


def test_bf16_gradients_follow_the_float32_loss_curve():
    out = expect_ok("dp_bf16.py", 2, timeout=120)
    assert "last 10 mean" in out
