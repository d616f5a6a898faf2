"""``kiln.nd``: kiln's arrays under TVM's name (``kiln.nd.array``, ``tvm.nd.array``
for code run with ``import kiln as tvm``). They live in :mod:`kiln.runtime.ndarray`."""
from .runtime.ndarray import NDArray, Device, cpu, device, array, empty, from_dlpack, KilnError

__all__ = ["NDArray", "Device", "cpu", "device", "array", "empty", "from_dlpack", "KilnError"]
