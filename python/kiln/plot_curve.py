#!/usr/bin/env python3
"""Plots a tuning session: every trial, the best so far, and the peer library.

As a script (it imports nothing of kiln, so it runs from the source tree or
an installed copy without the extension): plot_curve.py CURVE.json (or the
JSON on stdin). The JSON is

  {"title": str, "output": "curve.png",
   "trials": [GFLOP/s of trial 1, trial 2, ...; null for a failed trial],
   "peer": {"name": "numpy OpenBLAS 0.3.21 Zen 2T", "gflops": 150.0}}   (optional)

or, for curves known only per batch, {"title", "output", "points": [[trials,
best GFLOP/s], ...]} (several as "curves": {"label": points}). kiln-tune
and the C++ tuner run this file; kiln.tuner.plot_curve calls write_png
in-process. The PNG is written to a temporary file and renamed into place,
so it is never half written. Exit status: 0 written, 2 bad input, 3
matplotlib missing.
"""
import json
import os
import sys
import tempfile
import textwrap


def _draw_trials(ax, trials):
    """Dots for the trials, crosses at the bottom for failures, the best so far as a step line."""
    xs = list(range(1, len(trials) + 1))
    ok = [(x, g) for x, g in zip(xs, trials) if g]
    bad = [x for x, g in zip(xs, trials) if not g]
    if ok:
        ax.plot([p[0] for p in ok], [p[1] for p in ok], "o", markersize=3, alpha=0.45, color="tab:blue", label="trial")
    if bad:
        ax.plot(bad, [0] * len(bad), "x", markersize=5, color="tab:red", clip_on=False, label=f"failed trial ({len(bad)})")
    best, run = [], 0.0
    for g in trials:
        run = max(run, g or 0.0)
        best.append(run)
    if trials:
        ax.step(xs, best, where="post", color="tab:blue", linewidth=1.8, label="best so far")
    ax.set_xlim(0.5, max(1, len(trials)) + 0.5)


def write_png(curves=None, output="curve.png", title="tuning curve", trials=None, peer=None):
    """Draws the session into the PNG `output`.

    trials: GFLOP/s per measured trial (None or 0 for a failure); curves:
    {label: [(trials, best GFLOP/s), ...]} when only batches are known;
    peer: (name, GFLOP/s) drawn as a dashed line. Raises ImportError without matplotlib.
    """
    import matplotlib
    matplotlib.use("Agg")  # no display: write files only
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
    try:
        if trials is not None:
            _draw_trials(ax, list(trials))
        for label, points in (curves or {}).items():
            ax.step([p[0] for p in points], [p[1] for p in points], where="post", marker="o", markersize=3, label=label)
        if curves and trials is None:
            ax.set_xlim(left=0)
        if peer and peer[1] > 0:
            ax.axhline(peer[1], linestyle="--", color="tab:orange", linewidth=1.5, label=f"{peer[0]}: {peer[1]:.1f} GFLOP/s")
        ax.set_xlabel("trial")
        ax.set_ylabel("GFLOP/s")
        ax.set_title("\n".join(textwrap.wrap(title, 70, break_on_hyphens=False)), fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fd, tmp = tempfile.mkstemp(suffix=".png", dir=os.path.dirname(os.path.abspath(output)))
        os.close(fd)
        try:
            fig.savefig(tmp, format="png")
            os.replace(tmp, output)
        except BaseException:
            os.unlink(tmp)
            raise
    finally:
        plt.close(fig)


def main():
    try:
        text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
        spec = json.loads(text)
        output = spec["output"]
        trials = spec.get("trials")
        curves = spec.get("curves") or ({"best": spec["points"]} if trials is None else None)
        peer = spec.get("peer")
        peer = (str(peer["name"]), float(peer["gflops"])) if peer else None
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"plot_curve.py: bad input ({err}); expected JSON with 'output' and 'trials' (or 'points')")
        return 2
    try:
        write_png(curves, output, spec.get("title", "tuning curve"), trials=trials, peer=peer)
    except ImportError:
        print("plot_curve.py: matplotlib is not installed (apt-get install python3-matplotlib)")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
