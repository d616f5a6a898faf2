"""The tuning database: an SQLite file of measured schedules (tuning records).

The tuner writes records, the compiler looks up the best one of a workload
on a target, a cost model trains on them, and JSON Lines files carry them
between machines. This is the C++ API of ``tuning_db/`` (see
``tuning_db/README.md``) with Python spellings::

    import kiln
    from kiln.tuning_db import Record, TargetInfo

    with kiln.tuning_db.open("tune.db") as db:
        db.add_workload("8f3a09c1d2e4b567", "matmul_1024", compute_dag=dag_json)
        run = db.start_run(budget=1000, seed=7, machine="box1")
        target = TargetInfo("llvm -mcpu=znver3 -num-cores=2", "AMD EPYC 7763", ["avx2", "fma"])
        db.add_records([Record(workload_key="8f3a09c1d2e4b567", target=target,
                               trace=trace_json, run_times=[1.2e-3, 1.1e-3], run_uid=run)])
        db.end_run(run)
        best = db.best("8f3a09c1d2e4b567", target, k=5)   # lowest median first

Records and the other values are the C++ structs of the database, bound
with their fields as attributes (edit them in place, lists included;
``to_dict()`` gives plain Python values, ``from_dict()`` reads them back).
Optional values are ``None``; times are seconds, timestamps Unix seconds.
Traces and compute DAGs are JSON text; a ``list`` or ``dict`` given instead
is serialised for you. Features are float32 numpy arrays of shape (rows, cols).

Every error, from a record that does not validate to a file that is not a
kiln database (which is never modified), raises :class:`kiln.KilnError` with
the C++ message. A closed database raises it too.
"""
import json
import operator
import os

import numpy as np

from ._ffi import KilnError, _kiln

_native = _kiln.tuning_db

# The value types are the C++ structs (tuning_db/include/kiln/tuning_db/types.h),
# bound once in python/src/py_tuning_db_types.cpp, which checks every field.
TargetInfo = _native.TargetInfo
Workload = _native.Workload
WorkloadSummary = _native.WorkloadSummary
TuningRun = _native.TuningRun
FeatureSet = _native.FeatureSet
Record = _native.Record
WorkloadTargetStats = _native.WorkloadTargetStats
Stats = _native.Stats
ImportResult = _native.ImportResult
Claim = _native.Claim

__all__ = [
    "open", "latest_schema_version", "Database", "TargetInfo", "Workload", "WorkloadSummary",
    "TuningRun", "FeatureSet", "Record", "WorkloadTargetStats", "Stats", "ImportResult", "Claim",
]


class _ListField(list):
    """A list attribute of a bound record (``run_times``, ``cpu_features``) that
    writes every in-place edit back into the record: the C++ struct holds a
    std::vector, of which pybind11 can only hand out copies."""

    __slots__ = ("_owner", "_name")

    def __init__(self, owner, name, items):
        super().__init__(items)
        self._owner, self._name = owner, name


def _writes_back(method):
    def edit(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        setattr(self._owner, self._name, list(self))
        return out
    edit.__name__ = method.__name__
    return edit


for _m in ("append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse",
           "__setitem__", "__delitem__", "__iadd__", "__imul__"):
    setattr(_ListField, _m, _writes_back(getattr(list, _m)))


def _editable_list(cls, name):
    native = getattr(cls, name)
    setattr(cls, name, property(lambda self: _ListField(self, name, native.fget(self)), native.fset, doc=native.__doc__))


_editable_list(Record, "run_times")
_editable_list(TargetInfo, "cpu_features")


# ---- argument checks: wrong types become KilnError, as the C++ side's errors do ----

def _str(value, what):
    if not isinstance(value, str):
        raise KilnError(f"{what} must be a string, not {type(value).__name__}")
    return value


def _int(value, what, bits=64):
    if isinstance(value, bool):
        raise KilnError(f"{what} must be an integer, not bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise KilnError(f"{what} must be an integer, not {type(value).__name__}") from None
    if not -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
        raise KilnError(f"{what} = {v} does not fit in {bits} bits")
    return v


def _path(value, what):
    try:
        return os.fsdecode(os.fspath(value))
    except TypeError:
        raise KilnError(f"{what} must be a path (str or os.PathLike), not {type(value).__name__}") from None


def _filter(workload_key=None, target=None, match="hardware", include_errors=True,
            feature_extractor=None, with_features=False, limit=0, after_id=None):
    # The native layer checks every option (target: a TargetInfo, a dict or a target string).
    return {
        "workload_key": workload_key, "target": target, "match": match, "include_errors": include_errors,
        "feature_extractor": feature_extractor, "with_features": with_features, "limit": limit,
        "after_id": after_id,
    }


class Database:
    """One connection to a tuning database file; get one with :func:`open`.

    A context manager: ``with kiln.tuning_db.open(path) as db:`` closes it on
    exit. Several processes may write the same file at once. Record filters
    (``find``, ``training_records``, ``export_jsonl``, ``write_jsonl``) take
    the keyword arguments ``workload_key``, ``target`` (a TargetInfo, dict or
    target string), ``match`` (``"exact"``, ``"hardware"`` or
    ``"string_only"``), ``include_errors``, ``feature_extractor``,
    ``with_features`` and ``limit`` (0 = all).
    """

    def __init__(self, native):
        if not isinstance(native, _native.Database):
            raise KilnError("Database: use kiln.tuning_db.open(path) to open a database")
        self._db = native

    # ---- lifetime ----

    @property
    def path(self):
        return self._db.path

    @property
    def schema_version(self):
        return self._db.schema_version

    @property
    def closed(self):
        return self._db.closed

    def close(self):
        """Closes the connection; later calls raise KilnError. Closing twice is harmless."""
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"<kiln.tuning_db.Database {self.path!r}{' (closed)' if self.closed else ''}>"

    # ---- workloads ----

    def add_workload(self, workload, name="", compute_dag=None):
        """Adds a Workload (or ``key, name, compute_dag``); the same key again is a no-op
        unless the DAG differs beyond its "name" members (labels), which is an error."""
        if isinstance(workload, str):
            if compute_dag is None:
                raise KilnError(f"add_workload({workload!r}): pass compute_dag (JSON text or a dict)")
            workload = Workload(workload, name, compute_dag)
        elif not isinstance(workload, (Workload, dict)):
            raise KilnError(f"add_workload: expected a Workload, a dict or a key, not {type(workload).__name__}")
        self._db.add_workload(workload)

    def workload(self, key):
        """The Workload stored under ``key``, or None."""
        return self._db.workload(_str(key, "workload key"))

    def workloads(self):
        """Every workload with its record and error counts, ordered by key."""
        return self._db.workloads()

    # ---- tuning runs ----

    def start_run(self, run=None, **fields):
        """Registers a tuning run (a TuningRun, a dict, or its fields as keywords); returns its uid."""
        if run is None:
            run = TuningRun.from_dict(fields)
        elif fields:
            raise KilnError("start_run: pass a TuningRun or keyword fields, not both")
        elif not isinstance(run, (TuningRun, dict)):
            raise KilnError(f"start_run: expected a TuningRun or a dict, not {type(run).__name__}")
        return self._db.start_run(run)

    def end_run(self, uid, ended_at=None):
        """Sets the end time of a run (now when not given)."""
        if ended_at is not None and not isinstance(ended_at, (int, float, np.number)):
            raise KilnError(f"end_run: ended_at must be a number (Unix seconds) or None, not {type(ended_at).__name__}")
        self._db.end_run(_str(uid, "run uid"), None if ended_at is None else float(ended_at))

    def run(self, uid):
        """The TuningRun with this uid, or None."""
        return self._db.run(_str(uid, "run uid"))

    def runs(self):
        """Every tuning run, oldest first."""
        return self._db.runs()

    # ---- records ----

    def add_records(self, records):
        """Adds Records (or dicts of their fields) in one transaction, all or none; returns their ids.

        The records given are not modified; read them back with :meth:`record`.
        """
        if isinstance(records, (Record, dict, str, bytes)) or not hasattr(records, "__iter__"):
            raise KilnError(f"add_records: pass a list of records, not {type(records).__name__}")
        return self._db.add_records(list(records))

    def best(self, key, target, k=1, match="hardware", metric="median"):
        """The ``k`` valid records of a workload on a target with the lowest ``metric``
        (``"median"`` or ``"min"``), best first; ties go to the older record."""
        return self._db.best(_str(key, "workload key"), target, _int(k, "best: k"),
                             _str(match, "best: match"), _str(metric, "best: metric"))

    def records(self, key, with_features=False):
        """Every record of a workload (all targets, errors included), oldest first."""
        return self._db.records(_str(key, "workload key"), bool(with_features))

    def record(self, id, with_features=False):
        """The record with this id, or None."""
        return self._db.record(_int(id, "record id"), bool(with_features))

    def find(self, *, workload_key=None, target=None, match="hardware", include_errors=True,
             feature_extractor=None, with_features=False, limit=0, after_id=None):
        """Records selected by the filter, oldest first; ``after_id``: only those added after that record."""
        f = _filter(workload_key, target, match, include_errors, feature_extractor, with_features, limit, after_id)
        return self._db.find(f)

    def training_records(self, *, workload_key=None, target=None, match="hardware", include_errors=True,
                         feature_extractor=None, limit=0):
        """Records for cost-model training: :meth:`find` with features loaded."""
        f = _filter(workload_key, target, match, include_errors, feature_extractor, True, limit)
        return self._db.training_records(f)

    def set_features(self, record_id, features, extractor=None):
        """Attaches (or replaces) a record's features: a FeatureSet, or a 2-D array with ``extractor``."""
        if isinstance(features, FeatureSet):
            if extractor is not None and extractor != features.extractor:
                raise KilnError("set_features: the extractor is given twice, differently")
        else:
            if extractor is None:
                raise KilnError("set_features: pass extractor= (e.g. \"ansor-v1\") with a features array")
            features = FeatureSet(extractor, features)
        self._db.set_features(_int(record_id, "record id"), features)

    # ---- claims of concurrent tuning sessions ----

    def claim(self, key, target, traces, owner, ttl_s):
        """Claims traces of a workload on a target's hardware for ``owner`` in one transaction.

        Returns one status per trace: ``"measured"`` (a record of it exists),
        ``"held"`` (another owner's claim that has not expired) or
        ``"claimed"`` (now the owner's, until ``ttl_s`` seconds from now).
        Traces are JSON text (a list is serialised). Needs a writable database.
        """
        if isinstance(traces, (str, bytes)):
            raise KilnError("claim: traces must be a list of traces, not a single string")
        traces = [t if isinstance(t, str) else json.dumps(t) for t in traces]
        return self._db.claim(_str(key, "workload key"), target, traces, _str(owner, "claim owner"), float(ttl_s))

    def renew_claims(self, owner, ttl_s):
        """Extends every claim of ``owner`` to ``ttl_s`` seconds from now; returns how many it has."""
        return self._db.renew_claims(_str(owner, "claim owner"), float(ttl_s))

    def release_claims(self, owner):
        """Drops every claim of ``owner``; returns how many."""
        return self._db.release_claims(_str(owner, "claim owner"))

    def claims(self):
        """Every stored :class:`Claim` (expired ones too, until the next claim clears them), soonest expiry first."""
        return self._db.claims()

    def delete_graph_plans(self, model_key):
        """Deletes the tuned graph plan and the measured candidates of a model (``kiln.tuner.model_key(model)``) on every target; returns how many rows went."""
        return self._db.delete_graph_plans(_str(model_key, "model key"))

    # ---- statistics and maintenance ----

    def stats(self):
        """Totals, errors by kind, and the best run times per workload and target."""
        return self._db.stats()

    def delete_records(self, ids):
        """Deletes records by id; returns how many existed."""
        if isinstance(ids, np.ndarray):
            ids = ids.tolist()
        return self._db.delete_records(ids)

    def delete_workload(self, key):
        """Deletes a workload and all its records; returns the number of records deleted."""
        return self._db.delete_workload(_str(key, "workload key"))

    def prune(self, keep_best=None, metric="median", drop_errors=False, older_than=None, vacuum=False):
        """Deletes the records any enabled rule selects; returns how many.

        ``keep_best``: keep the k best valid records per workload and target (by
        ``metric``); ``drop_errors``: delete every failed record; ``older_than``:
        delete records with a timestamp before this (Unix seconds); ``vacuum``:
        give the freed pages back to the file system.
        """
        return self._db.prune({"keep_best": keep_best, "metric": metric, "drop_errors": drop_errors,
                               "older_than": older_than, "vacuum": vacuum})

    def check_integrity(self):
        """SQLite's integrity and foreign-key checks: the problems found (empty when sound)."""
        return self._db.check_integrity()

    # ---- JSON Lines exchange ----

    def export_jsonl(self, path, *, workload_key=None, target=None, match="hardware", include_errors=True,
                     feature_extractor=None, limit=0):
        """Writes the selected records (features included) to a file atomically; returns the count."""
        f = _filter(workload_key, target, match, include_errors, feature_extractor, True, limit)
        return self._db.export_jsonl(_path(path, "export_jsonl: path"), f)

    def import_jsonl(self, path):
        """Reads a JSON Lines file in one transaction (records with known uids are skipped)."""
        return self._db.import_jsonl(_path(path, "import_jsonl: path"))

    def write_jsonl(self, file, *, workload_key=None, target=None, match="hardware", include_errors=True,
                    feature_extractor=None, limit=0):
        """Writes the selected records to a text file object; returns the count."""
        f = _filter(workload_key, target, match, include_errors, feature_extractor, True, limit)
        n, text = self._db.write_jsonl(f)
        file.write(text.decode("utf-8"))
        return n

    def read_jsonl(self, file):
        """Imports the records of a file object (text or binary), like :meth:`import_jsonl`."""
        text = file.read()
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return self._db.read_jsonl(_str(text, "read_jsonl: the file's content"))


def open(path, read_only=False, create_if_missing=True, busy_timeout_ms=60000, cache_size_mib=16):
    """Opens a tuning database file (creating it, or migrating an older schema, unless told not to).

    ``read_only`` never writes and fails on a database that needs migrating;
    ``create_if_missing=False`` fails on a missing file. A file that is not a
    kiln database, is from a newer kiln or is damaged raises KilnError and is
    not modified. ``busy_timeout_ms`` is how long a write waits for another
    process's lock; ``cache_size_mib`` the SQLite page cache.
    """
    native = _native.Database.open(_path(path, "tuning database path"), bool(read_only), bool(create_if_missing),
                                   _int(busy_timeout_ms, "busy_timeout_ms", 32), _int(cache_size_mib, "cache_size_mib", 32))
    return Database(native)


def latest_schema_version():
    """The schema version this kiln writes; files with a higher one are refused."""
    return _native.Database.latest_schema_version()
