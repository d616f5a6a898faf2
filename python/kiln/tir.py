"""TVM's ``tvm.tir`` names that TVM tutorials use on index expressions.

kiln's integer division and modulo in tensor expressions are the floor
forms, which is what TVM's ``indexdiv`` / ``indexmod`` mean for the
non-negative indices of a loop nest.
"""
from ._ffi import _kiln

floordiv = _kiln.floordiv
floormod = _kiln.floormod
truncdiv = _kiln.truncdiv
truncmod = _kiln.truncmod
indexdiv = floordiv
"""``tvm.tir.indexdiv(a, b)``: index division (floor), same as ``a // b``."""
indexmod = floormod
"""``tvm.tir.indexmod(a, b)``: index modulo (floor), same as ``a % b``."""

__all__ = ["floordiv", "floormod", "truncdiv", "truncmod", "indexdiv", "indexmod"]
