"""Post-training static quantization: ``kiln.quantize``.

    batches = [x0, x1, ...]                     # numpy arrays the model takes (a tuple or dict per batch for several inputs)
    qmodel = kiln.quantize(model, calibration=batches, method="entropy", export="model_int8.onnx")
    exe = kiln.compile(qmodel)                  # or export_library, as any graph

The float model runs on the calibration batches; each Conv/MatMul/Gemm's
float inputs and its output (after its Relu or Clip (ReLU6) when that is the only reader)
get a range (``method``: "minmax", "percentile" -- 99.99th of |x| --, or
"entropy" -- the KL-divergence threshold), and from it a uint8 scale and
zero point (asymmetric). Constant weights become int8 symmetric, one scale
per output channel with ``per_channel=True`` (else one per tensor); a bias
int32 at the input scale times the weight scale. The result is the model
with QuantizeLinear/DequantizeLinear pairs (the QDQ form of ONNX), a plain
:class:`kiln.graph.Graph`; ``export=path`` also writes it as an ONNX model
that ONNX Runtime and other runtimes run with the same quantization.
"""
import os as _os

import numpy as _np

from .._ffi import KilnError
from . import ranges as _r
from .qdq import Plan, quantized_graph, rebuild, walk
from .onnx_writer import to_onnx

__all__ = ["quantize", "to_onnx"]


def _as_graph(model):
    from ..graph import Graph, from_onnx, fold_batch_norm, remove_identity

    if not isinstance(model, Graph):
        if isinstance(model, (str, _os.PathLike, bytes, bytearray)) or hasattr(model, "SerializeToString"):
            model = from_onnx(model)
        else:
            raise KilnError(f"kiln.quantize takes a kiln.graph.Graph or an ONNX model (a path, bytes or onnx.ModelProto), got a {type(model).__name__}")
    # Batch norms folded into their convolutions first: the quantized weights are the ones that run.
    return fold_batch_norm(remove_identity(model))


def _feed(batch, names, types, k):
    """Batch k as a list of float arrays in input order, checked against the model's inputs."""
    if isinstance(batch, dict):
        missing = [n for n in names if n not in batch]
        if missing:
            raise KilnError(f"kiln.quantize: calibration batch {k} has no '{missing[0]}' (the model's inputs: {', '.join(names)})")
        arrays = [batch[n] for n in names]
    elif isinstance(batch, (list, tuple)):
        arrays = list(batch)
    else:
        arrays = [batch]
    if len(arrays) != len(names):
        raise KilnError(f"kiln.quantize: calibration batch {k} has {len(arrays)} arrays but the model takes {len(names)} inputs "
                        f"({', '.join(names)}); give a tuple or dict per batch")
    out = []
    for a, name, (shape, dtype) in zip(arrays, names, types):
        a = _np.ascontiguousarray(a)
        ok = a.ndim == len(shape) and all(isinstance(d, str) or d == e for d, e in zip(shape, a.shape))
        if not ok:
            raise KilnError(f"kiln.quantize: calibration batch {k}: input '{name}' has shape {tuple(a.shape)}, "
                            f"but the model takes {tuple(shape)}")
        if str(a.dtype) != dtype:
            raise KilnError(f"kiln.quantize: calibration batch {k}: input '{name}' is {a.dtype}, but the model takes {dtype}")
        out.append(a)
    return out


def _calibrate(w, plan, batches, method, target):
    """The (scale, zero point) of every activation the plan names."""
    from ..graph import compile as _compile, make_graph

    inputs, vals = rebuild(w)
    observed = [vals[k] for k in plan.activations]
    exe = _compile(make_graph(inputs, observed), target=target)
    obs = {k: _r.TensorRange() for k in plan.activations}
    passes = ["observe_minmax"] + ([] if method == "minmax" else ["observe_histogram"])
    for p in passes:  # the histogram's range is the min/max of all batches: a second pass
        for b in batches:
            for k, y in zip(plan.activations, exe(*b)):
                getattr(obs[k], p)(_np.asarray(y))
    return {k: _r.activation_params(*obs[k].range(method)) for k in plan.activations}


def quantize(model, calibration, per_channel=True, method="minmax", export=None, target="llvm"):
    """The model with QuantizeLinear/DequantizeLinear pairs around each Conv, MatMul and Gemm (see the module doc).

    calibration: an iterable of batches, each an array (one input), a tuple in input order or a dict by input name,
    shaped as the model's inputs. method: "minmax", "percentile" or "entropy". export: a path to write the QDQ model
    to as ONNX (opset 13). target: where the float model runs for calibration.
    """
    if method not in _r.METHODS:
        raise KilnError(f"kiln.quantize: method must be one of {', '.join(map(repr, _r.METHODS))}, got {method!r}")
    if calibration is None or isinstance(calibration, (_np.ndarray, str, bytes)):
        raise KilnError("kiln.quantize: calibration= must be an iterable of batches (a list of arrays, tuples or dicts), "
                        f"got {type(calibration).__name__}; wrap a single array as [x]")
    g = _as_graph(model)
    w = walk(g)
    names = [n["name"] for n in w["nodes"] if n["kind"] == "input"]
    types = [n["types"][0] for n in w["nodes"] if n["kind"] == "input"]
    batches = [_feed(b, names, types, k) for k, b in enumerate(calibration)]
    if not batches:
        raise KilnError("kiln.quantize: calibration= holds no batches; give at least one batch of representative inputs")
    plan = Plan(w, bool(per_channel))
    q = quantized_graph(plan, _calibrate(w, plan, batches, method, target))
    if export is not None:
        import onnx

        onnx.save(to_onnx(q), _os.fspath(export))
    return q
