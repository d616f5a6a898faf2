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

Records and the other values are small classes with plain attributes (edit
them in place; ``to_dict()`` gives plain Python values). Optional values are
``None``; times are seconds, timestamps Unix seconds. Traces and compute DAGs
are JSON text; a ``list`` or ``dict`` given instead is serialised for you.
Features are float32 numpy arrays of shape (rows, cols).

Every error, from a record that does not validate to a file that is not a
kiln database (which is never modified), raises :class:`kiln.KilnError` with
the C++ message. A closed database raises it too.
"""
import dataclasses
import json
import operator
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ._ffi import KilnError, _kiln

_native = _kiln.tuning_db

__all__ = [
    "open", "latest_schema_version", "Database", "TargetInfo", "Workload", "WorkloadSummary",
    "TuningRun", "FeatureSet", "Record", "WorkloadTargetStats", "Stats", "ImportResult",
]


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


def _json_text(value, what):
    """JSON text as is; any other JSON value serialised."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as err:
        raise KilnError(f"{what} must be JSON text or a JSON-serialisable value ({err})") from None


def _check_dict_fields(d, type_name, names):
    """Raises KilnError unless d is a dict whose keys are all among names."""
    if not isinstance(d, dict):
        raise KilnError(f"{type_name}.from_dict: expected a dict, not {type(d).__name__}")
    unknown = sorted(set(d) - set(names), key=str)
    if unknown:
        raise KilnError(f"{type_name}: unknown field(s) {', '.join(map(repr, unknown))}; "
                        f"the fields are {', '.join(names)}")


class _Struct:
    """to_dict / from_dict for the plain dataclasses below."""

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        _check_dict_fields(d, cls.__name__, [f.name for f in dataclasses.fields(cls)])
        return cls(**d)


@dataclass
class TargetInfo(_Struct):
    """A target string plus the facts that make timings comparable."""
    target: str = ""                    # e.g. "llvm -mcpu=znver3 -num-cores=2"
    cpu_model: str = ""                 # e.g. "AMD EPYC 7763 64-Core Processor"
    cpu_features: List[str] = field(default_factory=list)  # stored sorted and unique
    gpu_arch: str = ""                  # e.g. "sm_90"; empty for CPU targets
    kiln_version: str = ""


def _target(value, what):
    """A TargetInfo from a TargetInfo, a dict of its fields or a bare target string."""
    if isinstance(value, TargetInfo):
        return value
    if isinstance(value, dict):
        return TargetInfo.from_dict(value)
    if isinstance(value, str):
        return TargetInfo(target=value)
    raise KilnError(f"{what} must be a TargetInfo, a dict or a target string, not {type(value).__name__}")


def _target_dict(value, what):
    d = _target(value, what).to_dict()
    if isinstance(d["cpu_features"], (set, frozenset)):  # the database sorts them anyway
        d["cpu_features"] = sorted(d["cpu_features"])
    return d


@dataclass
class Workload(_Struct):
    """A distinct computation: its structural key, a readable name and its compute DAG (JSON text)."""
    key: str
    name: str = ""
    compute_dag: str = ""


@dataclass
class WorkloadSummary(_Struct):
    """A workload with its record and error counts, as listed by :meth:`Database.workloads`."""
    key: str
    name: str
    records: int
    errors: int


@dataclass(kw_only=True)
class TuningRun(_Struct):
    """One tuning session. ``uid`` and ``started_at`` are filled in by :meth:`Database.start_run` when None."""
    uid: Optional[str] = None
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    budget: int = 0
    seed: int = 0
    machine: str = ""


class FeatureSet:
    """Cost-model features of one record: ``values`` is a float32 array of shape (rows, cols).

    ``extractor`` names the extractor and its version (e.g. ``"ansor-v1"``) so
    that incompatible layouts are never mixed. A flat ``values`` is reshaped
    when ``rows`` and ``cols`` are given.
    """

    def __init__(self, extractor, values, rows=None, cols=None):
        self.extractor = extractor
        self.values = _feature_array(values, rows, cols, "FeatureSet")

    @property
    def rows(self):
        return int(np.shape(self.values)[0])

    @property
    def cols(self):
        return int(np.shape(self.values)[1])

    def to_dict(self):
        """The JSON Lines form: extractor, rows, cols and the values flattened row-major."""
        arr = _feature_array(self.values, None, None, "FeatureSet")
        return {"extractor": self.extractor, "rows": arr.shape[0], "cols": arr.shape[1],
                "values": arr.ravel().tolist()}

    @classmethod
    def from_dict(cls, d):
        _check_dict_fields(d, "FeatureSet", ["extractor", "rows", "cols", "values"])
        return cls(d.get("extractor", ""), d.get("values", []), d.get("rows"), d.get("cols"))

    def __eq__(self, other):
        if not isinstance(other, FeatureSet):
            return NotImplemented
        return (self.extractor == other.extractor and np.shape(self.values) == np.shape(other.values)
                and np.array_equal(self.values, other.values))

    def __repr__(self):
        return f"FeatureSet(extractor={self.extractor!r}, rows={self.rows}, cols={self.cols})"


def _feature_array(values, rows, cols, what):
    try:
        arr = np.ascontiguousarray(values, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise KilnError(f"{what}: values must be numbers ({err})") from None
    if rows is not None or cols is not None:
        if rows is None or cols is None:
            raise KilnError(f"{what}: give both rows and cols, or neither")
        r, c = _int(rows, f"{what}: rows"), _int(cols, f"{what}: cols")
        if r < 0 or c < 0 or arr.size != r * c:
            raise KilnError(f"{what}: {arr.size} values do not fill rows x cols = {r} x {c}")
        arr = arr.reshape(r, c)
    if arr.ndim != 2:
        raise KilnError(f"{what}: values must be a 2-D array (rows x cols), not of shape {arr.shape}; "
                        "reshape one row with values.reshape(1, -1)")
    return arr


def _features(value, what):
    if isinstance(value, FeatureSet):
        return value
    if isinstance(value, dict):
        return FeatureSet.from_dict(value)
    raise KilnError(f"{what} must be a FeatureSet, a dict or None, not {type(value).__name__}")


def _features_native(value, what):
    f = _features(value, what)
    return {"extractor": f.extractor, "values": _feature_array(f.values, None, None, what)}


@dataclass(kw_only=True)
class Record:
    """One measured schedule of a workload on a target.

    ``id`` (local to one database), ``uid`` (global) and ``timestamp`` are
    assigned on insert when None; ``min_time`` and ``median_time`` are always
    derived from ``run_times``. A failed candidate has an ``error_kind`` of
    ``"build_error"``, ``"run_error"``, ``"timeout"`` or ``"wrong_result"``
    (``"none"`` when it ran) and may have no run times. ``features`` is only
    loaded where asked for (``with_features=True``).
    """
    id: Optional[int] = None
    uid: Optional[str] = None
    workload_key: str = ""
    target: TargetInfo = field(default_factory=TargetInfo)
    trace: str = "[]"                 # JSON array of schedule steps
    run_times: List[float] = field(default_factory=list)
    min_time: Optional[float] = None
    median_time: Optional[float] = None
    error_kind: str = "none"
    error_msg: str = ""
    build_time: Optional[float] = None
    run_uid: Optional[str] = None     # the TuningRun it came from
    timestamp: Optional[float] = None
    features: Optional[FeatureSet] = None

    def to_dict(self):
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["target"] = self.target.to_dict() if hasattr(self.target, "to_dict") else self.target
        if isinstance(d["run_times"], (list, tuple, np.ndarray)):
            d["run_times"] = [float(t) for t in d["run_times"]]
        d["features"] = self.features.to_dict() if hasattr(self.features, "to_dict") else self.features
        return d

    @classmethod
    def from_dict(cls, d):
        _check_dict_fields(d, "Record", [f.name for f in dataclasses.fields(cls)])
        d = dict(d)
        if "target" in d:
            d["target"] = _target(d["target"], "Record: target")
        if d.get("features") is not None:
            d["features"] = _features(d["features"], "Record: features")
        return cls(**d)


def _record_native(value, what):
    """The dict the native layer reads (it checks every field's type)."""
    if isinstance(value, dict):
        value = Record.from_dict(value)
    elif not isinstance(value, Record):
        raise KilnError(f"{what} must be a Record or a dict, not {type(value).__name__}")
    d = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    d["target"] = _target_dict(value.target, f"{what}: target")
    d["trace"] = _json_text(value.trace, f"{what}: trace")
    d["features"] = None if value.features is None else _features_native(value.features, f"{what}: features")
    for key in ("id", "uid", "run_uid", "timestamp"):
        if d[key] is None:
            d.pop(key)
    return d


def _record(d):
    d = dict(d)
    d["target"] = TargetInfo(**d["target"])
    if d["features"] is not None:
        d["features"] = FeatureSet(**d["features"])
    return Record(**d)


@dataclass
class WorkloadTargetStats(_Struct):
    """Record counts and the best run times of one workload on one target."""
    workload_key: str
    workload_name: str
    target: TargetInfo
    records: int
    errors: int
    best_median: Optional[float]
    best_min: Optional[float]


@dataclass
class Stats(_Struct):
    """Totals of a database, errors by kind, and the best result per workload and target."""
    workloads: int
    targets: int
    tuning_runs: int
    records: int
    errors: int
    errors_by_kind: Dict[str, int]
    per_workload: List[WorkloadTargetStats]


@dataclass
class ImportResult(_Struct):
    """Records inserted, and records skipped because their uid was already present."""
    added: int
    skipped: int


def _filter(workload_key=None, target=None, match="hardware", include_errors=True,
            feature_extractor=None, with_features=False, limit=0):
    return {
        "workload_key": workload_key,
        "target": None if target is None else _target_dict(target, "filter: target"),
        "match": match, "include_errors": include_errors, "feature_extractor": feature_extractor,
        "with_features": with_features, "limit": limit,
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
        unless the DAG differs, which is an error."""
        if isinstance(workload, str):
            if compute_dag is None:
                raise KilnError(f"add_workload({workload!r}): pass compute_dag (JSON text or a dict)")
            workload = Workload(workload, name, compute_dag)
        elif isinstance(workload, dict):
            workload = Workload.from_dict(workload)
        elif not isinstance(workload, Workload):
            raise KilnError(f"add_workload: expected a Workload, a dict or a key, not {type(workload).__name__}")
        d = workload.to_dict()
        d["compute_dag"] = _json_text(workload.compute_dag, f"the compute DAG of workload {workload.key}")
        self._db.add_workload(d)

    def workload(self, key):
        """The Workload stored under ``key``, or None."""
        d = self._db.workload(_str(key, "workload key"))
        return None if d is None else Workload(**d)

    def workloads(self):
        """Every workload with its record and error counts, ordered by key."""
        return [WorkloadSummary(**d) for d in self._db.workloads()]

    # ---- tuning runs ----

    def start_run(self, run=None, **fields):
        """Registers a tuning run (a TuningRun, a dict, or its fields as keywords); returns its uid."""
        if run is None:
            run = TuningRun.from_dict(fields)
        elif fields:
            raise KilnError("start_run: pass a TuningRun or keyword fields, not both")
        elif isinstance(run, dict):
            run = TuningRun.from_dict(run)
        elif not isinstance(run, TuningRun):
            raise KilnError(f"start_run: expected a TuningRun or a dict, not {type(run).__name__}")
        return self._db.start_run(run.to_dict())

    def end_run(self, uid, ended_at=None):
        """Sets the end time of a run (now when not given)."""
        if ended_at is not None and not isinstance(ended_at, (int, float, np.number)):
            raise KilnError(f"end_run: ended_at must be a number (Unix seconds) or None, not {type(ended_at).__name__}")
        self._db.end_run(_str(uid, "run uid"), None if ended_at is None else float(ended_at))

    def run(self, uid):
        """The TuningRun with this uid, or None."""
        d = self._db.run(_str(uid, "run uid"))
        return None if d is None else TuningRun(**d)

    def runs(self):
        """Every tuning run, oldest first."""
        return [TuningRun(**d) for d in self._db.runs()]

    # ---- records ----

    def add_records(self, records):
        """Adds Records (or dicts of their fields) in one transaction, all or none; returns their ids.

        The records given are not modified; read them back with :meth:`record`.
        """
        if isinstance(records, (Record, dict, str, bytes)) or not hasattr(records, "__iter__"):
            raise KilnError(f"add_records: pass a list of records, not {type(records).__name__}")
        batch = [_record_native(r, f"record {i} of the batch") for i, r in enumerate(records)]
        return self._db.add_records(batch)

    def best(self, key, target, k=1, match="hardware", metric="median"):
        """The ``k`` valid records of a workload on a target with the lowest ``metric``
        (``"median"`` or ``"min"``), best first; ties go to the older record."""
        return [_record(d) for d in self._db.best(
            _str(key, "workload key"), _target_dict(target, "best: target"), _int(k, "best: k"),
            _str(match, "best: match"), _str(metric, "best: metric"))]

    def records(self, key, with_features=False):
        """Every record of a workload (all targets, errors included), oldest first."""
        return [_record(d) for d in self._db.records(_str(key, "workload key"), bool(with_features))]

    def record(self, id, with_features=False):
        """The record with this id, or None."""
        d = self._db.record(_int(id, "record id"), bool(with_features))
        return None if d is None else _record(d)

    def find(self, *, workload_key=None, target=None, match="hardware", include_errors=True,
             feature_extractor=None, with_features=False, limit=0):
        """Records selected by the filter, oldest first."""
        f = _filter(workload_key, target, match, include_errors, feature_extractor, with_features, limit)
        return [_record(d) for d in self._db.find(f)]

    def training_records(self, *, workload_key=None, target=None, match="hardware", include_errors=True,
                         feature_extractor=None, limit=0):
        """Records for cost-model training: :meth:`find` with features loaded."""
        f = _filter(workload_key, target, match, include_errors, feature_extractor, True, limit)
        return [_record(d) for d in self._db.training_records(f)]

    def set_features(self, record_id, features, extractor=None):
        """Attaches (or replaces) a record's features: a FeatureSet, or a 2-D array with ``extractor``."""
        if isinstance(features, FeatureSet):
            if extractor is not None and extractor != features.extractor:
                raise KilnError("set_features: the extractor is given twice, differently")
        else:
            if extractor is None:
                raise KilnError("set_features: pass extractor= (e.g. \"ansor-v1\") with a features array")
            features = FeatureSet(extractor, features)
        self._db.set_features(_int(record_id, "record id"), _features_native(features, "set_features"))

    # ---- statistics and maintenance ----

    def stats(self):
        """Totals, errors by kind, and the best run times per workload and target."""
        d = self._db.stats()
        per = [WorkloadTargetStats(**dict(e, target=TargetInfo(**e["target"]))) for e in d["per_workload"]]
        return Stats(**dict(d, per_workload=per))

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
        return ImportResult(**self._db.import_jsonl(_path(path, "import_jsonl: path")))

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
        return ImportResult(**self._db.read_jsonl(_str(text, "read_jsonl: the file's content")))


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
