"""The auto-scheduler: search schedules for a computation on this machine.

::

    import kiln
    from kiln import te

    A = te.placeholder((512, 512), name="A")
    B = te.placeholder((512, 512), name="B")
    C = kiln.ops.matmul(A, B)
    result = kiln.tune([A, B, C], trials=64, db="kiln_tuning.db", curve_png="curve.png")
    print(result)                       # best time, GFLOP/s, speed-up, where it is stored
    mod = kiln.build(C, [A, B, C], db="kiln_tuning.db")   # applies the best record

A session measures each candidate in a worker process with a time limit (a
crash or a hang costs one trial), stores every measurement in the tuning
database (an SQLite file), never measures a schedule the database already
has, and learns a cost model from all records of the database. Progress is
shown on stderr. Every error is a :class:`kiln.KilnError`.
"""
from .session import Task, TuneResult, make_task, tune, plot_curve
from .schedules import measure, default_decisions, candidate_trace, best_schedule
from .cost_model import migrate_features, ranking_report
from .model_tuning import tune_model, extract_tasks, remeasure, search_graph_plan, model_key

__all__ = ["tune", "make_task", "measure", "best_schedule", "default_decisions", "candidate_trace", "plot_curve", "Task",
           "TuneResult", "migrate_features", "ranking_report", "tune_model", "extract_tasks", "remeasure",
           "search_graph_plan", "model_key"]
