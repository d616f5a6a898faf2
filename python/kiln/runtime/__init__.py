"""kiln's runtime: what runs compiled code without the compiler.

Kernel libraries (:class:`Module`: call kernels with numpy arrays, kiln
arrays or DLPack tensors, time them, export and :func:`load` them), model
libraries (:func:`load_model`: a whole model exported by
``Executor.export_library``) and kiln's arrays (:class:`NDArray`, also
spelled ``kiln.nd``, TVM's name).
"""
from .._ffi import KilnError
from .module import Module, TimeResult, load
from .model_library import LoadedModel, load_model, model_feed
from .ndarray import NDArray, Device, cpu, device, array, empty, from_dlpack

__all__ = ["Module", "TimeResult", "load", "LoadedModel", "load_model", "model_feed",
           "NDArray", "Device", "cpu", "device", "array", "empty", "from_dlpack", "KilnError"]
