"""Compiled modules: call kernels with numpy arrays, kiln arrays or DLPack
tensors (PyTorch), and time them.

Arguments cross without copies. A numpy array must be C-contiguous, aligned,
of the kernel's dtype and shape, and writeable where the kernel writes it: the
kernel reads and writes the array's own memory, so ``mod(a, b, c)`` leaves the
result in ``c``. Anything that does not match raises :class:`kiln.KilnError`
naming the kernel and the parameter.

Symbolic shapes (``n = te.var("n")``) are bound from the arrays at every
call: ``n`` is taken from the first array that has it as a dimension and
every other use must agree. The trailing scalar for ``n`` may be left out
(``mod(a, b, c)``); when given, it must equal the arrays' dimension.
"""
import os

from .._ffi import KilnError, _kiln

TimeResult = _kiln.TimeResult


class Module:
    """Kernels compiled by :func:`kiln.build` (or loaded from a library).

    ``mod(*args)`` calls the entry kernel; ``mod["name"]`` or
    ``mod.get_function("name")`` gives any kernel as a callable.
    """

    def __init__(self, native, entry_name="main", written=()):
        if not isinstance(native, _kiln.Module):
            raise KilnError("Module: expected a native module (use kiln.build or Module.load)")
        self._native = native
        self.entry_name = entry_name
        self._written = list(written)

    @staticmethod
    def load(path, entry_name=None):
        """Loads an exported kernel library (a .so with kiln metadata)."""
        native = _kiln.Module.load(str(path))
        if native.is_model_library:
            raise KilnError(f"'{path}' is a model library (written by Executor.export_library): its kernels take the plan's "
                            "arena and weights, so load it with kiln.runtime.load_model(path) and call the model")
        names = native.names()
        return Module(native, entry_name or (names[0] if names else "main"))

    def export_library(self, path):
        """Writes the kernels as a shared library (``.so``) that :meth:`Module.load`
        (or :func:`load`) reads in any process with kiln's runtime, without LLVM.

        The object code is linked by the system C compiler (``$CC``, default
        ``cc``); a missing compiler raises :class:`kiln.KilnError` naming ``CC``.
        The library records the target's CPU features, and loading it on a
        machine that lacks them raises :class:`kiln.KilnError` naming them.
        """
        self._native.export_library(os.fspath(path))

    @property
    def names(self):
        """The kernel names."""
        return self._native.names()

    def params(self, name=None):
        """The parameters of a kernel (default: the entry) as dicts: name, kind, dtype, shape
        (-1 where not a constant) and, for buffers, dims (each an int or an expression such as "n + 1")."""
        return self._native.params(name or self.entry_name)

    def _written_for(self, name):
        return self._written if name == self.entry_name else []

    def __call__(self, *args):
        self._native.call(self.entry_name, list(args), self._written)

    def get_function(self, name):
        """Kernel ``name`` as a callable."""
        if not isinstance(name, str) or not self._native.has(name):
            self._native.params(str(name))  # raises KilnError listing the kernels
        written = self._written_for(name)

        def call(*args):
            self._native.call(name, list(args), written)

        call.__name__ = name
        return call

    __getitem__ = get_function

    def time_evaluator(self, func_name=None, dev=None, number=10, repeat=1, min_repeat_ms=0):
        """A callable that times kernel ``func_name`` (default: the entry), as in TVM.

        ``mod.time_evaluator("main", number=10)(a, b, c)`` calls the kernel once to
        warm up, then measures ``repeat`` times ``number`` back-to-back calls
        (``number`` grows until one measurement lasts ``min_repeat_ms``) and
        returns a :class:`TimeResult` in seconds per call: ``.mean``, ``.median``,
        ``.min``, ``.max`` and ``.results`` (one per repeat). ``dev`` is accepted
        for TVM compatibility; kiln modules run on the CPU.
        """
        name = func_name or self.entry_name
        if dev is not None and getattr(dev, "device_type", "cpu") != "cpu":
            raise KilnError(f"time_evaluator: device {dev} is not supported; kiln modules run on the cpu")
        self._native.params(name)  # an unknown kernel fails now, not at the first call
        written = self._written_for(name)

        def evaluator(*args):
            return self._native.time_evaluator(name, list(args), int(number), int(repeat), float(min_repeat_ms), written)

        return evaluator

    def __repr__(self):
        return f"Module(entry={self.entry_name!r}, kernels={self.names})"


def load(path, entry_name=None):
    """Loads a kernel library written by :meth:`Module.export_library`; a
    damaged or cut-short file (its checksum, sealed at export, does not match)
    raises :class:`kiln.KilnError` before any of its code runs."""
    return Module.load(path, entry_name)
