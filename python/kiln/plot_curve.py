#!/usr/bin/env python3
"""Plots a tuning curve: best GFLOP/s found against trials measured.

As a script (it imports nothing of kiln, so it runs from the source tree
without the extension): plot_curve.py CURVE.json   (or the JSON on stdin)

The JSON is {"title": str, "output": "curve.png", "points": [[trials, gflops], ...]}
and may carry several curves as {"title", "output", "curves": {"label": points, ...}}.
The C++ tuner (kiln-tune) runs this file with the curve of a session;
kiln.tuner.plot_curve calls write_png in-process. The PNG is written to a
temporary file and renamed into place, so it is never half written. Exit
status: 0 written, 2 bad input, 3 matplotlib missing.
"""
import json
import os
import sys
import tempfile


def write_png(curves, output, title="tuning curve"):
    """Draws {label: [(trials, gflops), ...]} into the PNG output. Raises ImportError without matplotlib."""
    import matplotlib
    matplotlib.use("Agg")  # no display: write files only
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    try:
        for label, points in curves.items():
            ax.step([p[0] for p in points], [p[1] for p in points], where="post", marker="o", markersize=3, label=label)
        ax.set_xlabel("trials measured")
        ax.set_ylabel("best GFLOP/s so far")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        if len(curves) > 1:
            ax.legend()
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
        curves = spec.get("curves") or {"best": spec["points"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"plot_curve.py: bad input ({err}); expected JSON with 'output' and 'points'")
        return 2
    try:
        write_png(curves, output, spec.get("title", "tuning curve"))
    except ImportError:
        print("plot_curve.py: matplotlib is not installed (apt-get install python3-matplotlib)")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
