"""kiln: a tensor compiler.

Declare computations with :mod:`kiln.te`, schedule them, then
:func:`kiln.lower` them to a loop nest or :func:`kiln.build` them into a
callable :class:`kiln.runtime.Module`::

    import numpy as np, kiln
    from kiln import te

    A = te.placeholder((64, 64), name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j] * 2, name="B")
    s = te.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(B.op.axis[1])
    mod = kiln.build(s, [A, B])
    a = np.random.rand(64, 64).astype("float32"); b = np.empty_like(a)
    mod(a, b)  # writes into b

Bad input raises :class:`kiln.KilnError` (a ``ValueError``) carrying the C++
message. A broken internal invariant -- a bug in kiln, not misuse -- raises
:class:`kiln.InternalError` (a ``RuntimeError``, not a ``KilnError``).

Code written for TVM's tensor expressions runs with ``import kiln as tvm``:
``tvm.device``, ``tvm.nd.array``, ``tvm.lower(..., simple_mode=True)``,
``tvm.tir.indexmod`` / ``indexdiv`` and ``tvm.testing.assert_allclose`` are
thin aliases of kiln's own calls.
"""
from ._ffi import InternalError, KilnError, _kiln
from . import te, nd, runtime, ops, tuning_db, tir, testing, gpu
from .driver import build, build_count, lower
from .runtime import Module, TimeResult, cpu, device

Target = _kiln.Target
PrimFunc = _kiln.PrimFunc

__version__ = "0.1.0"

__all__ = ["KilnError", "InternalError", "te", "nd", "runtime", "ops", "tuning_db", "tir", "testing", "gpu", "build", "build_count", "lower",
           "cpu", "device", "Module", "TimeResult", "Target", "PrimFunc"]
if hasattr(_kiln, "graph"):  # built with the graph compiler
    from . import graph, train
    from .graph import compile
    from .quantization import quantize
    __all__ += ["graph", "compile", "train", "quantize"]
if hasattr(_kiln, "tuner"):  # built with the auto-scheduler (it needs XGBoost, and the graph compiler)
    from . import tuner
    from .tuner import tune, tune_model
    __all__ += ["tuner", "tune", "tune_model"]
if hasattr(_kiln, "dist"):  # built with the distribution pass
    from . import dist
    __all__ += ["dist"]
