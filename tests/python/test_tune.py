"""kiln.tune and kiln.build(..., db=): a tiny tuning session, then the best record applied."""
import logging
import os

import numpy as np
import pytest

import kiln
from kiln import te

pytestmark = pytest.mark.skipif(not hasattr(kiln, "tune"), reason="kiln was built without the auto-scheduler (XGBoost)")


def gemm(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    return A, B, kiln.ops.matmul(A, B)


def tiny(**kw):
    opts = dict(trials=12, batch_size=6, early_stop_rounds=100, seed=3, repeat=3, min_repeat_ms=2.0,
                progress=False, population=16, generations=2)
    opts.update(kw)
    return opts


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """One session shared by the tests of this file (tuning is the slow part)."""
    db = str(tmp_path_factory.mktemp("tune") / "tune.db")
    A, B, C = gemm(64)
    result = kiln.tune([A, B, C], db=db, **tiny())
    return db, result


def test_tune_returns_a_result_and_stores_every_record(session):
    db, r = session
    assert r.trials_measured == 12
    assert r.best_time > 0
    assert r.best_gflops == pytest.approx(r.task.flop / r.best_time * 1e-9)
    assert r.first_valid_time >= r.best_time
    assert r.speedup >= 1.0
    assert r.db_path == db
    assert len(r.curve) == 2 and r.curve[-1][0] == 12
    # One figure per measured trial (0 for a failure); the best of them is the session's best.
    assert len(r.trial_gflops) == 12 and all(g >= 0 for g in r.trial_gflops)
    assert max(r.trial_gflops) >= r.best_gflops * (1 - 1e-9)
    assert r.best_trace.startswith("[")
    assert "GFLOP/s" in repr(r)
    # Every measured candidate was scored first, so its features were extracted (each once), well inside the 5 ms.
    assert r.featurized >= r.trials_measured and 0 < r.feature_ms_per_candidate < 5
    with kiln.tuning_db.open(db) as d:
        assert len(d.records(r.task.workload_key)) == r.trials_measured


def test_build_with_db_applies_the_best_record(session, caplog):
    db, r = session
    A, B, C = gemm(64)  # new tensors, the same workload
    with caplog.at_level(logging.DEBUG, logger="kiln"):
        mod = kiln.build(C, [A, B, C], db=db)
    assert any("using tuning record" in m for m in caplog.messages), caplog.messages
    a = np.random.default_rng(0).uniform(-1, 1, (64, 64)).astype("float32")
    b = np.random.default_rng(1).uniform(-1, 1, (64, 64)).astype("float32")
    c = np.zeros((64, 64), dtype="float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    # The applied schedule is the best record's, replayed on these tensors.
    s = kiln.tuner.best_schedule([A, B, C], db=db)
    assert s is not None
    assert kiln.tuner.make_task([A, B, C]).workload_key == r.task.workload_key
    assert len(s.trace().steps if hasattr(s.trace(), "steps") else str(s.trace())) > 0


def test_build_with_db_without_a_record_keeps_the_schedule(session, caplog, tmp_path):
    db, _ = session
    A, B, C = gemm(32)  # not tuned
    with caplog.at_level(logging.DEBUG, logger="kiln"):
        mod = kiln.build(C, [A, B, C], db=db)
    assert any("no tuning record" in m for m in caplog.messages), caplog.messages
    a = np.ones((32, 32), dtype="float32")
    c = np.zeros((32, 32), dtype="float32")
    mod(a, a, c)
    assert np.all(c == 32)
    # A database file that does not exist is not created by a lookup.
    missing = tmp_path / "none.db"
    kiln.build(C, [A, B, C], db=str(missing))
    assert not missing.exists()


def test_resume_skips_known_traces_and_crash_is_recorded(tmp_path):
    db = str(tmp_path / "t.db")
    A, B, C = gemm(48)
    r1 = kiln.tune([A, B, C], db=db, **tiny(trials=6, inject_faults="crash@1"))
    assert r1.errors >= 1
    r2 = kiln.tune([A, B, C], db=db, **tiny(trials=6))
    assert r2.trials_skipped > 0
    with kiln.tuning_db.open(db) as d:
        recs = d.records(r1.task.workload_key)
    assert len(recs) == r1.trials_measured + r2.trials_measured
    assert len({rec.trace for rec in recs}) == len(recs)
    assert any(rec.error_kind == "run_error" and "SIGSEGV" in rec.error_msg for rec in recs)


_SESSION = """
import json, sys
import kiln
from kiln import te
A = te.placeholder((48, 48), name="A")
B = te.placeholder((48, 48), name="B")
r = kiln.tune([A, B, kiln.ops.matmul(A, B)], db=sys.argv[1], trials=12, batch_size=6, early_stop_rounds=100, seed=3,
              repeat=2, min_repeat_ms=1.0, progress=False, population=16, generations=2, build_threads=1)
print(json.dumps([r.trials_measured, r.trials_skipped, r.trials_claimed_elsewhere, r.records_from_others]))
"""


def test_concurrent_sessions_share_out_the_candidates(tmp_path):
    """Two processes tune one workload on one file at once, from one seed: no schedule is measured twice."""
    import json
    import subprocess
    import sys
    db = str(tmp_path / "t.db")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, "-c", _SESSION, db], stdout=subprocess.PIPE, env=env, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert [o[0] for o in outs] == [12, 12]
    assert sum(o[1] + o[2] for o in outs) > 0, "the same seed proposes the same candidates: one session must have passed some over"
    assert all(0 <= o[3] <= 12 for o in outs)  # records the other stored meanwhile, learned from
    A, B, C = gemm(48)
    with kiln.tuning_db.open(db) as d:
        recs = d.records(kiln.tuner.make_task([A, B, C]).workload_key)
        assert d.claims() == []
    assert len(recs) == 24 and len({rec.trace for rec in recs}) == 24


def test_curve_png_and_bad_input(tmp_path, monkeypatch):
    png = tmp_path / "curve.png"
    kiln.tuner.plot_curve([(6, 10.0), (12, 20.5)], str(png), "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Every trial (a failure as 0), the best so far, and the peer's dashed line.
    per_trial = tmp_path / "trials.png"
    kiln.tuner.plot_curve([], str(per_trial), "test", trials=[5.0, 0, 12.0, 7.5], peer=("numpy OpenBLAS 1T", 20.0))
    assert per_trial.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Without matplotlib: a clear KilnError, and no file.
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    with pytest.raises(kiln.KilnError, match="matplotlib"):
        kiln.tuner.plot_curve([(1, 1.0)], str(tmp_path / "none.png"))
    assert not (tmp_path / "none.png").exists()
    monkeypatch.undo()
    A, B, C = gemm(16)
    with pytest.raises(kiln.KilnError):
        kiln.tune([A, B, C], db=str(tmp_path / "x.db"), **tiny(batch_size=0))
    with pytest.raises(kiln.KilnError):
        kiln.tune([A, B], db=str(tmp_path / "x.db"), **tiny())  # no output among the args
    with pytest.raises(kiln.KilnError):
        kiln.tune([A, B, C], db="", **tiny())


def test_ranking_report_of_a_session(session, tmp_path):
    db, r = session
    rep = kiln.tuner.ranking_report(db, min_records=4, cross=False)
    (task,) = rep["tasks"]
    assert task["workload_key"] == r.task.workload_key
    assert task["records"] == sum(1 for g in r.trial_gflops if g > 0)
    assert 0 < task["held_out"] <= 3  # a quarter of 12 trials, failures not counted
    # An accuracy is a share of pairs (or -1 when the held-back records make none).
    assert task["within"] == -1 or 0 <= task["within"] <= 1
    assert rep["cross_mean"] == -1
    assert kiln.tuner.ranking_report(db, workloads=["0" * 16])["tasks"] == []
    with pytest.raises(kiln.KilnError, match="no tuning database"):
        kiln.tuner.ranking_report(str(tmp_path / "none.db"))
    with pytest.raises(kiln.KilnError, match="holdout"):
        kiln.tuner.ranking_report(db, holdout=0)
    # 4-fold: every valid record is held back once; pooled figures weigh each task by its pairs.
    four = kiln.tuner.ranking_report(db, min_records=4, cross=False, folds=4)
    (task,) = four["tasks"]
    assert task["held_out"] == task["records"]
    assert four["within_pooled"] == pytest.approx(four["within_mean"])  # one task: the same figure
    with pytest.raises(kiln.KilnError, match="folds"):
        kiln.tuner.ranking_report(db, folds=0)


def test_measure_traces_warm_and_cold(session):
    """kiln.tuner.measure times given traces (warm, and with cold inputs); a bad trace is a build error."""
    db, r = session
    A, B, C = gemm(64)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    s[C].vectorize(s[C].split(j, 8)[1])
    traces = [r.best_trace, s.trace().to_json(), "[]"]
    for cold in (False, True):
        out = kiln.tuner.measure([A, B, C], traces, repeat=2, min_repeat_ms=1.0, cold_inputs=cold)
        assert [o["error"] for o in out[:2]] == ["none", "none"], out
        for o in out[:2]:
            assert len(o["run_times"]) == 2 and min(o["run_times"]) > 0
        # The empty trace is the unscheduled function: valid too.
        assert out[2]["error"] == "none"
    bad = kiln.tuner.measure([A, B, C], ['[{"kind":"split","stage":9,"axes":[0],"ints":[4]}]'])
    assert bad[0]["error"] == "build_error" and bad[0]["run_times"] == []


def test_cold_input_records_are_kept_apart_and_preferred(tmp_path):
    """A cold-input session's records carry " [cold inputs]" on their target; the best schedule then
    comes from them even where a warm record is faster."""
    db = str(tmp_path / "cold.db")
    A, B, C = gemm(32)
    warm = kiln.tune([A, B, C], db=db, **tiny(trials=6))
    cold = kiln.tune([A, B, C], db=db, cold_inputs=True, **tiny(trials=6, seed=4))
    assert warm.trials_measured == 6 and cold.trials_measured == 6  # warm records do not make the cold session skip traces
    with kiln.tuning_db.open(db) as d:
        targets = {r.target.target for r in d.records(warm.task.workload_key)}
    assert any(t.endswith(" [cold inputs]") for t in targets) and any(not t.endswith(" [cold inputs]") for t in targets), targets
    found = kiln.driver.best_record(kiln.tuner.make_task([A, B, C]), db)
    assert found is not None
    assert found[1] == cold.best_trace  # the cold session's best, not the warm one's


def test_default_decisions_edit_and_replay():
    """default_decisions gives the default's decisions as text; candidate_trace replays it (the same trace as
    the default) and an edited copy (a different schedule that still computes the product); bad text raises."""
    A, B, C = gemm(64)
    text = kiln.tuner.default_decisions([A, B, C])
    assert text.startswith("sketch ") and "C.unroll=" in text, text
    default = kiln._ffi._kiln.tuner.default_trace(kiln.tuner.make_task([A, B, C]))
    assert kiln.tuner.candidate_trace([A, B, C], text) == default
    unroll = next(w for w in text.split() if w.startswith("C.unroll="))
    other = "C.unroll=0" if unroll != "C.unroll=0" else "C.unroll=1"
    edited = kiln.tuner.candidate_trace([A, B, C], text + " " + other)
    assert edited != default
    mod = kiln.build(te.Schedule.from_trace(C, edited), [A, B, C])
    a = np.random.default_rng(0).uniform(-1, 1, (64, 64)).astype("float32")
    b = np.random.default_rng(1).uniform(-1, 1, (64, 64)).astype("float32")
    c = np.zeros((64, 64), dtype="float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(kiln.KilnError, match="has no decision 'C.nope'"):
        kiln.tuner.candidate_trace([A, B, C], "sketch 0: C.nope=1")
    with pytest.raises(kiln.KilnError, match="not the extent 64"):
        kiln.tuner.candidate_trace([A, B, C], text + " " + next(w for w in text.split() if w.startswith("C.i=")).split("=")[0] + "=3x1x1x1")
