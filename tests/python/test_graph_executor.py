"""The graph executor from Python: builder, compile, run, profile, memory, dumps and errors."""
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln import graph as G


def _model():
    b = G.Builder()
    x = b.input("x", (8, 32))
    y = b.input("y", (32,))
    s = b.op("Add", x, y, name="add")
    r = b.op("Relu", s, name="relu")
    m = b.op("Mul", r, b.constant("two", np.full((1,), 2.0, "float32")), name="scale")
    return b.build(m, r, names=["scaled", "relu"])


def test_compile_run_matches_numpy():
    model = _model()
    exe = kiln.compile(model)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 32)).astype("float32")
    y = rng.standard_normal(32).astype("float32")
    scaled, relu = exe(x, y)
    np.testing.assert_allclose(relu, np.maximum(x + y, 0), rtol=1e-6)
    np.testing.assert_allclose(scaled, 2 * np.maximum(x + y, 0), rtol=1e-6)
    by_name = exe.run({"x": x, "y": y})
    np.testing.assert_array_equal(by_name[0], scaled)
    # relu is a model output, so its group ends there (a value leaving the model is not inlined further).
    assert [g["ops"] for g in exe.groups()] == ["Add+Relu", "Mul"]
    assert model.output_names == ["scaled", "relu"]


def test_unfused_reference_and_memory_report():
    model = _model()
    exe = kiln.compile(model, fuse=False)
    assert len(exe.groups()) == 3
    m = exe.memory()
    # The Add's output dies at the Relu: nothing else is an intermediate (the outputs are the caller's).
    assert m["naive_bytes"] == 8 * 32 * 4
    assert m["arena_bytes"] >= m["peak_bytes"] > 0
    prof = exe.profile(np.ones((8, 32), "float32"), np.ones(32, "float32"), repeats=3)
    assert len(prof) == 3 and abs(sum(r["share"] for r in prof) - 1) < 1e-6


def test_errors_name_the_problem():
    exe = kiln.compile(_model())
    with pytest.raises(kiln.KilnError, match=r"input 'x' has shape \[8, 31\]; the model was compiled for \[8, 32\]"):
        exe(np.ones((8, 31), "float32"), np.ones(32, "float32"))
    with pytest.raises(kiln.KilnError, match="input 'x' has dtype float64; the model expects float32"):
        exe(np.ones((8, 32)), np.ones(32, "float32"))
    with pytest.raises(kiln.KilnError, match=r"missing \['y'\]"):
        exe.run({"x": np.ones((8, 32), "float32")})
    with pytest.raises(kiln.KilnError, match="takes a kiln.graph.Graph"):
        kiln.compile("model.onnx")
    with pytest.raises(kiln.KilnError, match="unknown operator 'Nope'"):
        G.Builder().op("Nope", G.make_input("a", (2,)))


def test_dump_ir_prints_every_pass():
    code = ("import numpy as np, kiln\nfrom kiln import graph as G\nb = G.Builder()\nx = b.input('x', (4,))\n"
            "kiln.compile(b.build(b.op('Relu', b.op('Relu', x))))\n")
    env = dict(os.environ, KILN_DUMP_IR="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for p in ["remove_identity", "fold_transposes", "fold_constants", "fold_batch_norm", "eliminate_common_subexpr", "fuse_ops"]:
        assert f"// after {p}" in r.stderr
    assert 'kiln.fused(%x) {ops="Relu+Relu"}' in r.stderr


def test_inputs_from_torch_and_dlpack():
    torch = pytest.importorskip("torch")
    exe = kiln.compile(_model())
    x = torch.randn(8, 32)
    y = torch.randn(32)
    scaled, _ = exe(x, y)
    np.testing.assert_allclose(scaled, 2 * np.maximum((x + y).numpy(), 0), rtol=1e-6)
    xk = kiln.nd.array(x.numpy())
    scaled2, _ = exe(xk, y.numpy())  # a kiln array
    np.testing.assert_array_equal(scaled, scaled2)
