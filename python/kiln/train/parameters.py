"""A step's arrays on the host: its parameter (and buffer) table, and the bytes of arrays by type for
the memory reports."""
import numpy as _np

from .._ffi import KilnError


class Parameters(dict):
    """name -> numpy array; assigning checks the shape and copies (dtype converted)."""

    def __setitem__(self, name, value):
        if name not in self:
            raise KilnError(f"no parameter '{name}'; the parameters are {sorted(self)}")
        old = dict.__getitem__(self, name)
        a = _np.array(value, dtype=old.dtype, order="C")
        if a.shape != old.shape:
            raise KilnError(f"parameter '{name}' has shape {old.shape}; cannot assign an array of shape {a.shape}")
        dict.__setitem__(self, name, a)


def nbytes_of(types):
    """The bytes of arrays of these (shape, dtype) types."""
    return sum(int(_np.prod(shape, dtype=_np.int64)) * _np.dtype(dtype).itemsize for shape, dtype in types)
