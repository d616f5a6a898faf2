"""The peer launcher (bench/peers): clean environment, the JSON-lines
protocol, failures reported (never a hang or a crash of the caller), the
interleaved summary, the BLAS core-type choice, and bench/scoreboard's
merge of the benches' JSON rows."""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = os.path.join(ROOT, "bench", "peers")
sys.path.insert(0, PEERS)
import blas_choice  # noqa: E402
import launcher  # noqa: E402


def test_clean_env_drops_kilns_settings_and_sets_threads():
    base = {"OMP_WAIT_POLICY": "passive", "KILN_NUM_THREADS": "7", "KILN_DEBUG": "1", "OPENBLAS_CORETYPE": "Prescott",
            "OMP_NUM_THREADS": "9", "PATH": "/usr/bin", "HOME": "/tmp"}
    env = launcher.clean_env(3, base, blas={"coretype": "SkylakeX", "l2": None})
    assert not any(k.startswith("KILN_") for k in env) and "OMP_WAIT_POLICY" not in env
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "3"
    assert env["OPENBLAS_CORETYPE"] == "SkylakeX" and env["PATH"] == "/usr/bin"
    assert "OPENBLAS_CORETYPE" not in launcher.clean_env(1, base, blas={"coretype": None})


def test_peer_protocol_in_a_clean_environment(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    monkeypatch.setenv("KILN_SOMETHING", "1")
    with launcher.Peer("softmax", "numpy", [8, 32], 1) as p:
        assert p.label.startswith("numpy")
        assert p.check_error is not None and p.check_error < 1e-5  # against the float64 softmax
        assert "OMP_WAIT_POLICY" not in p.env and not any(k.startswith("KILN_") for k in p.env)
        assert p.env["OMP_NUM_THREADS"] == "1"
        times = p.time(3, 1)
        assert len(times) == 3 and all(0 < t < 1 for t in times)


def test_peer_failure_is_reported_not_fatal():
    with pytest.raises(launcher.PeerError, match="unknown peer workload 'nope'"):
        launcher.Peer("nope", "numpy", [1], 1)
    with pytest.raises(launcher.PeerError, match="expected 3"):
        launcher.Peer("gemm", "numpy", [4, 4], 1)


def test_summarize_takes_the_fastest_peer_and_per_round_ratios():
    kiln = [2.0, 3.0, 2.0, 4.0, 2.0]
    s = launcher.summarize(kiln, {"slow": [9.0] * 5, "fast": [1.0, 2.0, 1.0, 2.0, 4.0]})
    assert s["peer"] == "fast"
    ratios = [2.0, 1.5, 2.0, 2.0, 0.5]
    assert s["ratio_median"] == np.median(ratios) and s["ratio_min"] == 0.5 and s["ratio_max"] == 2.0
    assert s["kiln_min"] == 2.0 and s["kiln_median"] == 2.0 and s["peer_median"] == 2.0 and s["rounds"] == 5


def test_host_level_and_core_types():
    assert blas_choice.host_level({"avx", "avx2", "fma"}) == 2
    assert blas_choice.host_level({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}) == 3
    assert blas_choice.CORE_LEVEL["prescott"] < blas_choice.CORE_LEVEL["haswell"] < blas_choice.CORE_LEVEL["skylakex"]


def test_blas_choice_probes_checks_and_caches(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    proc = subprocess.run([sys.executable, os.path.join(PEERS, "blas_choice.py"), "choose", "1", "--force"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    choice = json.loads(proc.stdout)
    _, flags = blas_choice.cpu_info()
    by_type = {c["coretype"]: c for c in choice["candidates"]}
    assert by_type[None]["ok"]  # the automatic choice works everywhere
    for name, needs in blas_choice.CANDIDATES:
        if not needs <= flags:
            assert not by_type[name]["ok"] and "skipped" in by_type[name]["why"]
        else:
            assert by_type[name]["ok"] and by_type[name]["error"] < 1e-3
    assert choice["coretype"] in by_type and by_type[choice["coretype"]]["ok"]
    cache = json.loads((tmp_path / "kiln" / "openblas_coretype.json").read_text())
    assert list(cache.values())[0]["coretype"] == choice["coretype"]


def load_scoreboard():
    loader = importlib.machinery.SourceFileLoader("scoreboard", os.path.join(ROOT, "bench", "scoreboard"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("scoreboard", loader))
    loader.exec_module(module)
    return module


def test_scoreboard_merges_rows_and_prints_one_table(tmp_path):
    sb = load_scoreboard()
    a = {"rows": [{"name": "hand GEMM 1024x1024x1024", "threads": 1, "unit": "ms", "kiln_min": 10.0, "kiln_median": 11.0,
                   "peer": "numpy OpenBLAS 0.3.21 SkylakeX 1T", "peer_min": 9.0, "peer_median": 10.0, "ratio_median": 1.1,
                   "ratio_min": 1.0, "ratio_max": 1.3, "goal": "", "note": ""}]}
    b = {"rows": [{"name": "tuning DB insert rate", "threads": 1, "unit": "records/s", "kiln_min": 40000.0,
                   "kiln_median": 50000.0, "peer": None, "goal": "-"}]}
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    rows = sb.load_rows([str(tmp_path / "a.json"), str(tmp_path / "missing.json"), str(tmp_path / "b.json")])
    assert [r["name"] for r in rows] == ["hand GEMM 1024x1024x1024", "tuning DB insert rate"]
    text = sb.format_table(["header"], rows)
    assert "1.10 (1.00..1.30)" in text and "SkylakeX 1T" in text and "50,000/s" in text and text.startswith("header")
