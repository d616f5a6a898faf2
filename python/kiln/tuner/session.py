"""A tuning session: kiln.tune searches schedules of one computation and returns a TuneResult."""
import os
import warnings

from .. import plot_curve as _plot
from .._ffi import KilnError, _kiln
from ..driver import arg_tensors


class TuneResult:
    """What a tuning session found (times in seconds).

    Attributes: ``best_time`` (median of the best schedule, the database's
    best for this workload and machine, earlier sessions included; 0 when
    none is valid), ``best_gflops``, ``best_trace`` (its schedule as JSON),
    ``first_valid_time`` (first valid candidate of this session),
    ``trials_measured``, ``trials_skipped`` (already in the database),
    ``trials_claimed_elsewhere`` (passed over: another session running at
    the same time was measuring them), ``records_from_others`` (records
    such sessions stored meanwhile, learned from between rounds), ``errors``, ``elapsed_s``, ``db_path``, ``curve`` (list of
    ``(trials, best GFLOP/s so far)`` per batch), ``trial_gflops`` (GFLOP/s
    of every measured trial, 0 for a failure), ``featurized`` (candidates
    whose cost-model features the search extracted) and
    ``feature_ms_per_candidate`` (their mean extraction time, per thread),
    ``task`` (the :class:`Task`).
    """

    def __init__(self, fields, task):
        self.__dict__.update(fields)
        self.curve = [tuple(p) for p in fields["curve"]]
        self.trial_gflops = list(fields.get("trial_gflops", []))
        self.task = task

    @property
    def speedup(self):
        """The best time against the first valid candidate of the session (1.0 when unknown)."""
        if self.best_time > 0 and self.first_valid_time > 0:
            return self.first_valid_time / self.best_time
        return 1.0

    def schedule(self):
        """The best schedule, replayed on the task's tensors (None when there is none)."""
        if not self.best_trace:
            return None
        return _kiln.Schedule.from_trace(self.task.outputs, self.best_trace)

    def __repr__(self):
        if self.best_time <= 0:
            return (f"TuneResult({self.task.name}: no valid schedule; {self.trials_measured} trials, "
                    f"{self.errors} errors, db={self.db_path!r})")
        return (f"TuneResult({self.task.name}: best {self.best_time * 1e3:.4f} ms, {self.best_gflops:.1f} GFLOP/s, "
                f"{self.speedup:.2f}x over the first valid candidate; {self.trials_measured} trials "
                f"({self.errors} errors, {self.trials_skipped} skipped) in {self.elapsed_s:.1f} s; db={self.db_path!r})")


Task = _kiln.tuner.Task


def make_task(args, target="llvm", name="", size_hints=None):
    """A tuning task from the kernel's arguments (input placeholders and outputs, in call order).

    ``size_hints`` (dynamic shapes): the likely value of each shape variable by name,
    ``{"seq": 128}``; the rules tile a symbolic extent as for that size (128 when not given)."""
    if isinstance(args, Task):
        return args
    return _kiln.tuner.make_task(arg_tensors(args, "make_task"), target, name, dict(size_hints or {}))


def tune(args, target="llvm", trials=200, db="kiln_tuning.db", seed=0, timeout=10.0, curve_png=None,
         batch_size=32, early_stop_rounds=8, repeat=3, min_repeat_ms=20.0, number=1, build_threads=2,
         progress=True, model_path=None, population=64, generations=3, name="", inject_faults=None, cold_inputs=False,
         random_search=False, gpu_simulate=False, claim_ttl=60.0):
    """Tunes a computation and returns a :class:`TuneResult`.

    ``args`` are the kernel's tensors (inputs and outputs, in call order) or a
    :class:`Task`. ``trials`` is the budget of measured candidates, ``db`` the
    tuning database file (created if missing; resumed if it has records),
    ``timeout`` the time limit of one candidate's run in seconds. With
    ``curve_png`` the best GFLOP/s against trials is plotted (matplotlib; a
    warning, not an error, when it is missing). ``inject_faults`` is a test
    hook (e.g. ``"crash@3"``, see the C++ MeasureOptions). ``cold_inputs`` times every candidate with
    every input but the first evicted from the caches (see :func:`measure`); such records are kept
    apart from warm ones, and ``best_schedule`` / ``kiln.compile(db=)`` prefer them. ``random_search``
    measures random samples of the space (after the seeds) without the cost model: the baseline that
    shows what the model-guided search buys (bench/search_vs_random.py).

    A cuda target (``"cuda -arch=sm_90"``) searches the GPU rules' space and times candidates on the
    GPU with CUDA events, each in a worker process. ``gpu_simulate=True`` runs them in the GPU
    simulator instead, on any machine: the search, the workers, the correctness checks and the
    records work as on a GPU, but the times are the simulator's, so such records are kept apart
    (target ``"... [simulated]"``) and no build takes a schedule from them.

    Sessions may tune the same computation on one database at once (in several processes on one
    machine): each claims a batch's candidates in the database before measuring
    them and passes over those another live session has claimed, so no schedule is measured twice,
    and each learns from the others' records. ``claim_ttl`` (seconds) is how long the claims of a
    session that crashed keep its candidates from the others; a running session renews its own.
    """
    task = make_task(args, target, name)
    if not isinstance(db, (str, os.PathLike)) or not str(db):
        raise KilnError("tune: db must be the path of the tuning database file, e.g. 'kiln_tuning.db'")
    options = dict(trials=int(trials), batch_size=int(batch_size), early_stop_rounds=int(early_stop_rounds),
                   seed=int(seed), db_path=os.fspath(db), timeout_s=float(timeout), progress=bool(progress),
                   model_path=model_path, population=int(population), generations=int(generations),
                   number=int(number), repeat=int(repeat), min_repeat_ms=float(min_repeat_ms),
                   build_threads=int(build_threads), inject_faults=inject_faults, cold_inputs=bool(cold_inputs),
                   random_search=bool(random_search), gpu_simulate=bool(gpu_simulate), claim_ttl_s=float(claim_ttl))
    result = TuneResult(_kiln.tuner.tune(task, options), task)
    if curve_png:
        try:
            plot_curve(result.curve, curve_png, f"{task.name} on {task.target}", trials=result.trial_gflops)
        except KilnError as err:
            warnings.warn(f"kiln.tune: no curve written: {err}", RuntimeWarning, stacklevel=2)
    return result


def plot_curve(curve, path, title="tuning curve", trials=None, peer=None):
    """Writes a tuning session as a PNG (atomically). Raises KilnError without matplotlib.

    ``trials``: GFLOP/s of every measured trial (``TuneResult.trial_gflops``;
    0 or None for a failure), drawn as dots with the best so far as a step
    line; without it, ``curve`` (``(trials, best GFLOP/s)`` per batch) is
    drawn. ``peer``: ``(name, GFLOP/s)`` of a peer library, a dashed line.
    """
    try:
        if trials is not None:
            _plot.write_png(None, path, title, trials=[g or None for g in trials], peer=peer)
        else:
            _plot.write_png({"best": list(curve)}, path, title, peer=peer)
    except ImportError as err:
        raise KilnError("plot_curve: matplotlib is not installed (apt-get install python3-matplotlib)") from err
