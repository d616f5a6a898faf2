"""kiln.graph's operators and compiler: the native graph IR and passes, building a graph
(Builder, make_op), running one operator (run_op) and compiling a whole graph (compile)."""
import os

import sys

import numpy as _np

from .shape_options import parse_dims, parse_sizes
from .._ffi import KilnError, _kiln
from .executor import Executor, GpuExecutor

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


def _winograd_tile(winograd):
    """compile's `winograd` as the largest Winograd output tile (LayoutPlan::winograd)."""
    if winograd is True or winograd is False:
        return 4 if winograd else 0
    if isinstance(winograd, int) and winograd in (0, 2, 4):
        return winograd
    raise KilnError(f"kiln.compile: winograd= takes True, False, 2 (F(2x2, 3x3) only) or 4, got {winograd!r}")


def _with_precision(model, precision, target, bf16_dot):
    """(model, bf16_dot) for compile's `precision`: bfloat16 rounds the MatMul/Gemm/Conv operands (autocast) and turns
    on the bfloat16 dot products, where the target has them (or bf16_dot=True asks for their emulation)."""
    if precision in (None, "float32"):
        return model, bf16_dot
    if precision != "bfloat16":
        raise KilnError(f"kiln.compile: precision must be 'float32' or 'bfloat16', got {precision!r}")
    if str(target).split()[:1] == ["cuda"]:
        raise KilnError("kiln.compile: precision='bfloat16' is for CPU (llvm) targets; compile a cuda target in float32")
    if bf16_dot is False:
        raise KilnError("kiln.compile: precision='bfloat16' computes on bfloat16 dot products; drop bf16_dot=False")
    if bf16_dot is None and not _kiln.Target(str(target)).has_feature("avx512bf16"):
        raise KilnError(f"kiln.compile: precision='bfloat16' needs a target with AVX-512 BF16 (vdpbf16ps); {str(target)!r} has none. "
                        "Compile in float32, or pass bf16_dot=True for an emulated bfloat16 (its numerics, slower than float32)")
    return autocast(model, "bfloat16", ["MatMul", "Gemm", "Conv"], False), True


def compile(model, target="llvm", db=None, fuse=True, plain=False, dump=False, layout=True, quiet=False, bf16_dot=None,
            winograd=True, dims=None, sizes=None, size_variants=True, precision=None, int8=True):
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
    precision: "float32" (None) or "bfloat16": inference with bfloat16 weights and products (vdpbf16ps, float32
    accumulation) for every MatMul, Gemm and group-1 convolution: their operands are rounded to bfloat16 (autocast),
    constant weights stored as bfloat16 pairs, everything else float32. It needs a target with AVX-512 BF16 (an error
    names the fix otherwise); bf16_dot=True emulates it anywhere (the same numerics, slower). It is faster than
    float32 only where vdpbf16ps issues at more than half the FMA rate (bench/bf16_dot_rate.c measures it).
    int8: on a target with VNNI, quantized matmuls and convolutions (QDQ pairs around them, as
    ``kiln.quantize`` writes them, QLinearConv/QLinearMatMul, ConvInteger/MatMulInteger) run on the
    int8 dot-product kernels; False keeps them as the graph has them (the float path, for comparison).
    A cuda target (``"cuda -arch=sm_90"``) gives a :class:`GpuExecutor`.
    A CPU of another architecture (``"llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"``) gets every
    group built and scheduled for it (its vector lanes and registers); such an executor cannot run here:
    ``export_library`` it with ``CC=aarch64-linux-gnu-gcc`` and run the library on the device through
    kiln's runtime (``tools/kiln_run_model.c``; ``scripts/build_aarch64_runner.sh`` cross-builds it).
    dims: for a model with symbolic dimensions, the inclusive range of each
    shape variable (``{"batch": (1, 32), "seq": (1, 512)}``): every run is
    checked against it, and ``memory_bound()`` reports the largest arena.
    sizes: the sizes calls will most likely have per shape variable, most likely first
    (``{"seq": [128, 384]}``): kernels are scheduled for the first, a symbolic batch takes the convolution
    forms (Winograd or direct, and the tile) of the first (of 8 within ``dims`` when not given), and with ``db=`` each
    group takes the record ``kiln.tune_model(..., sizes=)`` tuned at the first size that has one.
    size_variants: matmul, conv and reduction groups over shape variables keep a kernel per size
    bucket (1, 2-16, 17-256, 257 up, within ``dims``) where the code differs, picked per new shape
    at run time; False keeps one kernel per group (compiles several times faster, slower far from
    the likely size).
    """
    if not isinstance(model, Graph):
        raise KilnError(f"kiln.compile takes a kiln.graph.Graph (from from_onnx, from_torch or a Builder), got a {type(model).__name__}")
    model, bf16_dot = _with_precision(model, precision, target, bf16_dot)
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
    exe = Executor(_g.compile(model, str(target), db or "", fuse, plain, dump, layout, bf16, _winograd_tile(winograd), parse_dims(dims), parse_sizes(sizes), bool(size_variants), bool(int8)), model)
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
