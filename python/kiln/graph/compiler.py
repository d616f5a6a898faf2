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
``op_info(name)`` for the attributes each takes).
"""
import os

import sys

import numpy as _np

from .._ffi import KilnError, _kiln
from ..runtime import model_feed

_g = _kiln.graph
Graph = _g.Graph
Value = _g.Value
registered_ops = _g.registered_ops
op_info = _g.op_info
make_input = _g.make_input
make_constant = _g.make_constant
make_graph = _g.make_graph
remove_identity = _g.remove_identity
fold_transposes = _g.fold_transposes
autocast = _g.autocast
fold_constants = _g.fold_constants
fold_batch_norm = _g.fold_batch_norm
eliminate_common_subexpr = _g.eliminate_common_subexpr
fuse_ops = _g.fuse_ops
wrap_ops = _g.wrap_ops
optimize = _g.optimize
gradients = _g.gradients
vjp = _g.vjp
holds_bfloat16_values = _g.holds_bfloat16_values
gradient_graph = _g.gradient_graph
lift_parameters = _g.lift_parameters


def make_op(op, inputs, name="", **attrs):
    """One operator node; returns its outputs (a list of :class:`Value`)."""
    return _g.make_op(op, list(inputs), attrs, name)


class Builder:
    """Builds a graph one operator at a time (for tests and users without ONNX)."""

    def __init__(self):
        self._inputs = []

    def input(self, name, shape, dtype="float32"):
        v = _g.make_input(name, [int(d) for d in shape], dtype)
        self._inputs.append(v)
        return v

    def constant(self, name, array):
        return _g.make_constant(name, _np.asarray(array, order="C"))

    def op(self, op, *inputs, name="", outputs=None, **attrs):
        """Applies `op`; returns its one output, or the list of outputs when it has several."""
        outs = _g.make_op(op, list(inputs), attrs, name)
        return outs[0] if len(outs) == 1 and outputs is None else outs

    def build(self, *outputs, names=None):
        outs = list(outputs[0]) if len(outputs) == 1 and isinstance(outputs[0], (list, tuple)) else list(outputs)
        return _g.make_graph(self._inputs, outs, list(names or []))


def run_op(op, inputs, **attrs):
    """Runs one operator with plain (unscheduled) kernels: numpy arrays in, a list of numpy arrays out.

    Inputs the operator reads at compile time (Reshape's shape, Slice's
    starts) become constants; None is an absent optional input.
    """
    b = Builder()
    vals, feed = [], []
    const_inputs = set(_g.op_const_inputs(op))
    for i, a in enumerate(inputs):
        if a is None:
            vals.append(None)
        elif i in const_inputs:
            vals.append(b.constant(f"c{i}", _np.asarray(a, order="C")))
        else:
            a = _np.asarray(a, order="C")
            vals.append(b.input(f"x{i}", a.shape, str(a.dtype)))
            feed.append(a)
    outs = _g.make_op(op, vals, attrs, op)
    exe = _g.compile(b.build(outs), plain=True, fuse=False, layout=False)
    return exe.run(feed)


class _CompiledModel:
    """What the CPU and the GPU executors share: inputs by position or name, the plan's memory and groups."""

    def __init__(self, native, model):
        self._exe = native
        self.model = model

    def __call__(self, *inputs):
        return self.run(list(inputs))

    def run(self, inputs, donate=None):
        """Runs the model; `inputs` is a list in input order or a dict by input name. Returns a list of numpy arrays.
        donate: positions of inputs whose arrays the run may overwrite (CPU executor): an output the plan lets
        reuse one (``output_reuses_input``; a parameter's update) is written into it in place and returned as it."""
        if donate:
            return self._exe.run(self._order(inputs), [int(i) for i in donate])
        return self._exe.run(self._order(inputs))

    def memory(self):
        """Bytes: arena_bytes (planned), naive_bytes (no reuse), peak_bytes (live at once), weight_bytes."""
        return self._exe.memory()

    def groups(self):
        """One dict per fused group: name, ops, workload_key, schedule ("database", "default" or "plain"), schedule_detail,
        records_only_for (for a group the DB has no record of on this build's target: the same target with another
        -num-cores that it has records for, else ""; their schedules are not taken, see compile), flop."""
        return self._exe.groups()

    @property
    def graph(self):
        """The optimized, fused graph the executor runs."""
        return self._exe.graph

    @property
    def num_kernels(self):
        return self._exe.num_kernels

    @property
    def output_reuses_input(self):
        """Per output, the input position whose array ``run(..., donate=)`` writes it into (the input
        donated), or -1: outputs computed element by element from an input no later group reads."""
        return list(getattr(self._exe, "output_reuses_input", [-1] * len(self.model.output_names)))

    def _order(self, inputs):
        return model_feed(self.model.input_names, inputs)


class Executor(_CompiledModel):
    """A compiled model: call it with arrays (numpy, torch, kiln) in input order."""

    def profile(self, *inputs, repeats=10):
        """Per-group times (median of `repeats` runs): a list of dicts with name, seconds, gflops, share."""
        return self._exe.profile(self._order(list(inputs)), repeats)

    def tuned_groups(self):
        """(groups built from a tuning record, all groups)."""
        groups = self._exe.groups()
        return sum(1 for g in groups if g["schedule"] == "database"), len(groups)

    def layout_decisions(self):
        """Per convolution, the channel-block cap compiling with ``db=`` chose from the records:
        conv, cap, conv_time and transform_time (s, the estimate it was chosen by), why. Empty without a db."""
        return self._exe.layout_decisions()

    def export_library(self, path, weights="embed", static_runtime=False):
        """Writes the compiled model as one shared library that
        :func:`kiln.runtime.load_model` runs without the compiler: every kernel,
        the plan, and the weights, ``"embed"``-ded in the library or
        ``"beside"`` it as ``<path>.weights``. Linked by ``$CC`` (default ``cc``).
        With ``static_runtime=True`` the library carries kiln_runtime (and its C
        API) itself and needs only libc, libm and libpthread."""
        self._exe.export_library(os.fspath(path), weights, static_runtime)

    @property
    def compile_seconds(self):
        return self._exe.compile_seconds

    def __repr__(self):
        return f"<kiln.graph.Executor: {self.num_kernels} kernels, arena {self.memory()['arena_bytes']} bytes>"


class GpuExecutor(_CompiledModel):
    """A model compiled for a cuda target: one CUDA kernel per fused group,
    scheduled by the GPU rules (see ``kiln.gpu.default_schedule``).

    ``exe(*inputs)`` runs on the GPU (a clear :class:`KilnError` without
    one); ``exe.simulate(*inputs)`` runs every kernel in the GPU simulator on
    the CPU, so a model's GPU kernels can be checked anywhere."""

    def simulate(self, *inputs):
        """Runs every kernel in the GPU simulator (on the CPU); returns numpy arrays as run() does."""
        return self._exe.simulate(self._order(list(inputs)))

    def kernels(self):
        """One dict per kernel: name, source (the CUDA C), launch ("grid=(..) block=(..) shared=..B")."""
        return self._exe.kernels()

    def __repr__(self):
        return f"<kiln.graph.GpuExecutor: {self.num_kernels} CUDA kernels, arena {self.memory()['arena_bytes']} bytes>"


def _winograd_tile(winograd):
    """compile's `winograd` as the largest Winograd output tile (LayoutPlan::winograd)."""
    if winograd is True or winograd is False:
        return 4 if winograd else 0
    if isinstance(winograd, int) and winograd in (0, 2, 4):
        return winograd
    raise KilnError(f"kiln.compile: winograd= takes True, False, 2 (F(2x2, 3x3) only) or 4, got {winograd!r}")


def compile(model, target="llvm", db=None, fuse=True, plain=False, dump=False, layout=True, quiet=False, bf16_dot=None,
            winograd=True):
    """Compiles a graph: passes, fusion, kernels (the DB's best records when `db` is given) and the memory plan.

    fuse=False gives one kernel per operator, plain=True unscheduled kernels
    (both for reference runs), layout=False keeps convolutions in NCHW, and
    dump=True prints the graph after every pass (as KILN_DUMP_IR=1 does).
    With a database it says on stderr how many groups had a record (quiet=True: not).
    bf16_dot: the matmuls and convolutions autocast rounds to bfloat16 run as
    bfloat16 dot products (vdpbf16ps); None does so where the target has AVX-512 BF16,
    True everywhere (emulated without it), False never.
    winograd: by default (True) a 3x3 stride-1 convolution with 49 or more 4x4 output tiles
    (28x28 outputs and up) runs as Winograd F(4x4, 3x3), else with 49 or more 2x2 tiles as
    F(2x2, 3x3) (float32 relative error about 1e-6 both); 2 allows F(2x2, 3x3) only,
    False (or 0) keeps every convolution direct.
    A cuda target (``"cuda -arch=sm_90"``) gives a :class:`GpuExecutor`.
    """
    if not isinstance(model, Graph):
        raise KilnError(f"kiln.compile takes a kiln.graph.Graph (from from_onnx, from_torch or a Builder), got a {type(model).__name__}")
    if str(target).split()[:1] == ["cuda"]:
        if plain:
            raise KilnError("kiln.compile for a cuda target has no plain kernels (a GPU kernel needs its loops bound to threads); drop plain=")
        from .. import gpu
        exe = GpuExecutor(_g.compile_gpu(model, str(target), fuse, gpu.nvrtc_available()[0], dump, os.fspath(db) if db else ""), model)
        if db and not quiet:
            tuned = sum(1 for g in exe.groups() if g["schedule"] == "database")
            print(f"kiln.compile: {tuned} of {len(exe.groups())} fused groups from the GPU tuning records in {db}", file=sys.stderr)
        return exe
    bf16 = -1 if bf16_dot is None else int(bool(bf16_dot))
    exe = Executor(_g.compile(model, str(target), db or "", fuse, plain, dump, layout, bf16, _winograd_tile(winograd)), model)
    if db and not quiet:
        tuned, total = exe.tuned_groups()
        elsewhere = [g["records_only_for"] for g in exe.groups() if g["records_only_for"]]
        print(f"kiln.compile: {tuned} of {total} fused groups from the tuning records in {db}"
              + ("" if tuned == total else "; the others use default schedules (kiln.tune_model tunes them)"), file=sys.stderr)
        if elsewhere:
            # A schedule tuned for one core count is not fitted to another; the user should know why the records went unused.
            print(f"kiln.compile: {len(elsewhere)} of those have records only for {' / '.join(sorted(set(map(repr, elsewhere))))},"
                  f" not for this build's {str(target)!r}: tune for it (or compile for the core count tuned)", file=sys.stderr)
    return exe


def _shape_dict(shapes):
    if shapes is None:
        return {}
    if not isinstance(shapes, dict):
        raise KilnError(f"shapes must be a dict of input name -> shape, got a {type(shapes).__name__}")
    out = {}
    for name, shape in shapes.items():
        try:
            out[str(name)] = [int(d) for d in (shape if hasattr(shape, "__iter__") else [shape])]
        except (TypeError, ValueError):
            raise KilnError(f"shapes['{name}'] must be a sequence of ints, got {shape!r}") from None
    return out


def from_onnx(model, shapes=None):
    """Imports an ONNX model (opsets 11 to 17) as a :class:`Graph`.

    `model` is a file path, an ``onnx.ModelProto`` or the serialised bytes
    of one. `shapes` maps input names to static shapes; it is needed for
    every input with a symbolic dimension (``{"input": (1, 3, 224, 224)}``).
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


def from_torch(module, example_inputs, opset=13):
    """Imports a PyTorch module through ONNX (exported in memory, in eval mode).

    `example_inputs` is a tensor or a tuple of tensors (numpy arrays are
    converted); the graph's inputs get their shapes and are named
    ``input0``, ``input1``, ...
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
    was_training = module.training
    module.eval()
    buf = io.BytesIO()
    try:
        with torch.no_grad():
            torch.onnx.export(module, args, buf, opset_version=int(opset), input_names=names,
                              training=torch.onnx.TrainingMode.EVAL, do_constant_folding=True)
    finally:
        module.train(was_training)
    return from_onnx(buf.getvalue(), shapes={n: tuple(a.shape) for n, a in zip(names, args)})
