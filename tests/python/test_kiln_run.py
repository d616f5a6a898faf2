"""kiln-run end to end: an ONNX file in, the check against op-by-op plain kernels, times, groups and memory out."""
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "kiln-run")


def _env():
    import kiln._ffi as ffi
    env = dict(os.environ)
    paths = [os.path.dirname(os.path.dirname(kiln.__file__)), os.path.dirname(ffi._kiln.__file__)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    return env


def _conv_model(path, batch="N"):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def _run(*args):
    return subprocess.run([TOOL, *args], env=_env(), capture_output=True, text=True, timeout=300)


def test_kiln_run_checks_times_and_reports(tmp_path):
    path = str(tmp_path / "conv.onnx")
    _conv_model(path)
    r = _run(path, "--shape", "x=2x3x10x10", "--threads", "1", "--repeat", "3", "--profile")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "inputs: x float32[2, 3, 10, 10]" in out
    assert "check vs op-by-op plain kernels" in out and out.split("check vs op-by-op plain kernels")[1].split("\n")[0].endswith("ok")
    assert "time per run (1 threads, 3 runs)" in out
    assert "memory: arena" in out and "weights 0.00 MB" in out
    assert "kiln.ConvNCHWc+Add+Relu" in out


def test_kiln_run_errors(tmp_path):
    path = str(tmp_path / "conv.onnx")
    _conv_model(path)
    r = _run(path)  # the batch dimension is symbolic and not given: random inputs need a size
    assert r.returncode == 2
    assert "symbolic dimension 'N'" in r.stderr and "--shape x=1x3x10x10" in r.stderr
    r = _run(str(tmp_path / "missing.onnx"))
    assert r.returncode != 0 and "no such file" in r.stderr
    r = _run(path, "--shape", "x=2by3")
    assert r.returncode != 0 and "dimensions must be integers separated by" in r.stderr


def test_kiln_compile_then_kiln_run_the_library(tmp_path):
    path = str(tmp_path / "conv.onnx")
    so = str(tmp_path / "conv.so")
    _conv_model(path, batch=1)
    r = subprocess.run([os.path.join(ROOT, "tools", "kiln-compile"), path, "-o", so, "--weights", "beside"], env=_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fused groups" in r.stdout and os.path.exists(so) and os.path.exists(so + ".weights")
    r = _run(so, "--repeat", "2", "--threads", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "time per run" in r.stdout
    os.remove(so + ".weights")
    r = _run(so)
    assert r.returncode != 0 and ".weights" in (r.stdout + r.stderr)
