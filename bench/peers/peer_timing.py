"""Timing shared by the peer worker, in the manner of kiln's time_evaluator.

warm_up() runs the call until both a count and a duration are reached (some
peers, PyTorch among them, run their first calls of a shape much slower)
and gives the seconds per call; calls_per_repeat() turns that into the
number of back-to-back calls one measurement of about repeat_s takes;
time_calls() takes `repeats` such measurements, in seconds per call.
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


def calls_per_repeat(seconds_per_call, repeat_s):
    return max(1, int(repeat_s / seconds_per_call + 0.999))


def time_calls(run, repeats, number):
    """`repeats` measurements of `number` back-to-back calls each; seconds per call."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            run()
        times.append((time.perf_counter() - t0) / number)
    return times
