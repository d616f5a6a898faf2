"""bench/conv_channels_bench.py: one small shape end to end (its row and error
column), and a malformed --shapes refused with the form it wants."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "conv_channels_bench.py")


def _run(*args):
    return subprocess.run([sys.executable, BENCH, *args], capture_output=True, text=True, env=dict(os.environ), timeout=300)


def test_one_shape_prints_its_row():
    r = _run("--rounds", "1", "--repeat", "2", "--shapes", "58:58:8:1:1")
    assert r.returncode == 0, r.stderr
    row = [line for line in r.stdout.splitlines() if line.startswith("58->58 8x8 1x1/s1")]
    assert len(row) == 1, r.stdout
    assert float(row[0].split()[-1]) <= 1e-4  # relative error against PyTorch


def test_a_malformed_shape_is_refused():
    r = _run("--shapes", "58:58:8")
    assert r.returncode != 0
    assert "is not C:K:HW:R:S" in r.stderr


def test_a_padding_field_sets_the_output_side():
    """C:K:HW:R:S:P (conv_awkward_width_bench.py's unpadded stem): the row names the padding and the output side."""
    r = _run("--rounds", "1", "--repeat", "2", "--shapes", "3:32:21:7:2:0")
    assert r.returncode == 0, r.stderr
    row = [line for line in r.stdout.splitlines() if line.startswith("3->32 21x21 7x7/s2/p0 ->8")]
    assert len(row) == 1, r.stdout
    assert float(row[0].split()[-1]) <= 1e-4
