"""kiln arrays: n-dimensional CPU arrays laid out as DLPack tensors.

``kiln.nd.array(np_array)`` copies a numpy array into a new kiln array;
``.numpy()`` copies it back. ``kiln.nd.from_dlpack(t)`` and
``torch.utils.dlpack.from_dlpack(kiln_array)`` share memory without copies.
"""
from .._ffi import KilnError, _kiln

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


def device(dev_type, dev_id=0):
    """The device for a target or device name, as TVM's ``tvm.device("llvm", 0)``.

    kiln compiles for the CPU: ``"llvm ..."`` targets (a string or a
    :class:`kiln.Target`) and ``"cpu"`` give :func:`cpu`; any other device
    raises :class:`kiln.KilnError`.
    """
    name = dev_type if isinstance(dev_type, str) else str(getattr(dev_type, "kind", dev_type))
    kind = name.split()[0] if name.split() else ""
    if kind not in ("llvm", "cpu", "c"):
        raise KilnError(f"device({name!r}): kiln runs kernels on the CPU only; use \"llvm\" (or \"cpu\") as the device")
    return cpu(dev_id)


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


__all__ = ["NDArray", "Device", "cpu", "device", "array", "empty", "from_dlpack", "KilnError"]
