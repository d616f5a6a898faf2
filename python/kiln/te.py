"""Tensor expressions: declare what to compute, then schedule how.

Declaring::

    n = te.var("n")                                   # a scalar parameter
    A = te.placeholder((n, 64), "float32", name="A")  # an input
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((n, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

``fcompute``'s parameter names become the axis names (``C.op.axis`` are
``i`` and ``j`` above, and the loops print with these names).

Scheduling (every primitive is recorded in the schedule's trace)::

    s = te.create_schedule(C)               # a tensor, an op, or a list of them
    io, ii = s[C].split(C.op.axis[0], factor=8)
    s[C].reorder(io, C.op.axis[1], ii)
    CL = s.cache_write(C, "local")          # C.op.axis still names C's loops
    trace = s.trace()                       # prints as JSON
    s2 = te.Schedule.from_trace(C, trace)   # replays it
    print(trace.to_python())                # the Python that rebuilds it

Dtype rules. Python operators on expressions (``+ - * / // % **``,
comparisons, unary ``-``, ``abs``) follow kiln's C++ promotion rules
(``kiln/ir/op.h``):

1. Operands of one dtype keep it.
2. A constant adapts to the other side: ``x + 1`` keeps ``x``'s dtype
   (int8, float16, ...). A Python float next to an integer expression makes
   the result float32; next to a float expression it takes that dtype.
   Python ints are int32 constants (int64 beyond int32's range), Python
   floats float32, numpy scalars their own dtype.
3. Integer with float: the integer is converted to the float type.
4. Two integers or two floats: the wider wins; int with uint of one width
   gives int.
5. A scalar with a vector is broadcast.

Python semantics on top: ``/`` is true division (two integer operands are
converted to float32 first); ``//`` and ``%`` on integers are floordiv and
floormod (rounding toward negative infinity, as in Python; ``truncdiv`` and
``truncmod`` give C's rounding); on floats ``//`` is ``floor(a / b)`` and
``%`` is ``a - floor(a / b) * b``. ``&``, ``|`` and ``~`` are logical and, or
and not of bool expressions (comparisons); kiln has no bitwise operators.
Comparisons give bool expressions; ``if``/``in`` on ``a == b`` tests whether
both sides are the same node (so lists of expressions behave), and any other
expression has no truth value in Python (use ``if_then_else`` or ``select``).
Math functions (``exp``, ``log``, ...) convert integer arguments to float32.

Every error is a :class:`kiln.KilnError`.
"""
import builtins
import inspect

from ._ffi import KilnError, _kiln

Expr = _kiln.Expr
Var = _kiln.Var
IterVar = _kiln.IterVar
Tensor = _kiln.Tensor
Operation = _kiln.Operation
Schedule = _kiln.Schedule
Stage = _kiln.Stage
Trace = _kiln.Trace

# Elementwise functions, straight from the extension (argument sugar lives there).
const = _kiln.const
cast = _kiln.cast
select = _kiln.select
if_then_else = _kiln.if_then_else
likely = _kiln.likely
floordiv = _kiln.floordiv
floormod = _kiln.floormod
truncdiv = _kiln.truncdiv
truncmod = _kiln.truncmod
power = _kiln.pow
logical_and = _kiln.logical_and
logical_or = _kiln.logical_or
logical_not = _kiln.logical_not
exp = _kiln.exp
log = _kiln.log
sqrt = _kiln.sqrt
rsqrt = _kiln.rsqrt
tanh = _kiln.tanh
erf = _kiln.erf
sigmoid = _kiln.sigmoid
fabs = _kiln.fabs
abs = _kiln.abs  # noqa: A001 - mirrors numpy / TVM naming
floor = _kiln.floor
ceil = _kiln.ceil
round = _kiln.round  # noqa: A001
trunc = _kiln.trunc
sin = _kiln.sin
cos = _kiln.cos
#: Two float32 values rounded to bfloat16, packed in a uint32 (lo in the low half).
pack_bf16x2 = _kiln.pack_bf16x2
#: The float32 dot product of two pack_bf16x2 pairs (vdpbf16ps where the target has AVX-512 BF16).
dot_bf16x2 = _kiln.dot_bf16x2
dot_i8x4 = _kiln.dot_i8x4
maximum = _kiln.max
minimum = _kiln.min
workload_key = _kiln.workload_key
canonical_dag = _kiln.canonical_dag


def var(name="v", dtype="int32"):
    """A scalar variable: a symbolic shape or a scalar parameter of the kernel."""
    return Var(name, dtype)


def placeholder(shape, dtype="float32", name="placeholder"):
    """An input tensor of ``shape`` (ints or variables) and ``dtype``."""
    return _kiln.placeholder(shape, dtype, name)


def _axis_names(fcompute, ndim, name):
    try:
        sig = inspect.signature(fcompute)
    except (TypeError, ValueError):
        return []  # a builtin or C callable: default names
    params = list(sig.parameters.values())
    if builtins.any(p.kind == p.VAR_POSITIONAL for p in params):
        return []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if not (len(required) <= ndim <= len(positional)):
        raise KilnError(f"compute '{name}': fcompute takes {len(required)} index arguments but the shape has "
                        f"{ndim} dimensions; give it one parameter per dimension")
    return [p.name for p in positional[:ndim]]


def compute(shape, fcompute, name="compute"):
    """A tensor whose element at ``(i, j, ...)`` is ``fcompute(i, j, ...)``.

    ``fcompute`` takes one index variable per dimension and returns an
    expression (or a Python number); its parameter names name the axes.
    A reduction is a ``sum``/``max``/``min``/``prod`` at the top of the body.
    """
    if isinstance(shape, (int, Expr)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise KilnError(f"compute '{name}': the shape must be a tuple or list of ints or expressions")
    if not callable(fcompute):
        raise KilnError(f"compute '{name}': fcompute must be a function of the indices, e.g. lambda i, j: A[i, j] * 2")
    shape = tuple(shape)
    return _kiln.compute(shape, fcompute, name, _axis_names(fcompute, len(shape), name))


def reduce_axis(dom, name="k"):
    """A reduction axis over ``dom = (lo, hi)`` (hi excluded)."""
    return _kiln.reduce_axis(dom, name)


def _is_axis_spec(axis):
    if isinstance(axis, IterVar):
        return True
    return isinstance(axis, (list, tuple)) and len(axis) > 0 and builtins.all(isinstance(a, IterVar) for a in axis)


def sum(expr, axis, where=None):  # noqa: A001 - TVM's name
    """Sum of ``expr`` over the reduce axis (or list of axes) ``axis``, where ``where`` holds."""
    return _kiln.sum(expr, axis, where)


def prod(expr, axis, where=None):
    """Product of ``expr`` over ``axis``."""
    return _kiln.prod(expr, axis, where)


def max(expr, axis=None, where=None):  # noqa: A001
    """Maximum over reduce axes (``max(A[i, k], axis=k)``), or of two values
    (``max(a, b)``, same as :func:`maximum`) when ``axis`` is not an axis."""
    if _is_axis_spec(axis):
        return _kiln.reduce_max(expr, axis, where)
    if axis is None:
        raise KilnError("max needs axis= (a reduce axis) or a second value")
    return _kiln.max(expr, axis)


def min(expr, axis=None, where=None):  # noqa: A001
    """Minimum over reduce axes, or of two values (see :func:`max`)."""
    if _is_axis_spec(axis):
        return _kiln.reduce_min(expr, axis, where)
    if axis is None:
        raise KilnError("min needs axis= (a reduce axis) or a second value")
    return _kiln.min(expr, axis)


def all(*conds):  # noqa: A001
    """The logical and of bool expressions (True for none)."""
    out = _kiln.Expr(True)
    for c in conds:
        out = _kiln.logical_and(out, c)
    return out


def any(*conds):  # noqa: A001
    """The logical or of bool expressions (False for none)."""
    out = _kiln.Expr(False)
    for c in conds:
        out = _kiln.logical_or(out, c)
    return out


class ThreadAxis:
    """A GPU index that ``s[T].bind(axis, thread)`` binds loops to, as TVM's
    ``te.thread_axis``: ``thread_axis("threadIdx.x")``, ``thread_axis((0, 8),
    "threadIdx.y")``, ``thread_axis((0, 2), "vthread", name="vx")``. Loops of
    several stages bound to one tag run on the same index; their extents come
    from the loops (``dom`` is kept for reading, not enforced)."""

    def __init__(self, thread_tag, dom=None, name=None):
        self.thread_tag = thread_tag
        self.dom = dom
        self.var = Var(name or thread_tag, "int32")

    def __repr__(self):
        return f"thread_axis({self.dom!r}, {self.thread_tag!r})" if self.dom else f"thread_axis({self.thread_tag!r})"


def thread_axis(dom=None, tag="", name=""):
    """A thread index to bind loops to (see :class:`ThreadAxis`); ``dom`` may be the tag itself."""
    if isinstance(dom, str):
        dom, tag = None, dom
    if not tag:
        raise KilnError("thread_axis needs a tag: blockIdx.x/y/z, threadIdx.x/y/z or vthread")
    if dom is not None and not (isinstance(dom, (tuple, list)) and len(dom) == 2):
        raise KilnError(f"thread_axis '{tag}': dom must be (begin, end), got {dom!r}")
    return ThreadAxis(tag, tuple(dom) if dom is not None else None, name or None)


def create_schedule(ops):
    """A schedule for the outputs ``ops``: a tensor, an operation, or a list of them."""
    return Schedule.create(ops)


__all__ = [
    "Expr", "Var", "IterVar", "Tensor", "Operation", "Schedule", "Stage", "Trace", "var", "const", "cast",
    "placeholder", "compute", "reduce_axis", "sum", "prod", "max", "min", "maximum", "minimum", "all", "any",
    "select", "if_then_else", "likely", "floordiv", "floormod", "truncdiv", "truncmod", "power", "logical_and",
    "logical_or", "logical_not", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "fabs", "abs", "floor",
    "ceil", "round", "trunc", "sin", "cos", "pack_bf16x2", "dot_bf16x2", "dot_i8x4", "thread_axis", "ThreadAxis", "create_schedule", "workload_key",
    "canonical_dag", "KilnError",
]
