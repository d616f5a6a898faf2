"""kiln.tuning_db: the tuning database from Python (binding of tuning_db/)."""
import io
import json
import os
import sqlite3
import threading

import numpy as np
import pytest

import kiln
from kiln import KilnError
from kiln.tuning_db import FeatureSet, ImportResult, Record, TargetInfo, TuningRun, Workload

KEY = "8f3a09c1d2e4b567"
KEY2 = "0123456789abcdef"
DAG = {"ops": [{"kind": "compute", "shape": [64, 64], "dtype": "float32"}]}
TARGET = TargetInfo("llvm -mcpu=znver3 -num-cores=2", "AMD EPYC 7763", ["fma", "avx2"], "", "0.1.0")


def trace(factor):
    return [{"kind": "split", "stage": 0, "axis": 0, "factor": factor}]


@pytest.fixture
def path(tmp_path):
    return tmp_path / "tune.db"


@pytest.fixture
def db(path):
    with kiln.tuning_db.open(path) as d:
        d.add_workload(KEY, "matmul_64", compute_dag=DAG)
        yield d


def add_timed(db, medians, target=TARGET, key=KEY):
    """One record per median (three run times around it); returns their ids."""
    return db.add_records([Record(workload_key=key, target=target, trace=trace(i + 1),
                                  run_times=[m * 1.1, m, m * 0.5]) for i, m in enumerate(medians)])


def test_round_trip_of_every_operation(path):
    db = kiln.tuning_db.open(path)
    assert db.path == str(path) and not db.closed
    assert db.schema_version == kiln.tuning_db.latest_schema_version() >= 2

    # workloads: three spellings of add_workload; DAGs are stored canonical
    db.add_workload(KEY, "matmul_64", compute_dag=DAG)
    db.add_workload(Workload(KEY2, "relu", '{"b": 1, "a": [1, 2]}'))
    db.add_workload({"key": KEY2, "name": "relu", "compute_dag": '{"a":[1,2],"b":1}'})  # same DAG: no-op
    assert db.workload(KEY2) == Workload(KEY2, "relu", '{"a":[1,2],"b":1}')
    assert json.loads(db.workload(KEY).compute_dag) == DAG
    assert db.workload("missing") is None
    with pytest.raises(KilnError, match="different compute DAG"):
        db.add_workload(KEY2, "relu", {"a": 2})

    # tuning runs
    uid = db.start_run(budget=100, seed=7, machine="box1")
    other = db.start_run(TuningRun(uid="f" * 32, started_at=1000.0, budget=5))
    assert other == "f" * 32
    run = db.run(uid)
    assert (run.budget, run.seed, run.machine, run.ended_at) == (100, 7, "box1", None)
    assert run.started_at > 1.6e9
    db.end_run(uid, 2e9)
    db.end_run(other)
    assert db.run(uid).ended_at == 2e9 and db.run(other).ended_at > 1.6e9
    assert [r.uid for r in db.runs()] == [other, uid]  # by start time
    assert db.run("0" * 32) is None
    with pytest.raises(KilnError, match="start_run"):
        db.end_run("0" * 32)

    # records: Record objects and dicts in one batch
    ok = Record(workload_key=KEY, target=TARGET, trace=trace(8), run_times=[3e-3, 1e-3, 2e-3, 4e-3],
                build_time=0.25, run_uid=uid, timestamp=1.7e9)
    failed = {"workload_key": KEY, "target": TARGET.to_dict(), "trace": "[]", "error_kind": "timeout",
              "error_msg": "ran past 10 s"}
    ids = db.add_records([ok, failed])
    assert len(ids) == 2 and ids[0] < ids[1]
    assert ok.id is None and ok.uid is None  # the inputs are not modified

    r = db.record(ids[0])
    assert r.id == ids[0] and len(r.uid) == 32
    assert r.workload_key == KEY
    assert r.target == TargetInfo(TARGET.target, TARGET.cpu_model, ["avx2", "fma"], "", "0.1.0")  # sorted
    assert json.loads(r.trace) == trace(8)
    assert r.run_times == [3e-3, 1e-3, 2e-3, 4e-3] and isinstance(r.run_times, list)
    assert r.min_time == 1e-3 and r.median_time == pytest.approx(2.5e-3)  # derived
    assert (r.error_kind, r.error_msg, r.build_time, r.run_uid, r.timestamp) == ("none", "", 0.25, uid, 1.7e9)
    assert r.features is None

    e = db.record(ids[1])
    assert (e.error_kind, e.error_msg, e.run_times) == ("timeout", "ran past 10 s", [])
    assert e.min_time is None and e.median_time is None and e.build_time is None and e.run_uid is None
    assert e.timestamp > 1.6e9  # filled in: now
    assert db.record(10 ** 9) is None

    assert [x.id for x in db.records(KEY)] == ids
    assert db.records(KEY2) == []
    summary = {w.key: (w.name, w.records, w.errors) for w in db.workloads()}
    assert summary == {KEY: ("matmul_64", 2, 1), KEY2: ("relu", 0, 0)}
    assert [w.key for w in db.workloads()] == sorted([KEY, KEY2])

    # find with filters
    assert [x.id for x in db.find()] == ids
    assert [x.id for x in db.find(workload_key=KEY, include_errors=False)] == [ids[0]]
    assert [x.id for x in db.find(target=TARGET, limit=1)] == [ids[0]]
    assert db.find(target="llvm -mcpu=znver3 -num-cores=2") == []  # hardware match: cpu facts differ
    assert len(db.find(target="llvm -mcpu=znver3 -num-cores=2", match="string_only")) == 2
    assert db.find(workload_key=KEY2) == []

    # features: a numpy float32 2-D array
    feats = np.arange(12, dtype=np.float64).reshape(3, 4) / 7  # converted to float32
    db.set_features(ids[0], feats, extractor="ansor-v1")
    assert db.record(ids[0]).features is None  # only loaded where asked for
    f = db.record(ids[0], with_features=True).features
    assert f.extractor == "ansor-v1" and (f.rows, f.cols) == (3, 4)
    assert f.values.dtype == np.float32 and np.array_equal(f.values, feats.astype(np.float32))
    db.set_features(ids[1], FeatureSet("other-v2", [[1.0, 2.0]]))
    train = db.training_records(feature_extractor="ansor-v1")
    assert [x.id for x in train] == [ids[0]] and train[0].features == f
    assert [x.id for x in db.training_records()] == ids
    assert db.records(KEY, with_features=True)[1].features == FeatureSet("other-v2", np.array([[1, 2]]))
    with pytest.raises(KilnError, match="non-finite"):
        db.set_features(ids[0], np.array([[np.nan]]), extractor="ansor-v1")

    # statistics
    st = db.stats()
    assert (st.workloads, st.targets, st.tuning_runs, st.records, st.errors) == (2, 1, 2, 2, 1)
    assert st.errors_by_kind == {"timeout": 1}
    (per,) = st.per_workload
    assert (per.workload_key, per.workload_name, per.records, per.errors) == (KEY, "matmul_64", 2, 1)
    assert per.target == r.target and per.best_min == 1e-3 and per.best_median == pytest.approx(2.5e-3)
    assert st.to_dict()["per_workload"][0]["target"]["cpu_features"] == ["avx2", "fma"]

    # maintenance
    assert db.check_integrity() == []
    more = add_timed(db, [5e-3, 6e-3, 7e-3])
    assert db.prune(drop_errors=True) == 1
    assert db.prune(keep_best=2) == 2  # of 4 valid records, the 2 slowest go
    assert [x.id for x in db.records(KEY)] == [ids[0], more[0]]
    assert db.prune(older_than=1.8e9, vacuum=True) == 2
    more = add_timed(db, [1e-3, 2e-3])
    assert db.delete_records([more[0], 10 ** 9]) == 1
    assert db.delete_workload(KEY) == 1
    assert db.workload(KEY) is None and db.stats().records == 0
    assert db.delete_workload(KEY) == 0
    db.close()
    assert db.closed

    # everything committed survives reopening
    with kiln.tuning_db.open(path, read_only=True) as again:
        assert [w.key for w in again.workloads()] == [KEY2]
        assert len(again.runs()) == 2


def test_best_k_order(db):
    medians = [5e-3, 1e-3, 4e-3, 2e-3, 3e-3]
    ids = add_timed(db, medians)
    db.add_records([Record(workload_key=KEY, target=TARGET, error_kind="run_error", error_msg="segv")])
    best = db.best(KEY, TARGET, k=3)
    assert [r.median_time for r in best] == [1e-3, 2e-3, 3e-3]
    assert [r.id for r in best] == [ids[1], ids[3], ids[4]]
    assert db.best(KEY, TARGET)[0].id == ids[1]  # k=1 by default
    assert len(db.best(KEY, TARGET, k=100)) == 5  # the failed record never counts
    assert db.best(KEY2, TARGET, k=3) == [] and db.best("unknown", TARGET) == []

    # metric="min" ranks by the fastest run, here against the median order
    db.add_records([Record(workload_key=KEY, target=TARGET, trace="[]", run_times=[9e-3, 9e-3, 1e-4])])
    assert db.best(KEY, TARGET, metric="min")[0].min_time == 1e-4
    assert db.best(KEY, TARGET, metric="median")[0].id == ids[1]
    # ties go to the older record
    tie = add_timed(db, [1e-3])
    assert [r.id for r in db.best(KEY, TARGET, k=2)] == [ids[1], tie[0]]

    # target matching: another kiln version is the same hardware, not the exact target
    newer = TargetInfo(TARGET.target, TARGET.cpu_model, TARGET.cpu_features, "", "0.2.0")
    fastest = add_timed(db, [1e-5], target=newer)
    assert db.best(KEY, TARGET)[0].id == fastest[0]
    assert db.best(KEY, TARGET, match="exact")[0].id == ids[1]
    assert db.best(KEY, newer, match="exact")[0].id == fastest[0]
    bare = TargetInfo(TARGET.target)
    assert db.best(KEY, bare) == []
    assert db.best(KEY, TARGET.target, match="string_only")[0].id == fastest[0]

    with pytest.raises(KilnError, match="exact, hardware, string_only"):
        db.best(KEY, TARGET, match="close")
    with pytest.raises(KilnError, match="median or min"):
        db.best(KEY, TARGET, metric="mean")


def test_export_import_round_trip_preserves_fields(db, tmp_path):
    run = db.start_run(budget=64, seed=11, machine="box1")
    ids = db.add_records([
        Record(workload_key=KEY, target=TARGET, trace=trace(4), run_times=[0.1, 1 / 3, 2e-7],
               build_time=1 / 7, run_uid=run, timestamp=1712345678.123456789),
        Record(workload_key=KEY, target=TargetInfo("cuda -arch=sm_90", gpu_arch="sm_90"), trace=trace(2),
               error_kind="wrong_result", error_msg="max error 0.5"),
    ])
    db.end_run(run, 1712349999.5)
    db.set_features(ids[0], np.linspace(-1, 1, 10, dtype=np.float32).reshape(2, 5), extractor="ansor-v1")

    out = tmp_path / "records.jsonl"
    assert db.export_jsonl(out) == 2
    lines = out.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["format"] == "kiln-tuning-record"
    assert db.export_jsonl(tmp_path / "valid.jsonl", include_errors=False) == 1
    assert db.export_jsonl(tmp_path / "none.jsonl", workload_key=KEY2) == 0

    with kiln.tuning_db.open(tmp_path / "other.db") as other:
        res = other.import_jsonl(out)
        assert res == ImportResult(added=2, skipped=0)
        assert other.import_jsonl(str(out)) == ImportResult(added=0, skipped=2)  # known uids
        assert other.workload(KEY) == db.workload(KEY)
        assert other.run(run) == db.run(run)
        before = {r.uid: r.to_dict() for r in db.records(KEY, with_features=True)}
        after = {r.uid: r.to_dict() for r in other.records(KEY, with_features=True)}
        assert before.keys() == after.keys()
        for uid in before:
            a, b = before[uid], after[uid]
            a.pop("id"), b.pop("id")  # ids are local to a database
            assert a == b  # every other field, doubles and features bit-exact
        # and back out: the same bytes
        again = tmp_path / "again.jsonl"
        other.export_jsonl(again)
        assert again.read_bytes() == out.read_bytes()

    # the stream forms
    buf = io.StringIO()
    assert db.write_jsonl(buf, workload_key=KEY) == 2
    assert buf.getvalue() == out.read_text()
    with kiln.tuning_db.open(tmp_path / "third.db") as third:
        assert third.read_jsonl(io.StringIO(buf.getvalue())) == ImportResult(2, 0)
        assert third.read_jsonl(io.BytesIO(out.read_bytes())) == ImportResult(0, 2)
        with pytest.raises(KilnError, match="line 2"):
            third.read_jsonl(io.StringIO(lines[0] + "\n{not json}\n"))
        with pytest.raises(KilnError):
            third.import_jsonl(tmp_path / "does-not-exist.jsonl")


def snapshot(p):
    return p.read_bytes(), os.stat(p).st_mtime_ns


@pytest.mark.parametrize("kind", ["text", "foreign_sqlite", "newer_schema", "truncated"])
def test_refused_file_raises_and_is_unchanged(tmp_path, kind):
    p = tmp_path / "file.db"
    if kind == "text":
        p.write_text("these are not the records you are looking for\n" * 10)
        expect = "not"
    elif kind == "foreign_sqlite":
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
        con.execute("INSERT INTO notes(body) VALUES ('hello')")
        con.commit()
        con.close()
        expect = "not"
    elif kind == "newer_schema":
        with kiln.tuning_db.open(p) as d:
            d.add_workload(KEY, "mm", compute_dag=DAG)
        con = sqlite3.connect(p)
        con.execute("PRAGMA journal_mode = DELETE")
        con.execute(f"PRAGMA user_version = {kiln.tuning_db.latest_schema_version() + 5}")
        con.commit()
        con.close()
        expect = "newer"
    else:
        with kiln.tuning_db.open(p) as d:
            d.add_workload(KEY, "mm", compute_dag=DAG)
            add_timed(d, [1e-3] * 200)
        con = sqlite3.connect(p)
        con.execute("PRAGMA journal_mode = DELETE")  # checkpoint the WAL into the file
        con.close()
        data = p.read_bytes()
        p.write_bytes(data[: len(data) // 2])
        expect = "truncated"
    before = snapshot(p)
    for options in [{}, {"read_only": True}, {"create_if_missing": False}]:
        with pytest.raises(KilnError) as err:
            kiln.tuning_db.open(p, **options)
        msg = str(err.value)
        assert str(p) in msg and "The file was not modified." in msg and expect in msg, msg
    assert snapshot(p) == before
    assert sorted(os.listdir(tmp_path)) == ["file.db"]  # no -wal or -shm left behind either


def test_missing_file_and_read_only(tmp_path):
    p = tmp_path / "missing.db"
    with pytest.raises(KilnError, match="does not exist"):
        kiln.tuning_db.open(p, create_if_missing=False)
    with pytest.raises(KilnError, match="does not exist"):
        kiln.tuning_db.open(p, read_only=True)
    assert not p.exists()
    with kiln.tuning_db.open(p) as d:
        d.add_workload(KEY, "mm", compute_dag=DAG)
        add_timed(d, [1e-3])
    with kiln.tuning_db.open(p, read_only=True) as ro:
        assert len(ro.best(KEY, TARGET)) == 1
        with pytest.raises(KilnError):
            add_timed(ro, [2e-3])
        with pytest.raises(KilnError):
            ro.delete_workload(KEY)
        assert len(ro.records(KEY)) == 1


def test_use_after_close(path):
    with kiln.tuning_db.open(path) as d:
        d.add_workload(KEY, "mm", compute_dag=DAG)
        (rid,) = add_timed(d, [1e-3])
    assert d.closed and "(closed)" in repr(d)
    d.close()  # closing twice is harmless
    calls = [
        lambda: d.schema_version,
        lambda: d.add_workload(KEY, "mm", compute_dag=DAG),
        lambda: d.workload(KEY), lambda: d.workloads(),
        lambda: d.start_run(), lambda: d.end_run("x"), lambda: d.run("x"), lambda: d.runs(),
        lambda: add_timed(d, [1e-3]), lambda: d.best(KEY, TARGET), lambda: d.records(KEY),
        lambda: d.record(rid), lambda: d.find(), lambda: d.training_records(),
        lambda: d.set_features(rid, np.zeros((1, 1)), extractor="x"), lambda: d.stats(),
        lambda: d.delete_records([rid]), lambda: d.delete_workload(KEY), lambda: d.prune(drop_errors=True),
        lambda: d.check_integrity(), lambda: d.export_jsonl(path.with_suffix(".jsonl")),
        lambda: d.import_jsonl(path.with_suffix(".jsonl")), lambda: d.write_jsonl(io.StringIO()),
        lambda: d.read_jsonl(io.StringIO("")),
    ]
    for call in calls:
        with pytest.raises(KilnError, match="is closed"):
            call()
    with kiln.tuning_db.open(path) as again:  # the data is intact
        assert [r.id for r in again.records(KEY)] == [rid]


def test_bad_arguments_raise_kiln_error(db):
    (rid,) = add_timed(db, [1e-3])
    good = dict(workload_key=KEY, target=TARGET, trace="[]", run_times=[1e-3])
    bad_records = [
        dict(good, run_times="fast"), dict(good, run_times=[1e-3, "x"]), dict(good, run_times=1e-3),
        dict(good, run_times=[-1.0]), dict(good, run_times=[float("nan")]), dict(good, run_times=[]),
        dict(good, trace="{not json"), dict(good, trace={"kind": "split"}), dict(good, trace=object()),
        dict(good, workload_key=KEY2), dict(good, workload_key=5), dict(good, workload_key=""),
        dict(good, target=5), dict(good, target={"target": "llvm", "cpu": "x"}),
        dict(good, target=""),
        dict(good, error_kind="crash"), dict(good, build_time="slow"), dict(good, run_uid="no-such-run"),
        dict(good, features=[[1.0]]), dict(good, features=FeatureSet("", [[1.0]])),
        dict(good, timestamp=float("inf")), dict(good, colour="blue"), 42, "record",
    ]
    for rec in bad_records:
        with pytest.raises(KilnError):
            db.add_records([rec])
    # a batch is all or nothing
    with pytest.raises(KilnError, match="record 1 of the batch"):
        db.add_records([good, dict(good, run_times="fast")])
    with pytest.raises(KilnError, match="add_workload"):
        db.add_records([good, dict(good, workload_key=KEY2)])
    assert [r.id for r in db.records(KEY)] == [rid]

    calls = [
        lambda: db.add_records(Record(**good)), lambda: db.add_records(good), lambda: db.add_records(3),
        lambda: db.add_workload(3), lambda: db.add_workload(KEY2), lambda: db.add_workload(KEY2, "x", "{bad"),
        lambda: db.add_workload({"key": KEY2, "dag": "{}"}), lambda: db.workload(3),
        lambda: db.start_run(budget="lots"), lambda: db.start_run(colour=1), lambda: db.start_run(3),
        lambda: db.end_run(3), lambda: db.end_run("x", "now"), lambda: db.run(None),
        lambda: db.best(3, TARGET), lambda: db.best(KEY, 3), lambda: db.best(KEY, TARGET, k="2"),
        lambda: db.best(KEY, TARGET, k=-1), lambda: db.best(KEY, TARGET, k=2 ** 70),
        lambda: db.record("1"), lambda: db.records(None),
        lambda: db.find(limit="all"), lambda: db.find(limit=-1), lambda: db.find(workload_key=3),
        lambda: db.find(target=[1]), lambda: db.find(match="near"), lambda: db.find(include_errors="yes"),
        lambda: db.set_features(rid, [1.0, 2.0], extractor="x"), lambda: db.set_features(rid, [[1.0]]),
        lambda: db.set_features(rid, [["a"]], extractor="x"), lambda: db.set_features(rid, [[1.0]], extractor=""),
        lambda: db.set_features(10 ** 9, [[1.0]], extractor="x"), lambda: db.set_features("1", [[1.0]], extractor="x"),
        lambda: db.delete_records(rid), lambda: db.delete_records(["a"]), lambda: db.delete_workload(1),
        lambda: db.prune(keep_best="2"), lambda: db.prune(metric="avg"), lambda: db.prune(older_than="old"),
        lambda: db.export_jsonl(3), lambda: db.export_jsonl("/nonexistent-dir/x.jsonl"),
        lambda: db.import_jsonl(None), lambda: db.read_jsonl(io.StringIO("[1, 2]\n")),
        lambda: kiln.tuning_db.open(3), lambda: kiln.tuning_db.open(""),
        lambda: kiln.tuning_db.open(db.path, busy_timeout_ms=-1), lambda: kiln.tuning_db.open(db.path, cache_size_mib=2 ** 40),
        lambda: FeatureSet("x", [1, 2, 3]), lambda: FeatureSet("x", [1, 2, 3], rows=2, cols=2),
        lambda: Record.from_dict({"wrkload_key": KEY}), lambda: TargetInfo.from_dict([]),
        lambda: TargetInfo("llvm", cpu_features="avx2"),  # checked on construction
        lambda: kiln.tuning_db.Database(object()),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(KilnError):
            call()
    assert db.check_integrity() == []


def test_records_are_plain_editable_objects(db):
    run = db.start_run(machine="m")
    (rid,) = db.add_records([Record(workload_key=KEY, target=TARGET, trace=trace(2), run_times=[2e-3],
                                    run_uid=run, features=FeatureSet("ansor-v1", [1, 2, 3, 4], rows=2, cols=2))])
    r = db.record(rid, with_features=True)
    d = r.to_dict()
    assert d["target"]["cpu_features"] == ["avx2", "fma"]
    assert d["features"] == {"extractor": "ansor-v1", "rows": 2, "cols": 2, "values": [1.0, 2.0, 3.0, 4.0]}
    assert json.loads(json.dumps(d)) == d  # plain Python values
    assert Record.from_dict(d) == r
    # edit in place and store as a new record
    r.run_times.append(1e-3)
    r.target.cpu_features.append("sse4.2")
    r.id = r.uid = None
    (new,) = db.add_records([r])
    stored = db.record(new, with_features=True)
    assert stored.run_times == [2e-3, 1e-3] and stored.min_time == 1e-3
    assert stored.target.cpu_features == ["avx2", "fma", "sse4.2"]
    assert stored.features == r.features and stored.run_uid == run
    # a record from one database is valid input to another (its id is ignored)
    (copy,) = db.add_records([dict(stored.to_dict(), uid=None)])
    assert copy != new and db.record(copy).run_times == stored.run_times


def test_close_while_other_threads_query(path):
    # Calls run with the GIL released; closing meanwhile must not pull the
    # connection from under them: a running call finishes, later ones raise.
    db = kiln.tuning_db.open(path)
    db.add_workload(KEY, "mm", compute_dag=DAG)
    add_timed(db, [i * 1e-4 + 1e-4 for i in range(200)])
    started = [threading.Event() for _ in range(3)]
    outcomes = []

    def reader(ready):
        try:
            for _ in range(100000):
                assert len(db.best(KEY, TARGET, k=5)) == 5
                assert len(db.records(KEY)) == 200
                ready.set()
            outcomes.append("done")
        except KilnError as err:
            outcomes.append("closed" if "is closed" in str(err) else str(err))
        finally:
            ready.set()

    threads = [threading.Thread(target=reader, args=(e,)) for e in started]
    for t in threads:
        t.start()
    for e in started:
        assert e.wait(60)
    db.close()
    for t in threads:
        t.join(120)
    assert outcomes == ["closed"] * 3, outcomes


def test_claims_of_concurrent_sessions(path, db):
    """Two connections claim traces: each trace goes to one owner, recorded ones are 'measured'."""
    add_timed(db, [1e-3])  # trace(1) is recorded
    with kiln.tuning_db.open(path) as other:
        assert db.claim(KEY, TARGET, [trace(1), trace(2), json.dumps(trace(3))], "A", 60) == ["measured", "claimed", "claimed"]
        assert other.claim(KEY, TARGET, [trace(2), trace(4)], "B", 60.0) == ["held", "claimed"]
        claims = other.claims()
        assert sorted(c.owner for c in claims) == ["A", "A", "B"]
        c = next(c for c in claims if c.owner == "B")
        assert isinstance(c, kiln.tuning_db.Claim) and c.workload_key == KEY
        assert json.loads(c.trace) == trace(4) and c.target.cpu_features == ["avx2", "fma"] and c.target.kiln_version == ""
        assert c.to_dict()["owner"] == "B" and c.expires_at > 0
        assert db.renew_claims("A", 30) == 2
        assert db.release_claims("A") == 2
        assert other.claim(KEY, TARGET, [trace(2)], "B", 60) == ["claimed"]
        with pytest.raises(KilnError, match="positive"):
            db.claim(KEY, TARGET, [trace(5)], "A", 0)
        with pytest.raises(KilnError, match="list of traces"):
            db.claim(KEY, TARGET, "[]", "A", 60)
    # What was added since a record: after_id.
    newer = add_timed(db, [2e-3, 3e-3], key=KEY)
    assert [r.id for r in db.find(workload_key=KEY, after_id=newer[0])] == [newer[1]]


def test_read_only_open_of_a_version_2_file(path):
    """A file from before claims (schema 2) reads read-only as it is; a writable open adds the table."""
    with kiln.tuning_db.open(path) as d:
        d.add_workload(KEY, "mm", compute_dag=DAG)
        add_timed(d, [1e-3])
    con = sqlite3.connect(path)
    con.execute("DROP TABLE claims")  # back to what schema 2 had
    con.execute("DROP TABLE graph_plans")  # (schema 4's)
    con.execute("DROP TABLE graph_candidates")
    con.execute("DROP INDEX records_by_trace")
    con.execute("ALTER TABLE records DROP COLUMN trace_hash")
    con.execute("PRAGMA user_version = 2")
    con.commit()
    con.execute("PRAGMA journal_mode = DELETE")
    con.close()
    before = path.read_bytes()
    with kiln.tuning_db.open(path, read_only=True) as d:
        assert d.schema_version == 2
        assert len(d.records(KEY)) == 1 and d.claims() == []
        with pytest.raises(KilnError, match="read-only"):
            d.claim(KEY, TARGET, [trace(9)], "A", 60)
    assert path.read_bytes() == before
    with kiln.tuning_db.open(path) as d:
        assert d.schema_version == kiln.tuning_db.latest_schema_version() >= 3
        assert d.claim(KEY, TARGET, [trace(1), trace(9)], "A", 60) == ["measured", "claimed"]
