"""TVM's ``tvm.tir`` names that TVM tutorials use on index expressions.

kiln's integer division and modulo in tensor expressions are the floor
forms, which is what TVM's ``indexdiv`` / ``indexmod`` mean for the
non-negative indices of a loop nest.
"""
from ._ffi import _kiln
from . import te as _te

floordiv = _kiln.floordiv
floormod = _kiln.floormod
truncdiv = _kiln.truncdiv
truncmod = _kiln.truncmod
indexdiv = floordiv
"""``tvm.tir.indexdiv(a, b)``: index division (floor), same as ``a // b``."""
indexmod = floormod
"""``tvm.tir.indexmod(a, b)``: index modulo (floor), same as ``a % b``."""

if_then_else = _te.if_then_else
"""``tvm.tir.if_then_else(cond, a, b)``: ``a`` where cond holds, else ``b``."""
all = _te.all  # noqa: A001 - TVM's name
"""``tvm.tir.all(*conds)``: the logical and of bool expressions."""
any = _te.any  # noqa: A001
"""``tvm.tir.any(*conds)``: the logical or of bool expressions."""
const = _te.const
"""``tvm.tir.const(value, dtype)``: a constant."""

__all__ = ["floordiv", "floormod", "truncdiv", "truncmod", "indexdiv", "indexmod", "if_then_else", "all", "any", "const"]
