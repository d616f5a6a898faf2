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


COLD = " [cold inputs]"


def remeasure(model, db, target="llvm", top=8, rounds=3, cold_inputs=True, progress=True):
    """Measures again the `top` best records of every task of `model` (by their min time, among the
    records timed warm) in `rounds` interleaved rounds, with cold inputs by default, and stores the
    new timings as records of their own (cold ones on the " [cold inputs]" target, which compile
    then prefers). For records taken on a loaded machine, or before cold-input timing existed:
    the best of a task among re-measured schedules is the one that is fastest as a model runs it.
    Returns one dict per task: workload_key, ops, weight, before (the old best, seconds), after
    (the best re-measured), changed (whether another schedule won)."""
    import numpy as np
    from . import tuner as _tuner
    from . import tuning_db as _tdb
    tasks, _ = extract_tasks(model, target, db)
    out = []
    with _tdb.open(db) as d:
        run = d.start_run(budget=0, machine="remeasure")
        for i, t in enumerate(tasks):
            key = t["workload_key"]
            recs = [r for r in d.records(key) if r.error_kind == "none" and r.min_time is not None
                    and not r.target.target.endswith(COLD)]
            if not recs:
                continue
            recs.sort(key=lambda r: r.min_time)
            picked, seen = [], set()
            for r in recs:  # one record per schedule
                if r.trace not in seen:
                    seen.add(r.trace)
                    picked.append(r)
                if len(picked) == top:
                    break
            traces = [r.trace for r in picked]
            times = [[] for _ in traces]
            for _ in range(rounds):
                for k, m in enumerate(_tuner.measure(t["task"], traces, repeat=3, min_repeat_ms=10, cold_inputs=cold_inputs)):
                    times[k] += m["run_times"]
            new = []
            for r, ts in zip(picked, times):
                if not ts:
                    continue
                tgt = _tdb.TargetInfo(r.target.target + (COLD if cold_inputs else ""), r.target.cpu_model,
                                      list(r.target.cpu_features), r.target.gpu_arch, r.target.kiln_version)
                new.append(_tdb.Record(workload_key=key, target=tgt, trace=r.trace, run_times=ts, run_uid=run))
            d.add_records(new)
            best_new = min(range(len(times)), key=lambda k: min(times[k]) if times[k] else float("inf"))
            row = {"workload_key": key, "ops": t["ops"], "weight": t["weight"], "before": picked[0].min_time,
                   "after": min(times[best_new]) if times[best_new] else float("nan"), "changed": best_new != 0}
            out.append(row)
            if progress:
                print(f"[remeasure] task {i} {t['ops'][:40]:40s} x{t['weight']}: best {row['before'] * 1e3:.3f} ms -> "
                      f"{row['after'] * 1e3:.3f} ms{' (another schedule wins)' if row['changed'] else ''}", flush=True)
        d.end_run(run)
    return out
