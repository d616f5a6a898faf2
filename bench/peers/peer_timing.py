"""Timing shared by the peer scripts, in the manner of kiln's time_evaluator.

warm_up() runs the call until both a count and a duration are reached (some
peers, PyTorch among them, run their first calls of a shape much slower);
time_repeats() then takes `repeats` measurements of `number` back-to-back
calls each, with `number` chosen so one measurement lasts about repeat_s.
Returns seconds per call, one entry per repeat.
"""
import time


def warm_up(run, min_calls=1, min_seconds=0.0):
    """Runs `run` at least min_calls times and min_seconds; returns seconds per call."""
    t0 = time.perf_counter()
    calls = 0
    while calls < min_calls or time.perf_counter() - t0 < min_seconds:
        run()
        calls += 1
    return max((time.perf_counter() - t0) / calls, 1e-7)


def time_repeats(run, repeats, repeat_s=0.05, min_calls=1, min_seconds=0.0):
    one = warm_up(run, min_calls, min_seconds)
    number = max(1, int(repeat_s / one + 0.999))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            run()
        times.append((time.perf_counter() - t0) / number)
    return times
