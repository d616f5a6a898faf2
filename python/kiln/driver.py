"""kiln.lower and kiln.build: from a schedule to a loop nest or to a callable module."""
import logging
import os

from ._ffi import KilnError, _kiln
from .runtime import Module

_log = logging.getLogger("kiln")


def arg_tensors(args, what):
    """A kernel's arguments as tensors (an operation stands for its first output); `what` names the
    caller in the error raised for anything else."""
    if isinstance(args, (_kiln.Tensor, _kiln.Operation)):
        args = [args]
    if not isinstance(args, (list, tuple)):
        raise KilnError(f"{what}: args must be a list of tensors (inputs and outputs, in call order)")
    out = []
    for i, a in enumerate(args):
        if isinstance(a, _kiln.Operation):
            a = a.output(0)
        if not isinstance(a, _kiln.Tensor):
            raise KilnError(f"{what}: args[{i}] is a {type(a).__name__}, expected a tensor; "
                            "scalar shape variables are added after the tensors automatically")
        out.append(a)
    return out


def _check_schedule(s, what):
    if not isinstance(s, _kiln.Schedule):
        raise KilnError(f"{what}: expected a schedule (kiln.te.create_schedule), got {type(s).__name__}")


def lower(s, args, name="main", run_passes=True, dump_ir=False, simple_mode=False):
    """Lowers schedule ``s`` to a function taking ``args`` (tensors, in call order).

    Scalar shape variables, if any, become int32 parameters after the tensors.
    ``print()`` of the result shows the loop nest; ``run_passes=False`` gives the
    nest before the loop passes, and ``dump_ir=True`` (or ``KILN_DUMP_IR=1``)
    prints the IR after every pass. ``simple_mode`` is accepted for TVM's
    ``tvm.lower(s, args, simple_mode=True)``: kiln always prints the plain loop nest.
    """
    _check_schedule(s, "lower")
    return _kiln.lower(s, arg_tensors(args, "lower"), name, run_passes, dump_ir)


def _as_schedule(s, what):
    """A schedule, or the default schedule of the given output tensor(s)."""
    if isinstance(s, _kiln.Schedule):
        return s
    if isinstance(s, (_kiln.Tensor, _kiln.Operation)) or (isinstance(s, (list, tuple)) and s and all(
            isinstance(t, (_kiln.Tensor, _kiln.Operation)) for t in s)):
        return _kiln.Schedule.create(s)
    _check_schedule(s, what)


def _is_cuda(target):
    if isinstance(target, _kiln.Target):
        return target.kind == "cuda"
    return isinstance(target, str) and target.split(" ", 1)[0] == "cuda"


def build(s, args, target="llvm", name="main", db=None):
    """Compiles schedule ``s`` for ``target`` into a callable :class:`kiln.runtime.Module`.

    ``s`` is a schedule, or the output tensor(s) to build with their default
    schedule. ``target`` is a string (``"llvm"``: the host CPU;
    ``"llvm -mcpu=znver3 -num-cores=2"``) or a :class:`kiln.Target`. The module
    is called with the arguments in the order of ``args``: ``mod(a, b, c)``.
    A cuda target (``"cuda -arch=sm_90"``) gives a :class:`kiln.gpu.CudaModule`
    (CUDA C, cubin, and a GPU simulator; see :mod:`kiln.gpu`).

    With ``db`` (the path of a tuning database, see :func:`kiln.tune`) the
    best record for this computation and target is applied instead of ``s``
    when one exists; which one is logged at debug level (Python logging,
    logger "kiln", or ``KILN_LOG=debug``).
    """
    s = _as_schedule(s, "build")
    tensors = arg_tensors(args, "build")
    if _is_cuda(target):
        # A GPU kernel: kiln.gpu.CudaModule (get_source(), simulate(), call on a GPU).
        from . import gpu
        return gpu.build(s, tensors, str(target), name)
    if db is not None:
        if not hasattr(_kiln, "tuner"):
            raise KilnError("build(db=...): this kiln was built without the auto-scheduler (it needs XGBoost: libxgboost-dev)")
        found = best_record(_kiln.tuner.make_task(tensors, target, ""), db)
        if found is not None:
            s = found[0]
    native = _kiln.build(s, tensors, target, name)
    # The kernel writes the computed tensors: numpy arrays passed there must be writeable.
    written = [i for i, t in enumerate(tensors) if t.op.kind == "compute"]
    return Module(native, entry_name=name, written=written)


def best_record(task, db):
    """The best record of a tuning task (kiln.tuner.Task) in the database `db`: (schedule replayed on
    the task's tensors, trace, record id, median seconds), or None. Which one is logged at debug level.
    build(db=) applies it; kiln.tuner.best_schedule returns its schedule."""
    found = _kiln.tuner.best_record(task, os.fspath(db))
    if found is None:
        _log.debug("kiln: no tuning record for %s (workload %s) on '%s' in %s", task.name, task.workload_key,
                   task.target, db)
        return None
    sched, trace, record_id, median = found
    _log.debug("kiln: using tuning record %d of %s for %s (workload %s) on '%s': median %.6g ms",
               record_id, db, task.name, task.workload_key, task.target, median * 1e3)
    return sched, trace, record_id, median


__all__ = ["lower", "build", "arg_tensors", "best_record"]


def build_count():
    """How many kernels kiln has compiled in this process (kiln.build, kiln.compile's groups, tuning measurements):
    a model compiled with symbolic dimensions compiles none when new shapes arrive."""
    return _kiln.build_count()
