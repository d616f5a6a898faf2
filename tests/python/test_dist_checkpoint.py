"""Saving and resuming training (kiln.train.save / load, python/kiln/train/saving.py): round trips in
one process and over 1, 2 and 4 ranks, across rank counts and plans; truncated, corrupt and half-written
checkpoints refused; a run killed mid-training (a rank, or a host of the test bed) resumed from its last
checkpoint follows the uninterrupted run's losses bitwise."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
from test_dist import SCRIPTS, mpi, python_env

sys.path.insert(0, SCRIPTS)
from common import mlp  # noqa: E402
sys.path.pop(0)


def trained(steps=3, **options):
    model, _ = mlp(batch=8, d_in=12, hidden=16, d_out=4, seed=3)
    step = kiln.train.compile(model, loss="cross_entropy", optimizer=kiln.train.Adam(lr=0.01), **options)
    rng = np.random.default_rng(7)
    batches = [(rng.standard_normal((8, 12)).astype("float32"), rng.integers(0, 4, 8)) for _ in range(6)]
    for x, y in batches[:steps]:
        step(x, y)
    return step, batches, model


def test_one_process_round_trip_is_bitwise(tmp_path):
    step, batches, model = trained(loss_scale=1024.0)
    data = np.random.default_rng(5)
    data.random(3)
    kiln.train.save(step, tmp_path / "ck", data_position=3, rng=data, extra={"epoch": 0})
    fresh = kiln.train.compile(model, loss="cross_entropy", optimizer=kiln.train.Adam(lr=0.01), loss_scale=1024.0)
    fresh.scaler.scale = 1.0
    other = np.random.default_rng(0)
    info = kiln.train.load(fresh, tmp_path / "ck", rng=other)
    assert info["data_position"] == 3 and info["extra"] == {"epoch": 0} and fresh.steps == 3 and fresh.scaler.scale == 1024.0
    assert other.random() == data.random()
    for n in step.parameters:
        assert np.array_equal(step.parameters[n], fresh.parameters[n])
        for s in step.state[n]:
            assert np.array_equal(step.state[n][s], fresh.state[n][s]) and step.state[n][s].any()
    for x, y in batches[3:]:  # Adam's bias correction reads the step count: a wrong one would differ
        assert step(x, y) == fresh(x, y)


def test_a_recomputing_step_round_trips_into_a_plain_one(tmp_path):
    step, batches, model = trained(segments=2)  # activation checkpointing (kiln/train/checkpoint.py)
    assert isinstance(step, kiln.train.CheckpointedTrainStep)
    kiln.train.save(step, tmp_path / "ck", data_position=3)
    plain = kiln.train.compile(model, loss="cross_entropy", optimizer=kiln.train.Adam(lr=0.01))
    kiln.train.load(plain, tmp_path / "ck")
    for x, y in batches[3:]:
        a, b = step(x, y), plain(x, y)
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a))


def test_saving_again_replaces_the_checkpoint_whole(tmp_path):
    step, batches, _ = trained()
    kiln.train.save(step, tmp_path / "ck", data_position=3)
    step(*batches[3])
    kiln.train.save(step, tmp_path / "ck", data_position=4)
    assert sorted(os.listdir(tmp_path)) == ["ck"]
    assert json.load(open(tmp_path / "ck" / "manifest.json"))["data_position"] == 4


def test_a_truncated_checkpoint_is_refused(tmp_path):
    step, _, _ = trained()
    kiln.train.save(step, tmp_path / "ck")
    shard = tmp_path / "ck" / "shard-00000-of-00001.bin"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(kiln.KilnError, match=r"shard-00000-of-00001.bin has \d+ bytes, the manifest says \d+: it is truncated"):
        kiln.train.load(step, tmp_path / "ck")


def test_a_corrupt_checkpoint_is_refused(tmp_path):
    step, _, _ = trained()
    kiln.train.save(step, tmp_path / "ck")
    shard = tmp_path / "ck" / "shard-00000-of-00001.bin"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0x40
    shard.write_bytes(bytes(data))
    before = dict(step.parameters)
    with pytest.raises(kiln.KilnError, match="shard-00000-of-00001.bin fails its checksum"):
        kiln.train.load(step, tmp_path / "ck")
    assert all(np.array_equal(before[n], step.parameters[n]) for n in before)  # refused before any change


def test_a_half_written_checkpoint_is_never_taken_for_a_whole_one(tmp_path):
    step, _, _ = trained()
    kiln.train.save(step, tmp_path / "ck")
    os.remove(tmp_path / "ck" / "manifest.json")  # as a save killed before its last file leaves it
    with pytest.raises(kiln.KilnError, match="manifest.json is missing: .* not a complete kiln checkpoint"):
        kiln.train.load(step, tmp_path / "ck")
    os.rename(tmp_path / "ck", tmp_path / "ck.partial")
    with pytest.raises(kiln.KilnError, match=r"no checkpoint at .*ck \(a save into it was interrupted"):
        kiln.train.load(step, tmp_path / "ck")
    kiln.train.save(step, tmp_path / "ck2")
    os.rename(tmp_path / "ck2", tmp_path / "ck.old")  # killed between moving the old aside and the new into place
    with pytest.raises(kiln.KilnError, match=r"the previous checkpoint is whole at .*ck.old: rename it"):
        kiln.train.load(step, tmp_path / "ck")


def test_another_model_is_refused_by_name(tmp_path):
    step, _, _ = trained()
    kiln.train.save(step, tmp_path / "ck")
    model, _ = mlp(batch=8, d_in=12, hidden=16, d_out=4, seed=3)
    sgd = kiln.train.compile(model, loss="cross_entropy", optimizer=kiln.train.SGD(lr=0.1, momentum=0.9))
    with pytest.raises(kiln.KilnError, match="has no state/w1/momentum.*another model or optimizer"):
        kiln.train.load(sgd, tmp_path / "ck")


# (strategy and ranks that save, then each (strategy, ranks) that loads and goes on)
ROUND_TRIPS = [
    (("plain", 1), [("data", 2)]),                       # 1 -> 2
    (("data", 2), [("plain", 1)]),                       # 2 -> 1 (2 -> 2: the resume test below)
    (("tensor", 4), [("tensor", 2)]),                    # 4 -> 2: the split weights re-split
    (("pipeline", 2), [("pipeline", 2), ("data", 2)]),   # a pipeline's stages into another plan
]


@pytest.mark.parametrize("saver,loaders", ROUND_TRIPS, ids=[f"{s}{n}" for (s, n), _ in ROUND_TRIPS])
def test_round_trip_over_ranks(tmp_path, saver, loaders):
    path = str(tmp_path / "ck")
    run_ok("ckpt_roundtrip.py", ["save", saver[0], path], saver[1])
    for strategy, n in loaders:
        run_ok("ckpt_roundtrip.py", ["load", strategy, path], n)


def run_ok(script, args, np_, launcher=None):
    """tests/python/dist/<script> with `args` on np_ ranks (one: a plain process, without mpirun's start-up);
    every rank must print its OK line."""
    cmd = [sys.executable, os.path.join(SCRIPTS, script)] + list(args)
    if np_ == 1 and launcher is None:
        p = subprocess.run(cmd, cwd=SCRIPTS, env=python_env(None), capture_output=True, text=True, timeout=60)
    else:
        p, _ = mpi(cmd, np_, launcher=launcher)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and out.count("OK rank") == np_, out[-4000:]
    return p.stdout


def losses(path):
    out = {}
    for line in open(path):
        i, v = line.split()
        out[int(i)] = v
    return out


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """The uninterrupted run's losses (2 ranks on this host, one thread each: as on the bed's two hosts)."""
    path = tmp_path_factory.mktemp("full")
    run_ok("ckpt_resume.py", [str(path), "full"], 2)
    return losses(path / "losses.full")


def test_killed_and_resumed_follows_the_uninterrupted_run_bitwise(tmp_path, full_run):
    p, _ = mpi([sys.executable, os.path.join(SCRIPTS, "ckpt_resume.py"), str(tmp_path), "die", "13"], 2)
    assert p.returncode != 0
    assert json.load(open(tmp_path / "ckpt" / "manifest.json"))["data_position"] == 12
    run_ok("ckpt_resume.py", [str(tmp_path), "resume"], 2)
    full = full_run
    died, resumed = (losses(tmp_path / f"losses.{m}") for m in ("die", "resume"))
    assert sorted(resumed) == list(range(12, 30)) and all(resumed[i] == full[i] for i in resumed), (resumed, full)
    assert all(died[i] == full[i] for i in died)


def test_a_host_taken_down_mid_training_resumes_from_the_last_checkpoint(host_bed, tmp_path, full_run):
    from hostbed import Launcher
    from test_dist_hosts import wait_for_text
    wrap = (f"exec {sys.executable} ckpt_resume.py {tmp_path} run "
            f">{tmp_path}/out.$OMPI_COMM_WORLD_RANK 2>{tmp_path}/err.$OMPI_COMM_WORLD_RANK")
    proc = mpi(["/bin/sh", "-c", wrap], 2, env={"KILN_DIST_TIMEOUT": "5"}, launcher=Launcher(host_bed), popen=True)
    try:
        assert wait_for_text(tmp_path / "out.1", "step 7 rank 1", 90) is not None, proc.poll()
        host_bed.kill(1)
        assert wait_for_text(tmp_path / "err.0", "KILN_DIST_TIMEOUT", 30) is not None, (tmp_path / "err.0").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        host_bed.up()
    saved = json.load(open(tmp_path / "ckpt" / "manifest.json"))["data_position"]
    run_ok("ckpt_resume.py", [str(tmp_path), "resume"], 2, launcher=Launcher(host_bed))
    full = full_run
    cut, resumed = (losses(tmp_path / f"losses.{m}") for m in ("run", "resume"))
    print(f"host down after step {max(cut)}; resumed from step {saved}")
    assert saved >= 6 and sorted(resumed) == list(range(saved, 30)), (saved, sorted(resumed))
    assert all(cut[i] == full[i] for i in cut) and all(resumed[i] == full[i] for i in resumed), (cut, resumed, full)
