"""The graph compiler: whole models in, one compiled program out.

Import a model, compile it, run it::

    import kiln
    model = kiln.graph.from_onnx("resnet18.onnx", shapes={"input": (1, 3, 224, 224)})
    print(model)                      # the graph, one line per operator
    exe = kiln.compile(model)         # passes, fusion, kernels, memory plan
    (y,) = exe(x)                     # numpy in, numpy out
    exe.profile(x); exe.memory()

Without ONNX, build a graph with :class:`Builder`::

    b = kiln.graph.Builder()
    x = b.input("x", (1, 3, 32, 32))
    w = b.constant("w", np.random.rand(8, 3, 3, 3).astype("float32"))
    y = b.op("Relu", b.op("Conv", x, w, pads=[1, 1, 1, 1]))
    model = b.build(y)

Operators are ONNX's (``kiln.graph.registered_ops()`` lists them, with
``op_info(name)`` for the attributes each takes). Tuning a model's fused groups
into a database is the tuner's: ``kiln.tune_model`` (``kiln.tuner.tune_model``).
"""
from .._ffi import KilnError
from .compiler import (Graph, Value, registered_ops, op_info, make_input, make_constant, make_graph, remove_identity,
                       fold_transposes, autocast, fold_constants, fold_batch_norm, eliminate_common_subexpr, fuse_ops,
                       wrap_ops, optimize, gradients, vjp, holds_bfloat16_values, gradient_graph, lift_parameters, make_op,
                       Builder, run_op, compile)
from .executor import Executor, GpuExecutor
from .importers import from_onnx, from_torch

__all__ = ["Graph", "Value", "registered_ops", "op_info", "make_input", "make_constant", "make_graph", "remove_identity",
           "fold_transposes", "autocast", "fold_constants", "fold_batch_norm", "eliminate_common_subexpr", "fuse_ops",
           "wrap_ops", "optimize", "gradients", "vjp", "holds_bfloat16_values", "gradient_graph", "lift_parameters",
           "make_op", "Builder", "run_op", "compile", "Executor", "GpuExecutor", "from_onnx", "from_torch",
           "KilnError"]
