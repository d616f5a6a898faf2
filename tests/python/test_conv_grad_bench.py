"""bench/conv_grad_bench.py: one small shape end to end (a row per gradient
and the forward), and a malformed --shapes refused with the form it wants."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "conv_grad_bench.py")


def _run(*args):
    return subprocess.run([sys.executable, BENCH, *args], capture_output=True, text=True, env=dict(os.environ), timeout=300)


def test_one_shape_prints_its_rows():
    r = _run("--rounds", "1", "--repeat", "1", "--batch", "2", "--cpu-time", "--shapes", "16:32:8:3:2")
    assert r.returncode == 0, r.stderr
    rows = [line.split()[0] for line in r.stdout.splitlines() if "16->32 8x8 3x3/s2" in line]
    assert rows == ["fwd", "input", "weight"], r.stdout


def test_a_malformed_shape_is_refused():
    r = _run("--shapes", "16:32:8")
    assert r.returncode != 0
    assert "is not C:K:HW:R:S" in r.stderr
