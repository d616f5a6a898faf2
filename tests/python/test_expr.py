"""Expressions from Python: operators, dtype promotion, math, errors."""
import numpy as np
import pytest

import kiln
from kiln import te


def test_int_arithmetic_and_python_numbers():
    n = te.var("n")
    assert n.dtype == "int32"
    e = 2 * n + 1
    assert e.dtype == "int32"
    assert str(e) == "2*n + 1" or "n" in str(e)
    assert (n - 3).dtype == "int32" and (3 - n).dtype == "int32"
    assert (-n).dtype == "int32"


def test_floordiv_and_floormod_are_python_semantics():
    n = te.var("n")
    assert (n // 4).kind == "FloorDiv"
    assert (n % 4).kind == "FloorMod"
    assert (7 // n).kind == "FloorDiv"
    assert te.truncdiv(n, 4).kind == "Div"


def test_true_division_of_integers_is_float32():
    n = te.var("n")
    assert (n / 2).dtype == "float32"
    assert (1 / n).dtype == "float32"


def test_promotion_rules():
    x = te.var("x", "float64")
    h = te.var("h", "float16")
    i8 = te.var("b", "int8")
    i64 = te.var("l", "int64")
    assert (x + 1).dtype == "float64"          # an immediate adapts
    assert (x * 0.1).dtype == "float64"        # a Python float takes the float side's dtype
    assert (h + 1.5).dtype == "float16"
    assert (i8 + 1).dtype == "int8"
    assert (i8 + 1.5).dtype == "float32"       # float immediate with an integer: float32
    assert (i8 + i64).dtype == "int64"         # the wider integer wins
    assert (i8 + x).dtype == "float64"         # integer with float: the float type
    assert (te.var("u", "uint32") + te.var("s", "int32")).dtype == "int32"
    assert (i8 + np.int64(3)).dtype in ("int8", "int64")


def test_comparisons_and_logic():
    n = te.var("n")
    c = (n < 4) & (n >= 0)
    assert c.dtype == "bool" and c.kind == "And"
    assert ((n == 1) | (n != 2)).kind == "Or"
    assert (~(n > 3)).kind == "Not"
    assert te.all(n > 0, n < 9).dtype == "bool"
    with pytest.raises(kiln.KilnError, match="bool operands"):
        _ = n & 3


def test_truth_value():
    n = te.var("n")
    assert n == n
    assert not (n != n)
    assert n in [te.var("m"), n]
    assert (n == None) is False  # noqa: E711
    with pytest.raises(kiln.KilnError, match="truth value"):
        bool(n < 3)


def test_math_functions_and_casts():
    x = te.var("x", "float32")
    for f in [te.exp, te.log, te.sqrt, te.tanh, te.erf, te.sigmoid, te.fabs, te.floor, te.ceil, te.round,
              te.trunc, te.sin, te.cos, te.rsqrt]:
        assert f(x).dtype == "float32"
    assert te.exp(te.var("n")).dtype == "float32"  # integers become float32
    assert (x ** 2).dtype == "float32"
    assert te.cast(x, "int32").dtype == "int32"
    assert x.astype("float64").dtype == "float64"
    assert te.const(3, "int8").dtype == "int8"
    assert te.const(1.5, "float64").value == 1.5
    assert int(te.const(7)) == 7
    assert te.maximum(x, 0.0).kind == "Max"
    assert te.max(x, 1.0).kind == "Max"
    assert te.select(x > 0, x, 0.0).kind == "Select"
    assert te.if_then_else(x > 0, x, 0.0).kind == "Call"


def test_expression_errors():
    x = te.var("x", "float32")
    with pytest.raises(kiln.KilnError, match="integer"):
        te.floordiv(x, x)
    with pytest.raises(kiln.KilnError):
        _ = x + "a"
    with pytest.raises(kiln.KilnError):
        _ = x + None
    with pytest.raises(kiln.KilnError, match="dtype"):
        te.var("y", "float33")
    with pytest.raises(kiln.KilnError):
        te.cast(x, "complex64")
    with pytest.raises(kiln.KilnError, match="non-constant"):
        int(x)
    assert issubclass(kiln.KilnError, ValueError)


def test_dtype_spellings():
    assert te.placeholder((2,), np.float32).dtype == "float32"
    assert te.placeholder((2,), np.dtype("int8")).dtype == "int8"
    import torch
    assert te.placeholder((2,), torch.float16).dtype == "float16"
