"""Models into kiln graphs: ONNX files and protos (from_onnx), PyTorch modules (from_torch, through ONNX)."""
import numbers as _numbers

import numpy as _np

from .._ffi import KilnError, _kiln

_g = _kiln.graph


def _shape_dict(shapes):
    """Input name -> a list of ints (static axes) and strs (shape variables)."""
    if shapes is None:
        return {}
    if not isinstance(shapes, dict):
        raise KilnError(f"shapes must be a dict of input name -> shape, got a {type(shapes).__name__}")
    out = {}
    for name, shape in shapes.items():
        dims = list(shape) if hasattr(shape, "__iter__") and not isinstance(shape, str) else [shape]
        if not all(isinstance(d, (str, _numbers.Integral)) for d in dims):
            raise KilnError(f"shapes['{name}'] must be a sequence of ints and shape-variable names (str), got {shape!r}")
        out[str(name)] = [d if isinstance(d, str) else int(d) for d in dims]
    return out


def from_onnx(model, shapes=None):
    """Imports an ONNX model (opsets 11 to 17) as a :class:`Graph`.

    `model` is a file path, an ``onnx.ModelProto`` or the serialised bytes
    of one. A dimension the model leaves symbolic (an ONNX ``dim_param``)
    stays symbolic, as the shape variable of that name. `shapes` maps input
    names to shapes that override the model's: an int fixes an axis, a str
    makes it the shape variable of that name
    (``{"input": ("batch", 3, 224, 224)}``).
    """
    import os

    shape_map = _shape_dict(shapes)
    if isinstance(model, (str, os.PathLike)):
        return _g.from_onnx_file(os.fspath(model), shape_map)
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _g.from_onnx_bytes(bytes(model), shape_map)
    if hasattr(model, "SerializeToString"):
        return _g.from_onnx_bytes(model.SerializeToString(), shape_map)
    raise KilnError(f"from_onnx takes a file path, an onnx.ModelProto or its bytes, got a {type(model).__name__}")


def from_torch(module, example_inputs, opset=13, shapes=None):
    """Imports a PyTorch module through ONNX (exported in memory, in eval mode).

    `example_inputs` is a tensor or a tuple of tensors (numpy arrays are
    converted); the graph's inputs get their shapes and are named
    ``input0``, ``input1``, ... `shapes` makes axes symbolic, as in
    :func:`from_onnx`: ``shapes={"input0": ("batch", "seq")}`` exports those
    axes dynamic and names their shape variables (an int must equal the
    example's extent there).
    """
    import io

    import torch

    if isinstance(example_inputs, (list, tuple)):
        args = tuple(example_inputs)
    else:
        args = (example_inputs,)
    args = tuple(torch.from_numpy(_np.ascontiguousarray(a)) if isinstance(a, _np.ndarray) else a for a in args)
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise KilnError(f"from_torch: example input {i} is a {type(a).__name__}; pass tensors (or numpy arrays)")
    names = [f"input{i}" for i in range(len(args))]
    given = _shape_dict(shapes)
    final = {n: tuple(a.shape) for n, a in zip(names, args)}
    dynamic_axes = {}
    for name, dims in given.items():
        if name not in final:
            raise KilnError(f"shapes names '{name}', which is not an input of the module (its inputs: {', '.join(names)})")
        example = final[name]
        if len(dims) != len(example):
            raise KilnError(f"shapes['{name}'] has {len(dims)} dimensions, but the example input has {len(example)} ({tuple(example)})")
        for axis, (d, e) in enumerate(zip(dims, example)):
            if not isinstance(d, str) and d != e:
                raise KilnError(f"shapes['{name}'] sets axis {axis} to {d}, but the example input has {e} there; "
                                "give a name (a str) to make the axis symbolic, or the example's extent")
        axes = {axis: d for axis, d in enumerate(dims) if isinstance(d, str)}
        if axes:
            dynamic_axes[name] = axes
        final[name] = tuple(dims)
    was_training = module.training
    module.eval()
    buf = io.BytesIO()
    try:
        # Gradients stay on: under no_grad nn.TransformerEncoderLayer takes a fused fast path that ONNX cannot express.
        torch.onnx.export(module, args, buf, opset_version=int(opset), input_names=names,
                          training=torch.onnx.TrainingMode.EVAL, do_constant_folding=True,
                          dynamic_axes=dynamic_axes or None)
    finally:
        module.train(was_training)
    return from_onnx(buf.getvalue(), shapes=final)
