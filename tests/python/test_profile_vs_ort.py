"""bench/profile_vs_ort.py: kiln's groups and ONNX Runtime's nodes of one model, each kernel's minimum time."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
import ort_peer  # noqa: E402
import profile_vs_ort  # noqa: E402


def test_both_sides_list_their_kernels(capsys):
    pytest.importorskip("torch")
    pytest.importorskip("kiln")
    why = ort_peer.unavailable()
    if why:
        pytest.skip(f"ONNX Runtime peer unavailable: {why}")
    assert profile_vs_ort.main(["tiny_cnn", "--image-size", "32", "--runs", "2", "--top", "3", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    kiln_part, ort_part = out.split("\nONNX Runtime: ")
    assert "tiny_cnn 2x3x32x32, 1 thread(s)" in kiln_part and "kiln.ConvNCHWc" in kiln_part
    # Each side: its total, its time by kind, then its three slowest kernels.
    assert len(kiln_part.splitlines()) == 1 + 2 + 3 and len(ort_part.splitlines()) == 2 + 3, out
    assert "Conv" in ort_part.splitlines()[1]


def test_bad_arguments_are_refused():
    for bad in (["vgg"], ["tiny_cnn", "--runs", "0"]):
        with pytest.raises(SystemExit):
            profile_vs_ort.main(bad)
