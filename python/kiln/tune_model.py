"""Tuning a whole model: ``kiln.tune_model(model, trials=2000, db="kiln_tuning.db")``.

Every fused group of the compiled model is a tuning task (identical groups
are one task with a weight: how often it runs per inference). A task
scheduler spreads the trial budget over the tasks by the expected gain in
end-to-end time; every measurement is a record in the database, so an
interrupted session resumes where it stopped, and ``kiln.compile(model,
db=...)`` then builds each group from its best record. Records of one model
serve another: the same workload key is the same task.
"""
import warnings
import re

from ._ffi import KilnError, _kiln


def _seconds(budget):
    """A time budget as seconds: a number, or "90s", "30m", "2h"."""
    if budget is None:
        return 0.0
    if isinstance(budget, (int, float)):
        return float(budget)
    m = re.fullmatch(r"\s*([0-9.]+)\s*([smh]?)\s*", str(budget))
    if not m:
        raise KilnError(f"time budget {budget!r}: give seconds, or a number with s, m or h (e.g. 30m)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def extract_tasks(model, target="llvm", db=None, layout=True):
    """The model's tuning tasks: a list of dicts (workload_key, ops, flop, weight, groups, records, best_time) and a printable table."""
    tasks, table = _kiln.graph.extract_tasks(model, str(target), db or "", layout)
    return tasks, table


def tune_model(model, target="llvm", trials=1000, db="kiln_tuning.db", time_budget=None, batch=16, early_stop_rounds=3,
               progress=True, seed=0, layout=True, cold_inputs=True):
    """Tunes every task of `model` into `db`; returns a dict with the tasks, the table, trials, rounds, elapsed_s, estimated_latency (s) and failures (tasks stopped by an error, with its message).

    cold_inputs: time each candidate with every input but the first evicted from the caches, as a layer's
    weights are inside a model run (records kept apart from warm ones; compile prefers them)."""
    if not db:
        raise KilnError("tune_model needs a tuning database (db=...) to keep its records")
    result = _kiln.graph.tune_model(model, str(target), db, int(trials), int(batch), _seconds(time_budget),
                                    int(early_stop_rounds), bool(progress), int(seed), layout, bool(cold_inputs))
    for failure in result["failures"]:
        warnings.warn("tune_model: a task was not tuned further after an error (please report it): " + failure)
    return result
