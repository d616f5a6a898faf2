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

from .._ffi import KilnError, _kiln
from ..graph.shape_options import parse_dims, parse_sizes


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


def extract_tasks(model, target="llvm", db=None, layout=True, sizes=None, dims=None):
    """The model's tuning tasks: a list of dicts (workload_key, ops, flop, weight, groups, records, best_time) and a printable table.
    A model with symbolic dimensions: the tasks of the model at each combination of `sizes` (shape variable ->
    likely sizes, most likely first; a variable without any at 128 clamped into its `dims` range)."""
    tasks, table = _kiln.tuner.extract_tasks(model, str(target), db or "", layout, parse_sizes(sizes), parse_dims(dims))
    return tasks, table


def tune_model(model, target="llvm", trials=1000, db="kiln_tuning.db", time_budget=None, batch=16, early_stop_rounds=3,
               progress=True, seed=0, layout=True, cold_inputs=True, confirm_top=4, confirm_rounds=3, gpu_simulate=False,
               sizes=None, dims=None, graph_share=0.25, graph_candidate_trials=10, gate_records=True,
               fastest_call=False):
    """Tunes every task of `model` into `db`; returns a dict with the tasks, the table, trials, rounds, elapsed_s, estimated_latency (s) and failures (tasks stopped by an error, with its message).

    graph_share: the share of `trials` the graph-level search may spend (``search_graph_plan``: each
    convolution's channel block and Winograd form, and each depthwise conv fused with the 1x1 conv after
    it or not, measured on the whole model), each candidate plan
    counting `graph_candidate_trials` trials; the loop schedules are tuned first on the rest, and what the
    search leaves unspent goes back to them. The winner is stored in `db` and ``kiln.compile(db=)`` takes
    it. The result's "graph" says what the search did, "graph_trials" what it was charged. 0: loops only.

    On CPU targets each task's default schedule (what compile takes without a record) is measured first
    (each task's "default_time", s): rounds go where the search can beat it, and the estimated latency
    counts the faster of a task's best record and its default. A task whose default is a hand schedule
    the search space cannot express ("hand_default": a fused depthwise + pointwise pair, AMX tiles) gets
    no warm-up round, and one round that does not beat its default ends it.
    cold_inputs: time each candidate with every input but the first evicted from the caches, as a layer's
    weights are inside a model run (records kept apart from warm ones; compile prefers them).
    confirm_top, confirm_rounds: after the search, each task's best few schedules and its default schedule
    are measured again side by side in that many rounds (not counted in `trials`; 0 skips it): the
    fastest of thousands of single measurements is partly the luckiest one (see ``remeasure``).
    gate_records: at the end (with confirmation on), each record is judged inside the model: the model
    with its records and the model with the default schedules are profiled round by round, and a record
    stays only where its groups run faster than with the default by 2%; the others go back to their default
    schedules, and the kept ones too where the whole model with them is slower (kiln/tuner/records_gate.h).
    The result's "gate" says what it measured: the whole model's ratio with all records, per record
    ("records": record_time, default_time, ratio, kept), and the ratio with the records kept; then the
    tuned model against the untuned one, whose plan is stored where the graph search's loses (plan_ratio,
    plan_reverted).
    fastest_call: with cold_inputs, a measurement's time is its fastest call rather than the mean of its
    calls (kiln/tuner/measure.h: on a loaded machine the mean penalizes kernels on several threads).
    A cuda target tunes the groups ``kiln.compile(model, target="cuda ...")`` builds, on the GPU
    (``gpu_simulate=True``: in the GPU simulator, records kept apart; see ``kiln.tune``).
    A model with symbolic dimensions is tuned at the sizes calls will most likely have: ``sizes=`` maps
    each shape variable to a list of them, most likely first (``{"seq": [128, 32, 384]}``), every
    combination tuned; compile the model with the same ``sizes=`` (and ``db=``) to take the records."""
    if not db:
        raise KilnError("tune_model needs a tuning database (db=...) to keep its records")
    result = _kiln.tuner.tune_model(model, str(target), db, int(trials), int(batch), _seconds(time_budget),
                                    int(early_stop_rounds), bool(progress), int(seed), layout, bool(cold_inputs),
                                    int(confirm_top), int(confirm_rounds), bool(gpu_simulate), parse_sizes(sizes), parse_dims(dims),
                                    float(graph_share), int(graph_candidate_trials), bool(gate_records),
                                    bool(fastest_call))
    for failure in result["failures"]:
        warnings.warn("tune_model: a task was not tuned further after an error (please report it): " + failure)
    return result


def search_graph_plan(model, target="llvm", db="kiln_tuning.db", max_candidates=16, time_budget=None, rounds=5, min_gain=0.02,
                      progress=True, seed=0):
    """The graph-level search alone (kiln/tuner/graph_search.h): from the plan ``kiln.compile(db=)`` would take,
    moves over each convolution's channel-block cap and Winograd form and over each depthwise conv's fusion
    with the 1x1 conv after it, each candidate compiled as the whole model with `db`'s loop schedules,
    checked against the incumbent's output and timed against it in interleaved rounds; a move at least
    `min_gain` faster in each of two sets of `rounds` rounds (the larger of the median per-round ratio and
    the ratio of the fastest rounds) is taken. Every outcome and the
    winner go into `db` (a second call re-uses the outcomes instead of measuring them again), and
    ``kiln.compile(model, db=db)`` then compiles with the winner. Returns a dict: model_key, plan (JSON),
    start (the plan it started from), time and start_time (s), measured, reused, taken, moves, log, skipped
    (why no search ran: no convolutions, symbolic dims, a GPU target)."""
    if not db:
        raise KilnError("search_graph_plan needs a tuning database (db=...) to keep its outcomes")
    return _kiln.tuner.search_graph_plan(model, str(target), db, int(max_candidates), _seconds(time_budget), int(rounds),
                                         float(min_gain), bool(progress), int(seed))


def model_key(model):
    """The key a model's tuned graph plan is stored under in a tuning database (a hash of its structure and names, not its weights)."""
    return _kiln.tuner.model_key(model)


def remeasure(model, db, target="llvm", top=8, rounds=3, cold_inputs=True, progress=True):
    """Confirms the best records of every task of `model` already in `db` (kiln/tuner/confirm.h): the
    `top` best schedules (by min time) and the task's default schedule measured again side by side in
    `rounds` interleaved rounds (cold inputs by default), their timings stored as records of their own,
    which compile then ranks. For records taken on a loaded machine, or before cold-input timing
    existed. Returns one dict per task with records: workload_key, ops, weight, contenders, before
    (the old best min time, s), after (the winner's median, s), changed, default_won."""
    tasks, _ = extract_tasks(model, target, db)
    out = []
    for i, t in enumerate(tasks):
        if not t["records"]:
            continue
        row = dict(_kiln.tuner.confirm_best(t["task"], db, int(top), int(rounds), bool(cold_inputs)))
        if not row["contenders"]:
            continue
        row.update(workload_key=t["workload_key"], ops=t["ops"], weight=t["weight"])
        out.append(row)
        if progress:
            print(f"[remeasure] task {i} {t['ops'][:40]:40s} x{t['weight']}: best {row['before'] * 1e3:.3f} ms -> "
                  f"{row['after'] * 1e3:.3f} ms" + (" (the default schedule wins)" if row["default_won"] else
                                                   " (another schedule wins)" if row["changed"] else ""), flush=True)
    return out
