"""bench/depthwise_rate_bench.py: a tiny run end to end (the triad's row,
one depthwise row per activation with its error against PyTorch), and a
malformed --shapes refused with the form it wants."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "depthwise_rate_bench.py")


def _run(*args):
    return subprocess.run([sys.executable, BENCH, *args], capture_output=True, text=True, env=dict(os.environ), timeout=300)


def test_a_small_run_prints_the_triad_and_each_conv():
    r = _run("--rounds", "1", "--repeat", "2", "--triad-kib", "256", "--shapes", "24:10:3:1:relu6,40:9:5:2:silu")
    assert r.returncode == 0, r.stderr
    triad = [line for line in r.stdout.splitlines() if line.split()[:2] == ["256", "KiB"]]
    assert len(triad) == 1 and float(triad[0].split()[2]) > 0, r.stdout
    for head in ("24@10x10 3x3/s1 relu6", "40@9x9 5x5/s2 silu"):
        row = [line for line in r.stdout.splitlines() if line.startswith(head)]
        assert len(row) == 1, r.stdout
        assert float(row[0].split()[-1]) <= 1e-4  # relative error against PyTorch


def test_a_malformed_shape_is_refused():
    r = _run("--shapes", "24:10:3:1:gelu")
    assert r.returncode != 0
    assert "is not C:HW:K:S[:relu6|silu]" in r.stderr
