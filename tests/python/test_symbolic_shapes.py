"""Symbolic shapes are checked at every call, never trusted: a shape variable
is bound from the arrays (or checked against its explicit scalar), and no call
can make a kernel read or write outside the arrays it was given."""
import numpy as np
import pytest

import kiln
from kiln import te
from kiln_helpers import rand


@pytest.fixture(scope="module")
def vadd():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    return kiln.build(te.create_schedule(C), [A, B, C])


def every_path(mod):
    """Each way to call the entry kernel: plain call, get_function, time_evaluator."""
    return [mod, mod.get_function(mod.entry_name), mod.time_evaluator(mod.entry_name, number=1)]


def test_disagreeing_scalar_is_refused_and_nothing_is_written(vadd, rng):
    # The case: with 20-element arrays, f(p[:10], q[:10], 20) wrote
    # 10 elements past the end of the view.
    p, q = rand(rng, 20), rand(rng, 20)
    for call in every_path(vadd):
        r = np.full(20, -7.0, "float32")
        with pytest.raises(kiln.KilnError, match=r"argument 3 'n' = 20 disagrees with argument 0 'A' dimension 0, which is 10"):
            call(p[:10], q[:10], r[:10], 20)
        assert (r == -7).all()
        call(p[:10], q[:10], r[:10], 10)
        np.testing.assert_allclose(r[:10], p[:10] + q[:10], rtol=1e-6)
        assert (r[10:] == -7).all()


def test_scalar_is_inferred_when_left_out(vadd, rng):
    for n in (1, 7, 64, 1000):
        a, b = rand(rng, n), rand(rng, n)
        for call in every_path(vadd):
            c = np.zeros(n, "float32")
            call(a, b, c)
            np.testing.assert_allclose(c, a + b, rtol=1e-6)


def test_arrays_that_disagree_on_n(vadd, rng):
    a, b = rand(rng, 10), rand(rng, 12)
    for call in every_path(vadd):
        with pytest.raises(kiln.KilnError, match=r"argument 1 'B' has 12 in dimension 0 .*expected n with n = 10 \(from argument 0 'A' dimension 0\)"):
            call(a, b, np.zeros(10, "float32"))
        with pytest.raises(kiln.KilnError, match=r"argument 2 'C' has 9 in dimension 0"):
            call(a, a, np.zeros(9, "float32"))


def test_two_variables_in_2d(rng):
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    T = te.compute((n, m), lambda i, j: A[j, i] * 2.0, name="T")
    mod = kiln.build(te.create_schedule(T), [A, T])
    a = rand(rng, 5, 3)
    t = np.zeros((3, 5), "float32")
    mod(a, t)
    np.testing.assert_allclose(t, 2 * a.T, rtol=1e-6)
    mod(a, t, 5, 3)
    with pytest.raises(kiln.KilnError, match=r"argument 1 'T' has 4 in dimension 1 \(shape \[3, 4\]\), expected m with m = 5"):
        mod(a, np.zeros((3, 4), "float32"))
    with pytest.raises(kiln.KilnError, match=r"argument 3 'n' = 4 disagrees with argument 0 'A' dimension 1, which is 3"):
        mod(a, t, 5, 4)
    assert mod.params()[0]["dims"] == ["m", "n"]


def test_expression_dimension(rng):
    n = te.var("n")
    A = te.placeholder((n + 1,), name="A")
    B = te.compute((n,), lambda i: A[i] + A[i + 1], name="B")
    mod = kiln.build(te.create_schedule(B), [A, B])
    assert mod.params()[0]["dims"] == ["n + 1"]
    a = rand(rng, 11)
    b = np.zeros(10, "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a[:-1] + a[1:], rtol=1e-6)
    with pytest.raises(kiln.KilnError, match=r"argument 0 'A' has 10 in dimension 0 \(shape \[10\]\), expected n \+ 1 with n = 10"):
        mod(a[:10], b)


def test_variable_only_in_an_expression_must_be_passed(rng):
    m = te.var("m")
    X = te.placeholder((2 * m,), name="X")
    Y = te.compute((2 * m,), lambda i: X[i] * 3.0, name="Y")
    mod = kiln.build(te.create_schedule(Y), [X, Y])
    x = rand(rng, 8)
    y = np.zeros(8, "float32")
    with pytest.raises(kiln.KilnError, match="'m' is not a dimension of any array passed, so it must be given"):
        mod(x, y)
    with pytest.raises(kiln.KilnError, match=r"argument 0 'X' has 8 in dimension 0 .*expected 2 \* m with m = 5"):
        mod(x, y, 5)
    mod(x, y, 4)
    np.testing.assert_allclose(y, 3 * x, rtol=1e-6)


def test_wrong_dtype_and_rank(vadd, rng):
    a = rand(rng, 6)
    c = np.zeros(6, "float32")
    with pytest.raises(kiln.KilnError, match="argument 1 'B' has dtype float64, expected float32"):
        vadd(a, a.astype("float64"), c)
    with pytest.raises(kiln.KilnError, match=r"argument 1 'B' has rank 2, expected rank 1 \(shape \[n\]\)"):
        vadd(a, a.reshape(2, 3), c)


def test_strided_view_is_refused(vadd, rng):
    a = rand(rng, 20)
    c = np.zeros(10, "float32")
    with pytest.raises(kiln.KilnError, match="argument 0 'A' is not contiguous .*ascontiguousarray"):
        vadd(a[::2], a[:10], c)
    vadd(np.ascontiguousarray(a[::2]), a[:10], c)
    np.testing.assert_allclose(c, a[::2] + a[:10], rtol=1e-6)


def test_too_small_array_with_a_constant_shape():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    mod = kiln.build(te.create_schedule(B), [A, B])
    with pytest.raises(kiln.KilnError, match=r"argument 1 'B' has 15 in dimension 0 \(shape \[15\]\), expected 16"):
        mod(np.zeros(16, "float32"), np.zeros(15, "float32"))
