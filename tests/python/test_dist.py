"""kiln.dist: sharding plans in one process, and scripts under tests/python/dist run by
mpirun on 2 and 4 ranks (each checks every rank's result against the one-process
kiln run and numpy/PyTorch, and prints "OK rank r")."""
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import kiln
from hostbed import Launcher, python_env

pytestmark = pytest.mark.skipif(not hasattr(kiln, "dist"), reason="kiln was built without the distribution pass")

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "dist")
MPIRUN = shutil.which("mpirun")


def mpi(script, np_, timeout=60, env=None, launcher=None, popen=False):
    """Runs tests/python/dist/<script> (or a command, as a list) on np_ ranks, on this host or across the
    test bed (launcher); popen=True returns the running mpirun (stdout and stderr in one pipe)."""
    if MPIRUN is None:
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev); the MPI tests need it")
    if not kiln.dist.mpi_built():
        pytest.skip("kiln was built without MPI (libopenmpi-dev missing at configure time)")
    e = python_env(env)
    program = [sys.executable, os.path.join(SCRIPTS, script)] if isinstance(script, str) else script  # or a whole command
    cmd = (launcher or Launcher()).command(np_, e) + program
    if popen:
        return subprocess.Popen(cmd, cwd=SCRIPTS, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    start = time.monotonic()
    p = subprocess.run(cmd, cwd=SCRIPTS, env=e, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - start


def expect_ok(script, np_, timeout=60, launcher=None, env=None):
    p, _ = mpi(script, np_, timeout, env=env, launcher=launcher)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    # Ranks' lines may interleave: look for the markers anywhere.
    assert sorted(int(r) for r in re.findall(r"OK rank (\d+)", p.stdout)) == list(range(np_)), out[-4000:]
    return p.stdout


def mlp_model():
    sys.path.insert(0, SCRIPTS)
    try:
        from common import mlp
    finally:
        sys.path.pop(0)
    return mlp()


def test_one_process_mesh_of_one():
    model, rng = mlp_model()
    assert kiln.dist.size() == 1 and kiln.dist.rank() == 0
    plan = kiln.dist.shard(model, kiln.dist.Mesh(("model", 1)), strategy="tensor")
    text = str(plan)
    assert "w1" in text and "R S(model)" in text and "kiln.AllReduce" in text and "bytes=256" in text
    x = rng.standard_normal((8, 16)).astype("float32")
    (y,) = plan.compile()(x)
    np.testing.assert_allclose(y, kiln.compile(model)(x)[0], rtol=1e-5, atol=1e-6)


def test_plan_for_two_ranks_and_its_lowering():
    model, _ = mlp_model()
    plan = kiln.dist.shard(model, kiln.dist.Mesh(("data", 2), ("model", 2)), strategy="tensor", specs={"x": [("data",), None]})
    assert [c[0] for c in plan.collectives()] == ["kiln.AllReduce", "kiln.AllGather"]
    local = plan.lower(3)
    assert local.input_types[0][0] == (4, 16)
    with pytest.raises(kiln.KilnError, match="mpirun -np 4"):
        plan.compile()


def test_errors_name_the_problem():
    model, _ = mlp_model()
    with pytest.raises(kiln.KilnError, match="no axis 'pipe'"):
        kiln.dist.shard(model, kiln.dist.Mesh(("data", 2)), specs={"x": "S(pipe) R"})
    with pytest.raises(kiln.KilnError, match="no input or weight"):
        kiln.dist.shard(model, kiln.dist.Mesh(("data", 2)), specs={"nope": "R"})
    with pytest.raises(kiln.KilnError, match="cannot be split into 3"):
        kiln.dist.shard(model, kiln.dist.Mesh(("data", 3)), strategy="data")
    with pytest.raises(kiln.KilnError, match="strategy"):
        kiln.dist.shard(model, kiln.dist.Mesh(("data", 2)), strategy="pipeline")


def test_nccl_says_what_is_missing():
    try:
        kiln.dist.nccl_all_reduce(np.ones(4, "float32"))
    except kiln.KilnError as e:
        assert "NCCL" in str(e) and ("not found" in str(e) or "GPU" in str(e))
    else:  # a GPU machine: one rank sums to itself
        pass


def test_communicator_calls():
    expect_ok("comm_ops.py", 2)


@pytest.mark.parametrize("np_", [2, 4])
def test_resharding_between_every_pair_of_specs(np_):
    expect_ok("reshard.py", np_)


@pytest.mark.parametrize("np_", [2, 4])
def test_tensor_parallel_mlp(np_):
    out = expect_ok("tp_mlp.py", np_)
    assert "kiln.AllReduce" in out


def test_rule_families_on_split_inputs():
    expect_ok("rules_zoo.py", 2)


def test_tensor_parallel_attention_split_by_heads():
    expect_ok("tp_attention.py", 2)  # 4 ranks pass too (tp_attention.py); left out to keep the suite short


@pytest.mark.parametrize("np_", [2, 4])
def test_data_parallel_cnn(np_):
    expect_ok("dp_cnn.py", np_, timeout=90)


@pytest.mark.parametrize("np_,launcher", [(2, "local"), (4, "local"), (4, "hosts")], indirect=["launcher"])
def test_tensor_parallel_training_20_steps(np_, launcher):
    out = expect_ok("tp_train.py", np_, timeout=90, launcher=launcher)
    assert "AllReduce" in out


def test_tensor_parallel_attention_training():
    expect_ok("tp_attention_train.py", 2, timeout=90)


@pytest.mark.parametrize("launcher", ["local", "hosts"], indirect=True)
def test_data_parallel_training_20_steps(launcher):
    out = expect_ok("dp_train.py", 2, timeout=90, launcher=launcher)
    assert out.count("kiln.AllReduce") == 5  # one per parameter's gradient, one for the loss
    assert "kiln.AllGather" not in out  # the batch is never gathered


def test_data_parallel_cnn_training_keeps_the_batch_split():
    expect_ok("dp_cnn_train.py", 2, timeout=90)


@pytest.mark.parametrize("mode", ["exit", "hang"])
def test_a_lost_rank_ends_the_others(mode):
    p, seconds = mpi("killed.py", 2, timeout=60, env={"KILN_DIST_TIMEOUT": "5", "KILLED_MODE": mode})
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "finished a collective without its peer" not in out
    assert seconds < 30, f"took {seconds:.1f} s"
    if mode == "hang":
        assert "did not complete within 5 s" in out and "aborting all ranks" in out, out
    else:
        assert "exit" in out.lower(), out
