#!/usr/bin/env python3
"""Plots a tuning curve: best GFLOP/s found against trials measured.

Usage: plot_curve.py CURVE.json   (or the JSON on stdin)

The JSON is {"title": str, "output": "curve.png", "points": [[trials, gflops], ...]}
and may carry several curves as {"title", "output", "curves": {"label": points, ...}}.
kiln-tune and the tuner call this with the curve of a session. The PNG is
written to a temporary file and renamed into place, so it is never half
written. Exit status: 0 written, 2 bad input, 3 matplotlib missing.
"""
import json
import os
import sys
import tempfile


def main():
    try:
        text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
        spec = json.loads(text)
        output = spec["output"]
        curves = spec.get("curves") or {"best": spec["points"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"plot_curve.py: bad input ({err}); expected JSON with 'output' and 'points'")
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display: write files only
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_curve.py: matplotlib is not installed (apt-get install python3-matplotlib)")
        return 3
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, points in curves.items():
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        ax.step(xs, ys, where="post", marker="o", markersize=3, label=label)
    ax.set_xlabel("trials measured")
    ax.set_ylabel("best GFLOP/s so far")
    ax.set_title(spec.get("title", "tuning curve"))
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=0)
    if len(curves) > 1:
        ax.legend()
    fig.tight_layout()
    directory = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=directory)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, output)
    except BaseException:
        os.unlink(tmp)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
