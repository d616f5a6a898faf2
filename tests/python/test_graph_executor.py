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


def test_donated_inputs_are_updated_in_place():
    """An output computed element by element from an input that no later group reads goes into the
    donated input's array: the run returns that very array, with the values a fresh run computes."""
    b = G.Builder()
    w, u, x = b.input("w", (8, 16)), b.input("u", (8, 16)), b.input("x", (4, 8))
    y = b.op("MatMul", x, w)                                  # reads w whole, before the update
    g = b.op("MatMul", b.op("Transpose", x, perm=[1, 0]), y)  # [8, 16]
    w_new = b.op("Sub", w, b.op("Mul", g, u))                 # reads w (and u) only where it writes
    exe = kiln.compile(b.build(w_new, y, u))                  # u is returned as is: never written over
    rng = np.random.default_rng(0)
    wv, uv, xv = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (8, 16), (4, 8)))
    yv = xv @ wv
    want = [wv - (xv.T @ yv) * uv, yv, uv]
    fresh = exe.run([wv, uv, xv])
    for got, ref in zip(fresh, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert exe.output_reuses_input == [0, -1, -1]
    w_arr, u_arr = wv.copy(), uv.copy()
    out = exe.run([w_arr, u_arr, xv], donate=[0, 1])
    assert out[0] is w_arr  # written in place
    assert out[2] is not u_arr and np.array_equal(u_arr, uv)  # a returned input stays as it was
    for got, ref in zip(out, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w_arr, want[0], rtol=1e-5, atol=1e-5)
    # A donated input that shares memory with another is refused, naming both.
    shared = np.zeros((8, 16), np.float32)
    with pytest.raises(kiln.KilnError, match="'w' is donated .* shares memory with input 'u'"):
        exe.run([shared, shared, xv], donate=[0])
    with pytest.raises(kiln.KilnError, match="donate names input 5"):
        exe.run([w_arr, u_arr, xv], donate=[5])
    # A kiln array donated, beside numpy ones: the output comes back as that kiln array, updated.
    w_nd = kiln.nd.array(wv.copy())
    out = exe.run([w_nd, uv.copy(), xv], donate=[0])
    assert out[0] is w_nd
    np.testing.assert_allclose(w_nd.numpy(), want[0], rtol=1e-5, atol=1e-5)
    frozen = w_arr.copy()
    frozen.flags.writeable = False
    with pytest.raises(kiln.KilnError, match="input 0 is donated .* read-only"):
        exe.run([frozen, u_arr, xv], donate=[0])


def test_donation_never_overwrites_an_input_a_later_group_reads():
    """w is read whole by a MatMul and element by element by a Sub that does not depend on it: whichever
    order the plan takes, the donated run computes what a fresh run does (the Sub may write over w only
    when it is w's last reader)."""
    b = G.Builder()
    w, u, x = b.input("w", (8, 16)), b.input("u", (8, 16)), b.input("x", (4, 8))
    exe = kiln.compile(b.build(b.op("Sub", w, u), b.op("MatMul", x, w)))
    rng = np.random.default_rng(1)
    wv, uv, xv = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (8, 16), (4, 8)))
    out = exe.run([wv.copy(), uv, xv], donate=[0])
    np.testing.assert_allclose(out[0], wv - uv, rtol=1e-6)
    np.testing.assert_allclose(out[1], xv @ wv, rtol=1e-5, atol=1e-5)
