"""The graph compiler (compiler.py) and model tuning (model_tuning.py)."""
from .compiler import (Graph, Value, registered_ops, op_info, make_input, make_constant, make_graph, remove_identity,
                       fold_transposes, autocast, fold_constants, fold_batch_norm, eliminate_common_subexpr, fuse_ops,
                       wrap_ops, optimize, gradients, vjp, holds_bfloat16_values, gradient_graph, lift_parameters, make_op,
                       Builder, run_op, Executor, GpuExecutor, compile, from_onnx, from_torch, KilnError, _g)
from .model_tuning import tune_model, extract_tasks, remeasure
