"""Schedules of one computation by hand: time given schedules as the tuner does (measure), read
and edit the schedule it gets without tuning (default_decisions, candidate_trace), and replay the
best one a database recorded (best_schedule)."""
from .._ffi import _kiln
from ..driver import best_record
from .session import make_task


def measure(args, traces, target="llvm", repeat=3, min_repeat_ms=20.0, number=1, timeout=10.0, cold_inputs=False):
    """Measures schedules of a computation as a tuning session does, without recording them.

    ``traces`` are schedule traces (JSON text, as records and ``Schedule.trace()``
    give them). Each is built and timed in its own worker process; the result is
    one dict per trace: ``run_times`` (seconds per call, one per repeat),
    ``error`` ("none", "build_error", "run_error", "timeout") and ``error_msg``.
    With ``cold_inputs`` every input but the first is evicted from the caches
    before each call, as a layer's weights are inside a model run (the first
    input, the activation just written, stays warm). Nothing is recorded.
    """
    task = make_task(args, target)
    traces = [t if isinstance(t, str) else t.to_json() for t in traces]
    options = dict(repeat=int(repeat), min_repeat_ms=float(min_repeat_ms), number=int(number), timeout_s=float(timeout),
                   cold_inputs=bool(cold_inputs))
    return _kiln.tuner.measure(task, traces, options)


def default_decisions(args, target="llvm"):
    """The decisions of the schedule a computation gets without tuning, as the tuner logs a candidate and a
    compiled group's ``schedule_detail`` ends: ``"sketch 0: conv.y=7x1x1x2 ... conv.unroll=1"``. Edit it and
    pass it to candidate_trace to time a variant by hand (with measure)."""
    return _kiln.tuner.default_description(make_task(args, target))


def candidate_trace(args, decisions, target="llvm"):
    """The schedule trace (JSON) of a candidate written as default_decisions writes it. Slots the text leaves
    out keep the default's decisions, and a slot named twice takes its last value, so
    ``default_decisions(args) + " conv.unroll=0"`` is the default with one decision changed. Raises KilnError
    naming a slot that is unknown, malformed or invalid."""
    return _kiln.tuner.candidate_trace(make_task(args, target), str(decisions))


def best_schedule(args, target="llvm", db="kiln_tuning.db"):
    """The best recorded schedule of a computation (replayed on its tensors), or None."""
    found = best_record(make_task(args, target), db)
    return found[0] if found else None
