"""kiln arrays: n-dimensional CPU arrays laid out as DLPack tensors.

``kiln.nd.array(np_array)`` copies a numpy array into a new kiln array;
``.numpy()`` copies it back. ``kiln.nd.from_dlpack(t)`` and
``torch.utils.dlpack.from_dlpack(kiln_array)`` share memory without copies.
"""
from ._ffi import KilnError, _kiln

NDArray = _kiln.NDArray


class Device:
    """A device; kiln runs kernels on the CPU (TVM's ``tvm.cpu(0)``)."""

    device_type = "cpu"

    def __init__(self, index=0):
        self.index = index

    def __repr__(self):
        return f"cpu({self.index})"


def cpu(index=0):
    """The CPU device (for TVM-style code: ``mod.time_evaluator("main", kiln.cpu())``)."""
    return Device(index)


def array(source, device=None):
    """A new kiln array holding a copy of ``source`` (a numpy array, anything
    ``numpy.asarray`` accepts, or another kiln array)."""
    if isinstance(source, NDArray):
        out = NDArray.empty(list(source.shape), source.dtype)
        return out.copyfrom(source)
    return NDArray.from_numpy(source)


def empty(shape, dtype="float32", device=None):
    """An uninitialised kiln array (64-byte aligned, row-major)."""
    if isinstance(shape, int):
        shape = (shape,)
    return NDArray.empty(list(shape), dtype)


def from_dlpack(tensor):
    """A zero-copy kiln array over a DLPack tensor (an object with ``__dlpack__``,
    such as a torch tensor, or a DLPack capsule)."""
    return NDArray.from_dlpack(tensor)


__all__ = ["NDArray", "Device", "cpu", "array", "empty", "from_dlpack", "KilnError"]
