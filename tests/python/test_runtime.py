"""Calling compiled modules: numpy, kiln arrays and torch tensors (DLPack),
zero copy, timing, and every argument error (which must raise, not crash)."""
import threading

import numpy as np
import pytest

import kiln
from kiln import te
from kiln_helpers import rand


@pytest.fixture(scope="module")
def vadd():
    """C = A + 2 * B on (8, 16) float32, built once for the module."""
    A = te.placeholder((8, 16), name="A")
    B = te.placeholder((8, 16), name="B")
    C = te.compute((8, 16), lambda i, j: A[i, j] + 2.0 * B[i, j], name="C")
    s = te.create_schedule(C)
    s[C].vectorize(C.op.axis[1])
    return kiln.build(s, [A, B, C])


def inputs(rng):
    return rand(rng, 8, 16), rand(rng, 8, 16)


def test_call_writes_into_callers_array(vadd, rng):
    a, b = inputs(rng)
    c = np.zeros((8, 16), "float32")
    address = c.ctypes.data
    assert vadd(a, b, c) is None
    assert c.ctypes.data == address
    np.testing.assert_allclose(c, a + 2 * b, rtol=1e-6)


def test_zero_copy_into_a_view(vadd, rng):
    # A C-contiguous view into a bigger array: the result must land in the
    # bigger array's memory, which is only possible without a copy.
    a, b = inputs(rng)
    big = np.full((12, 16), -7.0, "float32")
    view = big[2:10]
    assert view.flags.c_contiguous and not view.flags.owndata
    vadd(a, b, view)
    np.testing.assert_allclose(big[2:10], a + 2 * b, rtol=1e-6)
    assert (big[:2] == -7).all() and (big[10:] == -7).all()
    # inputs are read in place too: change one through a view and recompute
    a_big = np.zeros((9, 16), "float32")
    a_big[1:] = a
    vadd(a_big[1:], b, view)
    np.testing.assert_allclose(big[2:10], a + 2 * b, rtol=1e-6)


def test_kiln_arrays(vadd, rng):
    a, b = inputs(rng)
    ka, kb = kiln.nd.array(a), kiln.nd.array(b)
    kc = kiln.nd.empty((8, 16), "float32")
    assert ka.shape == (8, 16) and ka.dtype == "float32" and kc.ndim == 2
    vadd(ka, kb, kc)
    np.testing.assert_allclose(kc.numpy(), a + 2 * b, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kc), a + 2 * b, rtol=1e-6)
    # numpy() is a copy; array() too
    out = kc.numpy()
    out[0, 0] = 1e9
    assert kc.numpy()[0, 0] != 1e9
    a[0, 0] = 123.0
    assert ka.numpy()[0, 0] != 123.0
    kd = kiln.nd.array(kc)
    assert not kd.same_memory(kc)
    kd.copyfrom(np.ones((8, 16), "float32"))
    assert (kd.numpy() == 1).all()
    with pytest.raises(kiln.KilnError, match="shape"):
        kd.copyfrom(np.ones((2, 2), "float32"))
    assert "NDArray" in repr(kd)


def test_kiln_array_dtypes():
    for dtype in ["float32", "float64", "int8", "int32", "int64", "uint8", "bool", "float16"]:
        x = (np.arange(12).reshape(3, 4) % 2).astype(dtype)
        k = kiln.nd.array(x)
        assert k.dtype == dtype
        np.testing.assert_array_equal(k.numpy(), x)
    with pytest.raises(kiln.KilnError):
        kiln.nd.array(np.zeros(3, "complex64"))
    with pytest.raises(kiln.KilnError):
        kiln.nd.empty((2, -1))
    with pytest.raises(kiln.KilnError):
        kiln.nd.empty((2,), "float33")
    # non-contiguous sources are copied into a compact array
    x = np.arange(20, dtype="float32").reshape(4, 5)[:, ::2]
    np.testing.assert_array_equal(kiln.nd.array(x).numpy(), x)


def test_torch_tensors_through_dlpack(vadd, rng):
    torch = pytest.importorskip("torch")
    a, b = inputs(rng)
    ta, tb = torch.from_numpy(a.copy()), torch.from_numpy(b.copy())
    tc = torch.zeros(8, 16)
    address = tc.data_ptr()
    vadd(ta, tb, tc)
    assert tc.data_ptr() == address
    np.testing.assert_allclose(tc.numpy(), a + 2 * b, rtol=1e-6)
    # torch -> kiln (zero copy) and kiln -> torch (zero copy)
    kc = kiln.nd.from_dlpack(tc)
    assert kc.data_ptr == tc.data_ptr()
    kout = kiln.nd.empty((8, 16))
    vadd(ta, tb, kout)
    tout = torch.utils.dlpack.from_dlpack(kout.to_dlpack())
    assert tout.data_ptr() == kout.data_ptr
    np.testing.assert_allclose(tout.numpy(), a + 2 * b, rtol=1e-6)
    tout2 = torch.utils.dlpack.from_dlpack(kout)  # via __dlpack__
    assert tout2.data_ptr() == kout.data_ptr
    # capsules are accepted once
    cap = torch.utils.dlpack.to_dlpack(torch.zeros(8, 16))
    vadd(ta, tb, cap)
    with pytest.raises(kiln.KilnError, match="consumed"):
        vadd(ta, tb, cap)


def test_torch_errors(vadd, rng):
    torch = pytest.importorskip("torch")
    a, b = inputs(rng)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    with pytest.raises(kiln.KilnError, match="not contiguous"):
        vadd(ta, tb, torch.zeros(16, 8).t())
    with pytest.raises(kiln.KilnError, match="dtype"):
        vadd(ta, tb, torch.zeros(8, 16, dtype=torch.float64))
    with pytest.raises(kiln.KilnError, match="shape"):
        vadd(ta, tb, torch.zeros(8, 15))


def test_argument_errors(vadd, rng):
    a, b = inputs(rng)
    c = np.zeros((8, 16), "float32")
    with pytest.raises(kiln.KilnError, match="expected 3 arguments"):
        vadd(a, b)
    with pytest.raises(kiln.KilnError, match="expected 3 arguments"):
        vadd(a, b, c, c)
    with pytest.raises(kiln.KilnError, match="argument 1 'B'|argument 1 \\(B\\)|B"):
        vadd(a, None, c)
    with pytest.raises(kiln.KilnError, match="shape"):
        vadd(a, b, np.zeros((8, 15), "float32"))
    with pytest.raises(kiln.KilnError, match="rank"):
        vadd(a, b, np.zeros(128, "float32"))
    with pytest.raises(kiln.KilnError, match="dtype"):
        vadd(a, b, np.zeros((8, 16), "float64"))
    with pytest.raises(kiln.KilnError, match="dtype"):
        vadd(a.astype("int32"), b, c)
    with pytest.raises(kiln.KilnError, match="contiguous"):
        vadd(np.zeros((8, 32), "float32")[:, ::2], b, c)
    with pytest.raises(kiln.KilnError, match="contiguous"):
        vadd(np.asfortranarray(a), b, c)
    with pytest.raises(kiln.KilnError, match="list"):
        vadd(a.tolist(), b, c)
    with pytest.raises(kiln.KilnError, match="str"):
        vadd("a", b, c)
    with pytest.raises(kiln.KilnError, match="tensor"):
        vadd(3, b, c)
    readonly = np.zeros((8, 16), "float32")
    readonly.flags.writeable = False
    with pytest.raises(kiln.KilnError, match="read-only"):
        vadd(a, b, readonly)
    vadd(readonly, b, c)  # read-only inputs are fine
    raw = np.zeros(8 * 16 * 4 + 1, "uint8")[1:].view("float32").reshape(8, 16)
    assert not raw.flags.aligned
    with pytest.raises(kiln.KilnError, match="aligned"):
        vadd(raw, b, c)
    swapped = a.astype(">f4")
    with pytest.raises(kiln.KilnError, match="dtype"):
        vadd(swapped, b, c)
    # the module still works after all that
    vadd(a, b, c)
    np.testing.assert_allclose(c, a + 2 * b, rtol=1e-6)


# Shape variables follow the buffers as int32 parameters; a bad scalar for
# one is a KilnError, not a crash (test_symbolic_shapes.py checks the values).
def test_scalar_argument_errors(rng):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    mod = kiln.build(te.create_schedule(B), [A, B])
    a = rand(rng, 4)
    b = np.zeros(4, "float32")
    mod(a, b, 4)
    mod(a, b, np.int64(4))
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)
    with pytest.raises(kiln.KilnError):
        mod(a, b, 2 ** 40)  # does not fit int32
    with pytest.raises(kiln.KilnError):
        mod(a, b, 2 ** 70)
    with pytest.raises(kiln.KilnError):
        mod(a, b, 1.5)
    with pytest.raises(kiln.KilnError):
        mod(a, b, a)
    assert [p["kind"] for p in mod.params()] == ["buffer", "buffer", "scalar"]


def test_time_evaluator(vadd, rng):
    a, b = inputs(rng)
    c = np.zeros((8, 16), "float32")
    r = vadd.time_evaluator("main", number=5, repeat=3)(a, b, c)
    assert len(r.results) == 3 and r.number >= 5
    assert 0 < r.min <= r.median <= r.max and r.mean > 0
    np.testing.assert_allclose(c, a + 2 * b, rtol=1e-6)
    r = vadd.time_evaluator(number=1, repeat=1, min_repeat_ms=5)(a, b, c)
    assert r.number > 1 and r.results[0] * r.number >= 4e-3
    r = vadd.time_evaluator("main", kiln.cpu(0), number=2)(a, b, c)
    assert "TimeResult" in repr(r)
    with pytest.raises(kiln.KilnError, match="no kernel"):
        vadd.time_evaluator("nope")
    with pytest.raises(kiln.KilnError, match="number"):
        vadd.time_evaluator(number=0)(a, b, c)
    with pytest.raises(kiln.KilnError, match="expected 3"):
        vadd.time_evaluator()(a, b)


def test_get_function_and_names(vadd, rng):
    a, b = inputs(rng)
    c = np.zeros((8, 16), "float32")
    assert vadd.names == ["main"] and vadd.entry_name == "main"
    vadd["main"](a, b, c)
    np.testing.assert_allclose(c, a + 2 * b, rtol=1e-6)
    with pytest.raises(kiln.KilnError, match="no kernel"):
        vadd.get_function("other")
    with pytest.raises(kiln.KilnError, match="read-only"):
        ro = np.zeros((8, 16), "float32")
        ro.flags.writeable = False
        vadd.get_function("main")(a, b, ro)
    p = vadd.params()
    assert [x["name"] for x in p] == ["A", "B", "C"] and p[0]["shape"] == [8, 16]


def test_named_kernel(rng):
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 3.0, name="B")
    mod = kiln.build(te.create_schedule(B), [A, B], target=kiln.Target("llvm"), name="triple")
    a = rand(rng, 4)
    b = np.zeros(4, "float32")
    mod(a, b)
    mod["triple"](a, b)
    np.testing.assert_allclose(b, 3 * a, rtol=1e-6)
    assert mod.names == ["triple"]


def test_calls_from_threads(vadd, rng):
    # The GIL is released while a kernel runs; concurrent calls on separate outputs are safe.
    a, b = inputs(rng)
    outs = [np.zeros((8, 16), "float32") for _ in range(4)]
    threads = [threading.Thread(target=lambda o=o: [vadd(a, b, o) for _ in range(50)]) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in outs:
        np.testing.assert_allclose(o, a + 2 * b, rtol=1e-6)


def test_parallel_kernel_runs_in_python(rng):
    # Parallel loops call kiln_parallel_launch from libkiln_runtime: the
    # extension must make the runtime's symbols visible to the JIT.
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * A[i, j], name="B")
    s = te.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    a = rand(rng, 64, 64)
    b = np.zeros((64, 64), "float32")
    kiln.build(s, [A, B])(a, b)
    np.testing.assert_allclose(b, a * a, rtol=1e-6)


def test_empty_arrays_run_a_symbolic_kernel():
    # An empty tensor is valid: a kernel over n rows runs with n = 0 (numpy gives the empty
    # array stride 0 on its inner axes, which once made it "not contiguous").
    n = te.var("n")
    A = te.placeholder((n, 4), name="A")
    B = te.compute((n, 4), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B)
    s[B].vectorize(B.op.axis[1])
    f = kiln.build(s, [A, B])
    for rows in (0, 3):
        a, b = np.arange(rows * 4, dtype="float32").reshape(rows, 4), np.zeros((rows, 4), "float32")
        f(a, b)
        np.testing.assert_array_equal(b, a + 1)
    f(kiln.nd.empty((0, 4), "float32"), kiln.nd.empty((0, 4), "float32"))
