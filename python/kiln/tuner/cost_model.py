"""The tuner's cost model judged on a database: how well it ranks each task's candidates
(ranking_report), after re-extracting old records' features (migrate_features)."""
import os

from .._ffi import KilnError, _kiln


def migrate_features(db, task):
    """Re-extracts, with this kiln's feature extractor, the cost-model features of `task`'s records in `db`
    that an earlier extractor made (each record's schedule is replayed on the task); returns how many were
    migrated. Tuning does this on its own for the task it tunes; call it before a ranking_report of an old
    database so the report judges the features the tuner now uses."""
    if not os.path.exists(db):
        raise KilnError(f"migrate_features: no tuning database at {db!r}")
    return _kiln.tuner.migrate_features(os.fspath(db), task)


def ranking_report(db, workloads=None, holdout=0.25, tie=0.01, seed=0, cross=True, min_records=8, folds=1):
    """How well the cost model ranks the candidates of each task in `db` (pairwise accuracy: the share of
    pairs of one task, apart by more than `tie` in time, that it orders as they measured).

    ``within``: a model trained on every task's records but a held-back share (`holdout`), scored on the
    held-back ones (with ``folds`` > 1, k-fold: each record held back once by one of k models, a task's
    pairs pooled over its folds, `holdout` unused); ``cross``: per task, a model trained on the other tasks
    only, scored on all of its records (-1 where there is no pair or it was not run). Returns
    ``{"tasks": [...], "within_mean", "cross_mean", "within_pooled", "cross_pooled"}`` (means: each task
    once; pooled: over all pairs, a task weighing by its pairs); `workloads` limits the tasks reported
    (workload keys)."""
    if not os.path.exists(db):
        raise KilnError(f"ranking_report: no tuning database at {db!r}")
    return _kiln.tuner.ranking_report(os.fspath(db), list(workloads or []), float(holdout), float(tie), int(seed), bool(cross),
                                      int(min_records), int(folds))
